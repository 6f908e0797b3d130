"""Per-row reasoning state on the device: thinking or answering, and the end-of-thinking marker.

A row of a reasoning model starts *thinking* and switches to *answering* once it has emitted its
end marker (``</think>``: one token id, or a sequence such as ``</seed:think>``). A row whose
model writes the start marker itself (Qwen3's template leaves ``<think>`` to it) *awaits* that
marker (``start_id``, one token id): as vLLM's ``thinking_token_budget`` does, its budget counts
only the tokens after it, and nothing is forced before it. Each step::

    for row in batch:                       # update_reasoning_state(state, sampled_ids)
        slot = slots[row] if slots is not None else row
        if thinking[slot] and end_len[slot] > 0:
            tok = sampled_ids[row]
            progress[slot] = kmp_step(end_ids[slot], progress[slot], tok)
            if start_id[slot] >= 0:         # awaiting the start marker: nothing counts
                if progress[slot] == end_len[slot]:
                    thinking[slot], progress[slot] = 0, 0
                elif tok == start_id[slot]:
                    start_id[slot] = -1     # the budget counts from the next token
            elif progress[slot] == end_len[slot]:
                thinking[slot], progress[slot] = 0, 0
                num_reasoning_tokens[slot] -= end_len[slot] - 1  # the marker is not reasoning
            else:
                num_reasoning_tokens[slot] += 1

``kmp_step`` advances a Knuth-Morris-Pratt matcher over the marker (so ``a a b`` is found in
``a a a b``): O(marker length) per row per step, never a scan of the history. While a row thinks
with ``budget >= 0`` and ``num_reasoning_tokens - progress >= budget``, the sampler forces
``end_ids[progress]``: the rest of the marker, token by token (never while ``start_id >= 0``). Rows with no marker (no reasoning
parser) or created answering (the prompt already closed thinking) never change. The engine runs
this state in its step loop (engine/structured/reasoning_slots.py); tests/constrained/test_reasoning_gate.py
checks it against a plain-Python spec.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import triton
import triton.language as tl


@dataclass
class ReasoningState:
    """Device tensors, one entry per slot; M = longest end marker."""

    thinking: torch.Tensor  # (N,) int32, 1 = thinking, 0 = answering
    progress: torch.Tensor  # (N,) int32, marker tokens matched so far
    num_reasoning_tokens: torch.Tensor  # (N,) int32, tokens sampled while thinking, after start
    budget: torch.Tensor  # (N,) int32, max free reasoning tokens; -1 = unlimited
    grammar_in_reasoning: torch.Tensor  # (N,) int32, 1 = apply the grammar while thinking too
    end_ids: torch.Tensor  # (N, M) int32, marker token ids, padded with -1
    end_fail: torch.Tensor  # (N, M) int32, KMP failure function of the marker
    end_len: torch.Tensor  # (N,) int32, 0 = no reasoning parser
    start_id: torch.Tensor  # (N,) int32, start marker id awaited before counting; -1 = none

    @property
    def num_slots(self) -> int:
        return self.thinking.shape[0]

    @property
    def max_end_len(self) -> int:
        return self.end_ids.shape[1]

    @property
    def device(self) -> torch.device:
        return self.thinking.device

    @classmethod
    def allocate(
        cls, num_slots: int, max_end_len: int, device: torch.device | str = "cpu"
    ) -> ReasoningState:
        """`num_slots` answering rows without a marker; fill them with `set_slot`."""
        if num_slots < 0 or max_end_len < 1:
            raise ValueError(f"need num_slots >= 0 and max_end_len >= 1, got {num_slots}, "
                             f"{max_end_len}")

        def zeros(*shape: int) -> torch.Tensor:
            return torch.zeros(shape, dtype=torch.int32, device=device)

        return cls(
            thinking=zeros(num_slots),
            progress=zeros(num_slots),
            num_reasoning_tokens=zeros(num_slots),
            budget=zeros(num_slots) - 1,
            grammar_in_reasoning=zeros(num_slots),
            end_ids=zeros(num_slots, max_end_len) - 1,
            end_fail=zeros(num_slots, max_end_len),
            end_len=zeros(num_slots),
            start_id=zeros(num_slots) - 1,
        )

    @classmethod
    def create(
        cls,
        end_ids: Sequence[Sequence[int] | None],
        *,
        thinking: Sequence[bool] | None = None,
        budgets: Sequence[int | None] | None = None,
        grammar_in_reasoning: Sequence[bool] | None = None,
        start_ids: Sequence[int | None] | None = None,
        device: torch.device | str = "cpu",
    ) -> ReasoningState:
        """One slot per entry of `end_ids` (None or [] = no reasoning parser).

        `thinking` defaults to True for rows with a marker; pass False for rows whose prompt
        already closed thinking. `budgets` entries of None mean unlimited. `start_ids` entries
        are the start marker id a thinking row awaits in its output before its budget counts
        (None: counts from the first output token)."""
        n = len(end_ids)
        thinking = [True] * n if thinking is None else list(thinking)
        budgets = [None] * n if budgets is None else list(budgets)
        in_reasoning = [False] * n if grammar_in_reasoning is None else list(grammar_in_reasoning)
        starts = [None] * n if start_ids is None else list(start_ids)
        for name, seq in (("thinking", thinking), ("budgets", budgets),
                          ("grammar_in_reasoning", in_reasoning), ("start_ids", starts)):
            if len(seq) != n:
                raise ValueError(f"{name} has {len(seq)} entries, end_ids has {n}")
        max_len = max([len(e) for e in end_ids if e] + [1])
        rows = [_slot_values(e, t, b, g, max_len, s)
                for e, t, b, g, s in zip(end_ids, thinking, budgets, in_reasoning, starts)]
        host = {key: torch.tensor([r[key] for r in rows], dtype=torch.int32).reshape(n, -1)
                for key in ("thinking", "budget", "grammar_in_reasoning", "end_ids", "end_fail",
                            "end_len", "start_id")}
        zeros = torch.zeros(n, dtype=torch.int32, device=device)
        return cls(
            thinking=host["thinking"].reshape(n).to(device),
            progress=zeros,
            num_reasoning_tokens=zeros.clone(),
            budget=host["budget"].reshape(n).to(device),
            grammar_in_reasoning=host["grammar_in_reasoning"].reshape(n).to(device),
            end_ids=host["end_ids"].to(device),
            end_fail=host["end_fail"].to(device),
            end_len=host["end_len"].reshape(n).to(device),
            start_id=host["start_id"].reshape(n).to(device),
        )

    def set_slot(
        self,
        slot: int,
        end_ids: Sequence[int] | None,
        *,
        thinking: bool = True,
        budget: int | None = None,
        grammar_in_reasoning: bool = False,
        start_id: int | None = None,
    ) -> None:
        """(Re)initialise one slot for a newly admitted request (a few small copies)."""
        if not 0 <= slot < self.num_slots:
            raise ValueError(f"slot {slot} out of range for {self.num_slots} slots")
        if end_ids and len(end_ids) > self.max_end_len:
            raise ValueError(f"end marker {list(end_ids)} longer than max_end_len "
                             f"{self.max_end_len}")
        v = _slot_values(end_ids, thinking, budget, grammar_in_reasoning, self.max_end_len,
                         start_id)
        self.thinking[slot] = v["thinking"][0]
        self.progress[slot] = 0
        self.num_reasoning_tokens[slot] = 0
        self.budget[slot] = v["budget"][0]
        self.grammar_in_reasoning[slot] = v["grammar_in_reasoning"][0]
        self.end_ids[slot] = torch.tensor(v["end_ids"], dtype=torch.int32)
        self.end_fail[slot] = torch.tensor(v["end_fail"], dtype=torch.int32)
        self.end_len[slot] = v["end_len"][0]
        self.start_id[slot] = v["start_id"][0]


def _slot_values(
    end_ids: Sequence[int] | None, thinking: bool, budget: int | None, in_reasoning: bool,
    max_len: int, start_id: int | None = None,
) -> dict[str, list[int]]:
    marker = [int(t) for t in (end_ids or [])]
    if any(t < 0 for t in marker):
        raise ValueError(f"end marker ids must be >= 0, got {marker}")
    if start_id is not None and start_id < 0:
        raise ValueError(f"start marker id must be >= 0 or None, got {start_id}")
    thinks = bool(thinking) and bool(marker)
    if budget is not None and budget < 0:
        raise ValueError(f"thinking budget must be >= 0 or None, got {budget}")
    pad = max_len - len(marker)
    return {
        "thinking": [int(thinks)],
        "budget": [-1 if budget is None else int(budget)],
        "grammar_in_reasoning": [int(bool(in_reasoning))],
        "end_ids": marker + [-1] * pad,
        "end_fail": kmp_failure(marker) + [0] * pad,
        "end_len": [len(marker)],
        "start_id": [int(start_id) if thinks and start_id is not None else -1],
    }


def kmp_failure(marker: Sequence[int]) -> list[int]:
    """fail[i] = length of the longest proper prefix of marker[:i+1] that is also its suffix."""
    fail = [0] * len(marker)
    k = 0
    for i in range(1, len(marker)):
        while k > 0 and marker[i] != marker[k]:
            k = fail[k - 1]
        if marker[i] == marker[k]:
            k += 1
        fail[i] = k
    return fail


def reasoning_gate_ref(
    state: ReasoningState, slots: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per batch row: (grammar_allowed bool, forced bool, forced_id int64) before sampling."""
    idx = _slot_index(state, slots)
    end_len = state.end_len[idx]
    thinking = (state.thinking[idx] != 0) & (end_len > 0)
    if not bool(thinking.any()):  # every row answers: grammar everywhere, nothing forced
        none = torch.zeros_like(thinking)
        return ~none, none, torch.full(thinking.shape, -1, dtype=torch.int64, device=state.device)
    budget = state.budget[idx]
    progress = state.progress[idx].clamp(max=state.max_end_len - 1).long()
    spent = state.num_reasoning_tokens[idx] - state.progress[idx]
    forced = thinking & (state.start_id[idx] < 0) & (budget >= 0) & (spent >= budget)
    forced_id = state.end_ids[idx].gather(1, progress[:, None])[:, 0].long()
    grammar_ok = ~thinking | (state.grammar_in_reasoning[idx] != 0)
    return grammar_ok, forced, torch.where(forced, forced_id, -1)


