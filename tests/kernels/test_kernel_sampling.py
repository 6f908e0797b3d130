"""Fused masked sampling: Triton == twin exactly (ids), logprobs close, gate and forcing."""

from __future__ import annotations

import pytest
import torch
from kernel_inputs import random_bitmask, random_logits
from thinkgate.kernels import ReasoningState, SamplingTensors, sample
from thinkgate.kernels.bitmask import apply_token_bitmask_inplace_ref
from thinkgate.kernels.sampling import sample_ref, sample_triton

VOCABS = [1, 31, 32, 33, 8192, 32000, 32001, 151936]
DTYPES = [torch.float32, torch.float16, torch.bfloat16]
# the interpreter computes discarded lanes of -inf rows too (e.g. -inf - -inf); harmless
pytestmark = [pytest.mark.filterwarnings("ignore:invalid value encountered in subtract"),
              pytest.mark.filterwarnings("ignore:divide by zero encountered in log2")]


def _inputs(rows: int, device: str, gen: torch.Generator) -> dict[str, torch.Tensor]:
    temperature = torch.tensor([0.0, 1.0, 0.7, 1.5] * rows)[:rows]
    return {
        "temperature": temperature.to(device),
        "seeds": torch.randint(0, 2**62, (rows,), generator=gen).to(device),
        "steps": torch.randint(0, 2**40, (rows,), generator=gen).to(device),
    }


def _both(logits: torch.Tensor, splits: int = 1, tile: int = 1024, **kw):
    ours = sample_triton(logits, **kw, logprobs=True, num_splits=splits, tile=tile)
    twin = sample_ref(logits, **kw, logprobs=True)
    assert torch.equal(ours[0], twin[0])
    torch.testing.assert_close(ours[1], twin[1], rtol=1e-4, atol=1e-4)
    return ours


# every vocab size in fp32; the half types on the awkward and the largest sizes
CASES = [(v, torch.float32) for v in VOCABS] + [
    (v, d) for d in (torch.float16, torch.bfloat16) for v in (1, 33, 32001)
] + [(151936, torch.bfloat16)]


@pytest.mark.parametrize(("vocab", "dtype"), CASES)
def test_triton_matches_twin(vocab: int, dtype: torch.dtype, gen, device) -> None:
    rows = 2 if vocab > 100_000 else 4  # row 0 greedy, row 1 sampled, ...
    logits = random_logits(rows, vocab, dtype, gen, pad=5).to(device)
    bitmask = random_bitmask(rows, vocab, gen).to(device)
    kw = _inputs(rows, device, gen)
    splits = 4 if vocab >= 8192 else 1
    tile = 8192 if vocab > 8192 else 1024
    _both(logits, splits, tile, **kw)
    ids, _ = _both(logits, splits, tile, bitmask=bitmask, **kw)
    allowed = logits.clone()
    apply_token_bitmask_inplace_ref(allowed, bitmask)
    for r, i in enumerate(ids.tolist()):
        assert i == -1 if torch.isneginf(allowed[r]).all() else torch.isfinite(allowed[r, i])
    assert torch.equal(ids[0], allowed[0].float().argmax()) or ids[0] == -1  # greedy row


@pytest.mark.parametrize("splits", [1, 8])
@pytest.mark.parametrize("tile", [512, 2048])
def test_split_and_tile_do_not_change_results(splits: int, tile: int, gen, device) -> None:
    logits = random_logits(5, 5000, torch.bfloat16, gen).to(device)
    bitmask = random_bitmask(5, 5000, gen).to(device)
    grammar_rows = torch.tensor([True, False, True, True, False], device=device)
    _both(logits, splits, tile, bitmask=bitmask, grammar_rows=grammar_rows,
          **_inputs(5, device, gen))


def test_greedy_ties_pick_the_first_and_nan_or_banned_rows(device) -> None:
    logits = torch.tensor([[1.0, 3.0, 3.0, 0.0], [float("nan"), 2.0, 2.0, 5.0],
                           [float("-inf")] * 4], device=device)
    kw = {"temperature": torch.zeros(3, device=device),
          "seeds": torch.zeros(3, dtype=torch.int64, device=device),
          "steps": torch.zeros(3, dtype=torch.int64, device=device)}
    bitmask = torch.tensor([[0b1111], [0b0111], [0b1111]], dtype=torch.int32, device=device)
    ids, _ = _both(logits, bitmask=bitmask, **kw)
    assert ids.tolist() == [1, 1, -1]


