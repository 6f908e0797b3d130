"""Speculative acceptance (kernels/spec_accept.py): Triton == twin == host loop == a plain
Python spec, on ragged rows, cut drafts, empty drafts and full matches; bad input is named."""

from __future__ import annotations

import pytest
import torch
from thinkgate.kernels import accept_drafts
from thinkgate.kernels.spec_accept import (
    accept_drafts_host,
    accept_drafts_ref,
    accept_drafts_triton,
)


def _spec(sampled: list[int], drafts: list[list[int]]) -> tuple[list[int], list[int]]:
    """Written apart from the module: walk each row's draft against its samples."""
    accepted, nexts, at = [], [], 0
    for draft in drafts:
        row = sampled[at:at + len(draft) + 1]
        kept = next((j for j, (d, s) in enumerate(zip(draft, row)) if d != s), len(draft))
        accepted.append(kept)
        nexts.append(row[kept])
        at += len(draft) + 1
    return accepted, nexts


def _case(gen: torch.Generator, lens: list[int], hits: list[int]) -> tuple:
    """Rows whose drafts match their samples for `hits[r]` ids, then differ."""
    sampled, flat, drafts = [], [], []
    for k, hit in zip(lens, hits):
        row = torch.randint(0, 50, (k + 1,), generator=gen).tolist()
        draft = [row[j] if j < hit else row[j] + 1 for j in range(k)]
        sampled += row
        flat += draft + [-1]
        drafts.append(draft)
    starts = [sum(n + 1 for n in lens[:r]) for r in range(len(lens))]
    return sampled, flat, drafts, starts


@pytest.mark.parametrize("lens,hits", [
    ([4], [0]), ([4], [2]), ([4], [4]), ([0], [0]),
    ([1, 0, 3, 4, 2], [1, 0, 1, 4, 0]), ([2] * 7, [0, 1, 2, 2, 1, 0, 2])])
def test_twin_and_host_loop_match_the_spec(gen: torch.Generator, lens: list[int],
                                           hits: list[int]) -> None:
    sampled, flat, drafts, starts = _case(gen, lens, hits)
    want = _spec(sampled, drafts)
    assert want[0] == [min(h, k) for h, k in zip(hits, lens)]
    assert accept_drafts_host(sampled, flat, starts, lens) == want
    out = accept_drafts_ref(torch.tensor(sampled), torch.tensor(flat), torch.tensor(starts),
                            torch.tensor(lens))
    assert out.tolist() == [want[0], want[1]]
    dispatched = accept_drafts(torch.tensor(sampled), torch.tensor(flat), torch.tensor(starts),
                               torch.tensor(lens), max(lens))
    assert dispatched.tolist() == [want[0], want[1]]


def test_triton_matches_the_twin(device: str, gen: torch.Generator) -> None:
    lens, hits = [4, 0, 1, 3, 4, 2], [4, 0, 1, 0, 2, 2]
    sampled, flat, _, starts = _case(gen, lens, hits)
    args = [torch.tensor(v, device=device) for v in (sampled, flat, starts, lens)]
    got = accept_drafts_triton(*args, max_len=4)
    assert torch.equal(got.cpu(), accept_drafts_ref(*[a.cpu() for a in args]))


def test_bad_input_is_named() -> None:
    s = torch.zeros(5, dtype=torch.int64)
    with pytest.raises(ValueError, match="max_len=2"):
        accept_drafts(s, s, torch.tensor([0]), torch.tensor([4]), 2)
    with pytest.raises(ValueError, match="run past the 5 samples"):
        accept_drafts(s, s, torch.tensor([3]), torch.tensor([2]), 4)
    with pytest.raises(ValueError, match="draft_ids has shape"):
        accept_drafts(s, s[:4], torch.tensor([0]), torch.tensor([1]), 4)
    with pytest.raises(ValueError, match="sampled must be a 1-D"):
        accept_drafts(s.float(), s, torch.tensor([0]), torch.tensor([1]), 4)
