"""The copy machinery of the bundled models' training (`benchmarks/training/copy_head.py`,
`batches.repeat_batch`): where an induction head should look, one head's attention recomputed
as its layer computes it, and copy drills whose loss covers only the predictable half."""

from __future__ import annotations

import random

import pytest
from thinkgate.benchmarks.training.batches import repeat_batch
from thinkgate.benchmarks.training.copy_head import (
    copy_loss,
    head_weights,
    induction_targets,
    watch_copy_heads,
)

torch = pytest.importorskip("torch")


def _answer_from(ids: list[int], start: int):
    input_ids = torch.tensor([ids])
    labels = torch.full_like(input_ids, -100)
    labels[0, start:] = input_ids[0, start:]
    return input_ids, labels


def test_a_repeated_run_points_each_answer_position_at_its_first_copy() -> None:
    ids = [5, 6, 7, 8, 5, 6, 7, 8]
    sources, ok = induction_targets(*_answer_from(ids, 5))
    # position p (holding ids[p]) predicts ids[p + 1]; the first copy of that token follows
    # the first copy of ids[p]
    assert ok[0].tolist() == [False] * 4 + [True, True, True, False]
    for p, j in ((4, 1), (5, 2), (6, 3)):
        assert sources[0, p].nonzero().flatten().tolist() == [j]


def test_an_ambiguous_token_takes_more_context() -> None:
    # "9" follows "2" twice (then 3, then 4); only "3 2 9" tells which copy is being repeated
    ids = [1, 2, 9, 3, 2, 9, 4, 3, 2, 9, 4]
    sources, ok = induction_targets(*_answer_from(ids, 10))
    assert ok[0, 9] and sources[0, 9].nonzero().flatten().tolist() == [6]
    # with one token of context allowed, no position qualifies: every choice is ambiguous
    _, ok1 = induction_targets(*_answer_from(ids, 10), max_context=1)
    assert not ok1[0, 9]


def test_positions_outside_the_answer_or_without_a_copy_have_no_target() -> None:
    ids = [1, 2, 3, 4, 5, 6]
    sources, ok = induction_targets(*_answer_from(ids, 3))
    assert not ok.any() and not sources.any()


@pytest.fixture(scope="module")
def tiny_model():
    from transformers import Qwen3Config, Qwen3ForCausalLM

    config = Qwen3Config(vocab_size=64, hidden_size=64, intermediate_size=128,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         head_dim=16, tie_word_embeddings=True)
    config._attn_implementation = "eager"  # returns its attention probabilities
    torch.manual_seed(0)
    return Qwen3ForCausalLM(config).eval()


@pytest.mark.parametrize("head", [(0, 0), (1, 3)])
def test_head_weights_match_the_layers_own_attention(tiny_model, head) -> None:
    seen = watch_copy_heads(tiny_model, [head])
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(3, 64, (2, 12), generator=gen)
    mask = torch.ones(2, 12, dtype=torch.long)
    mask[1, 9:] = 0  # a shorter row: its padding is masked
    with torch.no_grad():
        out = tiny_model.model(input_ids=ids, attention_mask=mask, output_attentions=True)
        mine = head_weights(tiny_model, seen[head[0]], head, mask)
    ref = out.attentions[head[0]][:, head[1]]
    assert torch.allclose(mine[0], ref[0], atol=1e-5)
    assert torch.allclose(mine[1, :9, :9], ref[1, :9, :9], atol=1e-5)
    seen.clear()


def test_copy_loss_is_small_only_where_the_head_looks_at_the_sources(tiny_model) -> None:
    seen = watch_copy_heads(tiny_model, [(1, 0)])
    input_ids, labels = _answer_from([5, 6, 7, 8, 5, 6, 7, 8], 5)
    mask = torch.ones_like(input_ids)
    with torch.no_grad():
        tiny_model.model(input_ids=input_ids, attention_mask=mask)
        loss = copy_loss(tiny_model, seen, input_ids, labels, mask)
    # an untrained head spreads its attention: about -log(1 / (p + 1)) per position
    assert 0.5 < loss.item() < 4.0
    plain_ids, plain_labels = _answer_from([1, 2, 3, 4, 5, 6, 7, 8], 5)
    with torch.no_grad():  # no answer position has a source: no loss at all
        tiny_model.model(input_ids=plain_ids, attention_mask=mask)
        none = copy_loss(tiny_model, seen, plain_ids, plain_labels, mask)
    assert none is None


def test_repeat_batches_learn_only_the_predictable_second_half() -> None:
    input_ids, labels, mask = repeat_batch(random.Random(0), 8, 100)
    for ids, lab, m in zip(input_ids.tolist(), labels.tolist(), mask.tolist()):
        n = sum(m) // 2
        assert ids[:n] == ids[n:2 * n] and all(3 <= t < 100 for t in ids[:2 * n])
        # the second copy's first token is unpredictable: the loss starts one after it
        assert lab[:n + 1] == [-100] * (n + 1) and lab[n + 1:2 * n] == ids[n + 1:2 * n]
        assert all(x == -100 for x in lab[2 * n:])