def test_reasoning_gate_and_forced_tokens(gen, device) -> None:
    vocab = 300
    # row 0 thinks (no grammar yet), row 1 answers (grammar), row 2 thinks with grammar inside,
    # row 3 thinks with its budget spent (forced), rows 4-5 are slots 5 and 4 of the state
    state = ReasoningState.allocate(6, 3, device=device)
    state.set_slot(0, [290, 291])
    state.set_slot(1, [290, 291], thinking=False)
    state.set_slot(2, [290, 291], grammar_in_reasoning=True)
    state.set_slot(3, [290, 291, 292], budget=0)
    state.set_slot(4, [290], budget=0)
    state.set_slot(5, None)
    state.progress[3] = 1
    state.num_reasoning_tokens[3] = 1  # one marker token already emitted
    slots = torch.tensor([0, 1, 2, 3, 5, 4], device=device)
    logits = random_logits(6, vocab, torch.float32, gen).to(device)
    bitmask = torch.zeros(6, 10, dtype=torch.int32, device=device)
    bitmask[:, 0] = 0b10  # the grammar allows only token 1
    kw = _inputs(6, device, gen)
    ids, lp = _both(logits, 2, 256, bitmask=bitmask, reasoning=state, slots=slots, **kw)
    assert ids[1] == 1 and ids[2] == 1 and ids[4] == 1  # grammar applies
    assert ids[0] != 1 or logits[0].argmax() == 1  # still thinking: unconstrained
    assert ids[3] == 291 and ids[5] == 290  # forced marker tokens
    assert lp[3] == 0.0 and lp[5] == 0.0
    assert lp[1] == 0.0  # a single allowed token has probability 1


def test_no_budget_forcing_before_the_awaited_start_marker(device) -> None:
    # both rows have spent a budget of 0; row 1 still awaits its start marker (280)
    state = ReasoningState.create([[290], [290]], budgets=[0, 0], start_ids=[None, 280],
                                  device=device)
    logits = torch.zeros(2, 300, device=device)
    logits[:, 5] = 1.0
    kw = {"temperature": torch.zeros(2, device=device),
          "seeds": torch.zeros(2, dtype=torch.int64, device=device),
          "steps": torch.zeros(2, dtype=torch.int64, device=device)}
    ids, _ = _both(logits, reasoning=state, **kw)
    assert ids.tolist() == [290, 5]


def test_public_sample_dispatches_and_filters(gen, device) -> None:
    logits = random_logits(4, 1000, torch.float32, gen).to(device)
    sampling = SamplingTensors.from_lists([1.0, 0.8, 1.0, 0.0], seeds=[1, 2, 3, 4],
                                          steps=[0, 0, 0, 0], top_k=[5, 0, 0, 3],
                                          top_p=[1.0, 0.5, 1.0, 1.0], min_p=[0.0, 0.0, 0.2, 0.0],
                                          device=device)
    out = sample(logits, sampling, return_logprobs=True)
    top5 = logits[0].topk(5).indices.tolist()
    assert out.token_ids[0] in top5
    assert out.token_ids[3] == logits[3].argmax()
    probs = torch.softmax(logits[2], 0)
    assert probs[out.token_ids[2]] >= 0.2 * probs.max()
    assert out.logprobs is not None and torch.isfinite(out.logprobs).all()


def test_row_results_do_not_depend_on_the_batch(gen, device) -> None:
    logits = random_logits(6, 2000, torch.float32, gen).to(device)
    kw = _inputs(6, device, gen)
    full, _ = sample_triton(logits, **kw, num_splits=2, tile=512)
    part = {k: v[[4, 1]] for k, v in kw.items()}
    sub, _ = sample_triton(logits[[4, 1]], **part, num_splits=1, tile=1024)
    assert sub.tolist() == full[[4, 1]].tolist()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("splits", [1, 2])
def test_one_row_full_and_tail_tiles_match_twin(dtype, splits: int, gen, device) -> None:
    """One row is launched with stride 0, and tiles wholly inside the row load without a
    bounds mask: every row of a batch, sampled alone, gives the twin's id and logprob."""
    logits = random_logits(4, 3 * 512 + 5, dtype, gen, pad=3).to(device)
    bitmask = random_bitmask(4, 3 * 512 + 5, gen).to(device)
    kw = _inputs(4, device, gen)
    for row in range(4):
        one = {k: v[row:row + 1] for k, v in kw.items()}
        _both(logits[row:row + 1], splits, 512, **one)
        _both(logits[row:row + 1], splits, 512, bitmask=bitmask[row:row + 1], **one)


def test_bad_arguments_raise_value_error(device) -> None:
    logits = torch.zeros(2, 64, device=device)
    ok = SamplingTensors.from_lists([1.0, 1.0], device=device)
    with pytest.raises(ValueError, match="sampling.seeds must be"):
        sample(logits, SamplingTensors(ok.temperature, ok.seeds[:1], ok.steps))
    with pytest.raises(ValueError, match="bitmask must be"):
        sample(logits, ok, bitmask=torch.zeros(3, 2, dtype=torch.int32, device=device))
    with pytest.raises(ValueError, match="top_p values"):
        SamplingTensors.from_lists([1.0], top_p=[0.0])
    with pytest.raises(ValueError, match="slots given without"):
        sample(logits, ok, slots=torch.zeros(2, dtype=torch.int32, device=device))
    with pytest.raises(ValueError, match="logits dtype"):
        sample(logits.int(), ok)