def update_reasoning_state_ref(
    state: ReasoningState, sampled_ids: torch.Tensor, slots: torch.Tensor | None = None
) -> None:
    """Torch twin of the update kernel (the spec and the CPU path)."""
    idx = _slot_index(state, slots)
    tok = sampled_ids.to(device=state.device, dtype=torch.int64)
    end_len = state.end_len[idx]
    active = (state.thinking[idx] != 0) & (end_len > 0)
    if not bool(active.any()):  # every row answers: nothing moves (common once thinking ends)
        return
    end_ids = state.end_ids[idx].long()
    end_fail = state.end_fail[idx].long()
    s = state.progress[idx].long()
    for _ in range(state.max_end_len):
        back = active & (s > 0) & (end_ids.gather(1, s[:, None])[:, 0] != tok)
        s = torch.where(back, end_fail.gather(1, (s - 1).clamp(min=0)[:, None])[:, 0], s)
    s = torch.where(active & (end_ids.gather(1, s[:, None])[:, 0] == tok), s + 1, s)
    done = active & (s == end_len)
    start = state.start_id[idx]
    awaiting = active & (start >= 0)
    step = torch.where(done, 1 - end_len, active.to(torch.int32))
    state.num_reasoning_tokens[idx] += torch.where(awaiting, 0, step).to(torch.int32)
    state.start_id[idx] = torch.where(awaiting & ~done & (start == tok), -1, start)
    state.thinking[idx] = torch.where(done, 0, state.thinking[idx])
    state.progress[idx] = torch.where(done, 0, s).to(torch.int32)