@pytest.mark.gpu
@pytest.mark.parametrize("rows", [1, 64, 300])
def test_cuda_default_splits_match_twin(rows: int) -> None:
    """Compiled Triton with the automatic split count (atomic last-program reduction)."""
    gen = torch.Generator().manual_seed(rows)
    logits = random_logits(rows, 151936, torch.bfloat16, gen).cuda()
    bitmask = random_bitmask(rows, 151936, gen).cuda()
    kw = _inputs(rows, "cuda", gen)
    for _ in range(3):  # the per-row counters must be reset between calls
        ours = sample_triton(logits, **kw, bitmask=bitmask, logprobs=True)
        twin = sample_ref(logits, **kw, bitmask=bitmask, logprobs=True)
        assert torch.equal(ours[0], twin[0])
        torch.testing.assert_close(ours[1], twin[1], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("vocab", [1, 33, 32001])
def test_greedy_fast_path_equals_the_full_path(gen, vocab: int) -> None:
    """All rows greedy, no mask, no gate, no logprobs: the CPU argmax path of `sample` picks
    what the kernel's twin picks, ties (first index), NaN and all -inf rows included."""
    logits = random_logits(6, vocab, torch.float32, gen)
    logits[1] = 0.0  # every column ties
    logits[2, : min(vocab, 5)] = float("nan")
    logits[3] = float("-inf")  # nothing to sample: -1
    if vocab > 3:
        logits[4, [1, 3]] = logits[4].max() + 1  # a tie between two columns
    greedy = SamplingTensors.from_lists([0.0] * 6, seeds=list(range(6)))
    fast = sample(logits, greedy).token_ids
    full, _ = sample_ref(logits, greedy.temperature, greedy.seeds, greedy.steps)
    assert fast.tolist() == full.tolist()
    clean = logits[[0, 1, 4, 5]]
    fast = sample(clean, SamplingTensors.from_lists([0.0] * 4)).token_ids
    assert fast.tolist() == clean.argmax(1).tolist()
    zeros = torch.zeros(4, dtype=torch.int64)
    assert fast.tolist() == sample_ref(clean, torch.zeros(4), zeros, zeros)[0].tolist()


@pytest.mark.parametrize("vocab", [33, 300, 32001])
def test_all_greedy_twin_equals_triton_without_logprobs(vocab: int, gen) -> None:
    """The twin's all-greedy path (bitwise mask on a copy + first maximum) picks the kernel's
    ids: grammar rows and not, gate thinking/answering/forced, NaN, ties and all-banned rows."""
    rows = 8
    logits = random_logits(rows, vocab, torch.float32, gen, pad=3)
    logits[1, :5] = float("nan")  # a NaN would win a plain argmax; the kernel bans it
    logits[2] = 0.0  # every column ties
    bitmask = random_bitmask(rows, vocab - 3, gen)
    bitmask[3] = 0  # nothing allowed on a grammar row
    bitmask[4] = 0
    bitmask[4, 0] = 1  # only token 0, which row 4 (still thinking: no grammar) does not pick
    logits[4, 0] = logits[4].min() - 1
    grammar_rows = torch.tensor([True, True, False, True, True, True, False, True])
    state = ReasoningState.allocate(rows, 2)
    for slot in range(rows):
        state.set_slot(slot, [vocab - 2, vocab - 1], thinking=slot in (4, 5),
                       budget=0 if slot == 5 else None)
    greedy = {"temperature": torch.zeros(rows),
              "seeds": torch.zeros(rows, dtype=torch.int64),
              "steps": torch.zeros(rows, dtype=torch.int64)}
    gated = {"bitmask": bitmask, "grammar_rows": grammar_rows, "reasoning": state}
    for kw in ({}, {"bitmask": bitmask, "grammar_rows": grammar_rows}, gated):
        twin, lp = sample_ref(logits, **greedy, **kw)
        ours, _ = sample_triton(logits, **greedy, **kw, logprobs=False, num_splits=1, tile=1024)
        assert lp is None and torch.equal(twin, ours), kw.keys()
    assert twin[5] == vocab - 2 and twin[4] != 0 and twin[3] == -1
    # without the NaN and all-banned rows (which send the twin to its general path)
    keep = torch.tensor([0, 2, 4, 5, 6, 7])
    sub = {"bitmask": bitmask[keep], "grammar_rows": grammar_rows[keep], "reasoning": state,
           "slots": keep}
    greedy = {k: v[keep] for k, v in greedy.items()}
    twin, _ = sample_ref(logits[keep], **greedy, **sub)
    ours, _ = sample_triton(logits[keep], **greedy, **sub, logprobs=False, num_splits=1,
                            tile=1024)
    assert torch.equal(twin, ours)
    assert twin[2] != 0 and twin[3] == vocab - 2  # row 4 thinks freely; row 5 is forced