@triton.jit
def _update_reasoning_kernel(
    ids_ptr,
    slots_ptr,
    thinking_ptr,
    progress_ptr,
    count_ptr,
    end_ids_ptr,
    end_fail_ptr,
    end_len_ptr,
    start_ptr,
    num_rows,
    HAS_SLOTS: tl.constexpr,
    MAX_END_LEN: tl.constexpr,
    BLOCK: tl.constexpr,
):
    rows = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    valid = rows < num_rows
    if HAS_SLOTS:
        slot = tl.load(slots_ptr + rows, mask=valid, other=0).to(tl.int64)
    else:
        slot = rows.to(tl.int64)
    tok = tl.load(ids_ptr + rows, mask=valid, other=-1).to(tl.int64)
    thinking = tl.load(thinking_ptr + slot, mask=valid, other=0)
    end_len = tl.load(end_len_ptr + slot, mask=valid, other=0)
    active = valid & (thinking != 0) & (end_len > 0)
    s = tl.load(progress_ptr + slot, mask=valid, other=0)
    base = slot * MAX_END_LEN
    for _ in tl.static_range(MAX_END_LEN):
        e = tl.load(end_ids_ptr + base + s, mask=active, other=-1).to(tl.int64)
        back = active & (s > 0) & (e != tok)
        f = tl.load(end_fail_ptr + base + s - 1, mask=back, other=0)
        s = tl.where(back, f, s)
    e = tl.load(end_ids_ptr + base + s, mask=active, other=-1).to(tl.int64)
    s = tl.where(active & (e == tok), s + 1, s)
    done = active & (s == end_len)
    start = tl.load(start_ptr + slot, mask=valid, other=-1)
    awaiting = active & (start >= 0)
    count = tl.load(count_ptr + slot, mask=valid, other=0)
    step = tl.where(done, 1 - end_len, active.to(tl.int32))
    tl.store(count_ptr + slot, count + tl.where(awaiting, 0, step), mask=valid)
    tl.store(start_ptr + slot, tl.where(awaiting & (~done) & (start.to(tl.int64) == tok), -1,
                                        start), mask=valid)
    tl.store(thinking_ptr + slot, tl.where(done, 0, thinking), mask=valid)
    tl.store(progress_ptr + slot, tl.where(done, 0, s), mask=valid)


def update_reasoning_state_triton(
    state: ReasoningState, sampled_ids: torch.Tensor, slots: torch.Tensor | None = None
) -> None:
    num_rows = sampled_ids.shape[0]
    if num_rows == 0:
        return
    block = 128
    _update_reasoning_kernel[(triton.cdiv(num_rows, block),)](
        sampled_ids,
        slots if slots is not None else sampled_ids,
        state.thinking,
        state.progress,
        state.num_reasoning_tokens,
        state.end_ids,
        state.end_fail,
        state.end_len,
        state.start_id,
        num_rows,
        HAS_SLOTS=slots is not None,
        MAX_END_LEN=state.max_end_len,
        BLOCK=block,
        num_warps=4,
    )


def check_slots(
    state: ReasoningState, num_rows: int, slots: torch.Tensor | None
) -> None:
    """ValueError unless `slots` maps `num_rows` batch rows onto the state's slots."""
    if slots is None:
        if num_rows != state.num_slots:
            raise ValueError(f"batch has {num_rows} rows but the reasoning state has "
                             f"{state.num_slots} slots; pass slots=")
        return
    if not isinstance(slots, torch.Tensor) or slots.dim() != 1 or slots.shape[0] != num_rows:
        raise ValueError(f"slots must be a ({num_rows},) tensor, got {slots!r}")
    if slots.dtype not in (torch.int32, torch.int64) or slots.device != state.device:
        raise ValueError(f"slots must be int32/int64 on {state.device}, got {slots.dtype} on "
                         f"{slots.device}")


def _slot_index(state: ReasoningState, slots: torch.Tensor | None) -> torch.Tensor:
    if slots is None:
        return torch.arange(state.num_slots, device=state.device)
    return slots.long()
