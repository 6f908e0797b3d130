"""apply_token_bitmask_inplace: ban the tokens a grammar bitmask disallows, in place.

Semantics, as a plain loop (``cover = min(32 * bitmask.shape[-1], vocab_size or inf)``)::

    for row in (indices if indices is not None else range(logits.shape[0])):
        for col in range(logits.shape[-1]):
            word, bit = bitmask[row, col // 32], col % 32
            if col >= cover or not (word >> bit) & 1:
                logits[row, col] = -inf

This is xgrammar's function of the same name (int32 words, bit set = allowed, ``indices`` name
rows of both tensors) with one deliberate difference: columns past the bitmask's coverage (the
lm_head padding) become -inf instead of being left open. The kernel never reads a logit it
overwrites: a 32-column word that bans everything is only written, one that allows everything
is skipped, and only mixed words are read.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import triton
import triton.language as tl

FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
_WORDS_PER_PROGRAM = 64  # 2048 columns


_INT_VIEW = {torch.float32: torch.int32, torch.float16: torch.int16, torch.bfloat16: torch.int16}
_NEG_INF_BITS = {
    dtype: int(torch.tensor(float("-inf"), dtype=dtype).view(_INT_VIEW[dtype]).item())
    for dtype in FLOAT_DTYPES
}
_LEFT_SHIFTS: dict[torch.device, torch.Tensor] = {}
SPARSE_ROWS_FROM = 32768  # narrower rows: one branch-free pass costs less than finding words


def unpack_bitmask_ref(bitmask: torch.Tensor, num_cols: int, cover: int) -> torch.Tensor:
    """(..., num_cols) bool: True where the bit is set and the column is < cover."""
    shifts = torch.arange(32, device=bitmask.device, dtype=torch.int32)
    bits = ((bitmask[..., None] >> shifts) & 1).bool().flatten(-2)  # (..., 32 * words)
    allowed = torch.zeros(*bitmask.shape[:-1], num_cols, dtype=torch.bool, device=bitmask.device)
    n = min(num_cols, cover, bits.shape[-1])
    allowed[..., :n] = bits[..., :n]
    return allowed


def pack_bitmask_ref(allowed: torch.Tensor) -> torch.Tensor:
    """(R, V) bool -> (R, ceil(V / 32)) int32 words, bit set = allowed (`unpack_bitmask_ref`'s
    inverse; columns past V are banned)."""
    rows, vocab = allowed.shape
    num_words = (vocab + 31) // 32
    padded = torch.nn.functional.pad(allowed, (0, 32 * num_words - vocab))
    shifts = torch.arange(32, device=allowed.device)
    w = (padded.view(rows, num_words, 32).long() << shifts).sum(2)
    return torch.where(w >= 2**31, w - 2**32, w).to(torch.int32)


def apply_token_bitmask_inplace_ref(
    logits: torch.Tensor,
    bitmask: torch.Tensor,
    indices: Sequence[int] | torch.Tensor | None = None,
    vocab_size: int | None = None,
) -> None:
    """Torch twin of the kernel (the spec and the CPU path); arguments already checked."""
    logits2, bitmask2 = _as_2d(logits, bitmask)
    cover = _cover(bitmask2, vocab_size)
    if indices is None:
        _mask_rows(logits2, bitmask2, cover)
        return
    rows = torch.as_tensor(indices, dtype=torch.int64).to(logits2.device)
    if rows.numel() == 0:
        return
    sub = logits2.index_select(0, rows)
    _mask_rows(sub, bitmask2.index_select(0, rows), cover)
    logits2.index_copy_(0, rows, sub)


def _mask_rows(logits: torch.Tensor, bitmask: torch.Tensor, cover: int) -> None:
    """Every row of `logits` (R, V) against the same row of `bitmask` (R, W), in place.

    Rows of at least SPARSE_ROWS_FROM columns whose words mostly ban everything (a grammar
    expecting structure: a few tokens allowed) are filled with -inf after saving the logits of
    their non-zero words, which are masked and written back; the other rows take one
    branch-free pass over [0, n) (`_mask_dense`)."""
    num_rows, num_cols = logits.shape
    n = min(num_cols, cover, 32 * bitmask.shape[1])
    if n > 0:
        sparse = None
        if num_cols >= SPARSE_ROWS_FROM:
            num_words = (n + 31) // 32
            sparse = (bitmask[:, :num_words] == 0).sum(dim=1) * 2 > num_words  # (R,)
        if sparse is None or not bool(sparse.any()):
            _mask_dense(logits, bitmask, n)
        elif bool(sparse.all()):
            _mask_sparse(logits, bitmask, n, None)
        else:
            _mask_sparse(logits, bitmask, n, sparse.nonzero()[:, 0])
            rows = (~sparse).nonzero()[:, 0]
            sub = logits.index_select(0, rows)
            _mask_dense(sub, bitmask.index_select(0, rows), n)
            logits.index_copy_(0, rows, sub)
    if n < num_cols:
        logits[:, n:].fill_(float("-inf"))


def _mask_dense(logits: torch.Tensor, bitmask: torch.Tensor, n: int) -> None:
    """Columns [0, n) of every row in one branch-free pass (see `_mask_word_bits`)."""
    num_rows = logits.shape[0]
    num_words = (n + 31) // 32
    shifts = _left_shifts(bitmask.device)
    keep = (bitmask[:, :num_words, None] << shifts).bitwise_right_shift_(31)  # (R, w, 32)
    int_dtype = _INT_VIEW[logits.dtype]
    keep = keep.view(num_rows, 32 * num_words)[:, :n].to(int_dtype)
    bits = logits[:, :n].view(int_dtype)
    bits.bitwise_and_(keep)
    bits.bitwise_or_(keep.bitwise_not_().bitwise_and_(_NEG_INF_BITS[logits.dtype]))


def _mask_sparse(logits: torch.Tensor, bitmask: torch.Tensor, n: int,
                 rows: torch.Tensor | None) -> None:
    """Columns [0, n) of `rows` (all if None): save the non-zero words' logits, fill -inf,
    write the saved words back masked. Reads only the words that allow something."""
    whole = n // 32  # words entirely inside [0, n)
    if n % 32:  # the word n cuts, on its own
        tail = logits[:, 32 * whole : n]
        part = tail if rows is None else tail[rows]
        _mask_word_bits(part, bitmask[:, whole] if rows is None else bitmask[rows, whole],
                    n - 32 * whole)
        if rows is not None:
            tail[rows] = part
    if whole == 0:
        return
    x = logits[:, : 32 * whole].unflatten(1, (whole, 32))  # (R, W, 32) view
    words = bitmask[:, :whole]
    at = (words if rows is None else words[rows]).nonzero()  # (K, 2), row-major
    r = at[:, 0] if rows is None else rows[at[:, 0]]
    k = at[:, 1]
    saved = x[r, k]  # (K, 32) copy of the live words
    if rows is None:
        x.fill_(float("-inf"))
    else:
        x[rows] = float("-inf")
    _mask_word_bits(saved, words[r, k], 32)
    x[r, k] = saved


def _mask_word_bits(x: torch.Tensor, words: torch.Tensor, width: int) -> None:
    """x (T, width) in place against one int32 word per row (T,), width <= 32.

    Branch-free on the logits' bit patterns, since `masked_fill_` with a random bool mask runs
    ~10x slower on CPU: a column's bit shifted to the sign and shifted back arithmetically gives
    `keep` = all ones (allowed) or zero (banned); then `x = (x & keep) | (-inf & ~keep)` leaves an
    allowed logit bit for bit as it was and writes exactly -inf over a banned one."""
    int_dtype = _INT_VIEW[x.dtype]
    keep = (words[:, None] << _left_shifts(words.device)[:width]).bitwise_right_shift_(31).to(int_dtype)  # (T, w)
    bits = x.view(int_dtype)
    bits.bitwise_and_(keep)
    bits.bitwise_or_(keep.bitwise_not_().bitwise_and_(_NEG_INF_BITS[x.dtype]))


def _left_shifts(device: torch.device) -> torch.Tensor:
    """(32,) int32: 31 - j, the left shift that moves bit j to the sign."""
    shifts = _LEFT_SHIFTS.get(device)
    if shifts is None:
        shifts = 31 - torch.arange(32, dtype=torch.int32, device=device)
        _LEFT_SHIFTS[device] = shifts
    return shifts


@triton.jit
def _apply_token_bitmask_kernel(
    logits_ptr,
    bitmask_ptr,
    indices_ptr,
    logits_row_stride,
    bitmask_row_stride,
    num_cols,
    num_words,
    cover,
    HAS_INDICES: tl.constexpr,
    WORDS: tl.constexpr,
):
    if HAS_INDICES:
        row = tl.load(indices_ptr + tl.program_id(0)).to(tl.int64)
    else:
        row = tl.program_id(0).to(tl.int64)
    w = tl.program_id(1) * WORDS + tl.arange(0, WORDS)  # (WORDS,)
    logits_row = logits_ptr + row * logits_row_stride
    bitmask_row = bitmask_ptr + row * bitmask_row_stride
    # Programs wholly inside the row and the mask need no bounds masks, so with 16-element
    # aligned rows their accesses are 128-bit even when V is not a multiple of 16.
    end_word = (tl.program_id(1) + 1) * WORDS
    if (end_word * 32 <= num_cols) & (end_word <= num_words):
        _mask_words(logits_row, bitmask_row, w, num_cols, num_words, cover, False)
    else:
        _mask_words(logits_row, bitmask_row, w, num_cols, num_words, cover, True)


@triton.jit
def _mask_words(logits_row, bitmask_row, w, num_cols, num_words, cover, BOUNDED: tl.constexpr):
    """Mask the 32-column words `w` of one row; BOUNDED: some of them may lie past the row."""
    bit = tl.arange(0, 32)
    if BOUNDED:
        words = tl.load(bitmask_row + w, mask=w < num_words, other=0)
    else:
        words = tl.load(bitmask_row + w)
    col = w[:, None] * 32 + bit[None, :]  # (WORDS, 32)
    allowed = (((words[:, None] >> bit[None, :]) & 1) != 0) & (col < cover)
    num_allowed = tl.sum(allowed.to(tl.int32), axis=1)  # (WORDS,)
    some_banned = (num_allowed < 32)[:, None]
    mixed = some_banned & (num_allowed > 0)[:, None]
    ptrs = logits_row + col
    if BOUNDED:
        in_row = col < num_cols
        x = tl.load(ptrs, mask=in_row & mixed, other=0.0)
        tl.store(ptrs, tl.where(allowed, x, float("-inf")), mask=in_row & some_banned)
    else:
        x = tl.load(ptrs, mask=mixed, other=0.0)
        tl.store(ptrs, tl.where(allowed, x, float("-inf")), mask=some_banned)


def check_logits_and_bitmask(logits: object, bitmask: object) -> None:
    """Raise ValueError naming the bad shape, dtype, layout or device."""
    if not isinstance(logits, torch.Tensor) or not isinstance(bitmask, torch.Tensor):
        raise ValueError(
            f"logits and bitmask must be tensors, got {type(logits).__name__} and "
            f"{type(bitmask).__name__}"
        )
    if logits.dtype not in FLOAT_DTYPES:
        raise ValueError(f"logits dtype must be float32, float16 or bfloat16, got {logits.dtype}")
    if bitmask.dtype != torch.int32:
        raise ValueError(f"bitmask dtype must be torch.int32, got {bitmask.dtype}")
    if logits.dim() not in (1, 2) or bitmask.dim() != logits.dim():
        raise ValueError(
            f"logits must be (B, V) with bitmask (B, W) (or both 1-D), got logits "
            f"{tuple(logits.shape)} and bitmask {tuple(bitmask.shape)}"
        )
    if logits.dim() == 2 and bitmask.shape[0] != logits.shape[0]:
        raise ValueError(
            f"bitmask rows {bitmask.shape[0]} != logits rows {logits.shape[0]} "
            f"(logits {tuple(logits.shape)}, bitmask {tuple(bitmask.shape)})"
        )
    if logits.shape[-1] > 1 and logits.stride(-1) != 1:
        raise ValueError(f"logits columns must be contiguous, got strides {logits.stride()}")
    if bitmask.shape[-1] > 1 and bitmask.stride(-1) != 1:
        raise ValueError(f"bitmask columns must be contiguous, got strides {bitmask.stride()}")
    if bitmask.device != logits.device:
        raise ValueError(f"bitmask is on {bitmask.device} but logits are on {logits.device}")


def check_indices(
    indices: Sequence[int] | torch.Tensor | None, num_rows: int, device: torch.device
) -> torch.Tensor | None:
    """Indices as an int32 tensor on `device` (None stays None); ValueError names bad values.

    Values of a tensor already on an accelerator are not range-checked (that would sync)."""
    if indices is None:
        return None
    if isinstance(indices, torch.Tensor):
        if indices.dim() != 1 or indices.dtype not in (torch.int32, torch.int64):
            raise ValueError(
                f"indices must be a 1-D int32/int64 tensor, got {indices.dtype} "
                f"{tuple(indices.shape)}"
            )
        if indices.device.type != device.type and indices.device.type != "cpu":
            raise ValueError(f"indices are on {indices.device} but logits are on {device}")
        checkable = indices.device.type == "cpu"
        values = indices.tolist() if checkable else []
        rows = indices.to(device=device, dtype=torch.int32)
    else:
        values = list(indices)
        if any(not isinstance(v, int) or isinstance(v, bool) for v in values):
            raise ValueError(f"indices must be ints, got {values!r}")
        rows = torch.tensor(values, dtype=torch.int32, device=device)
    bad = [v for v in values if not 0 <= v < num_rows]
    if bad:
        raise ValueError(f"indices {bad} out of range for {num_rows} rows")
    return rows


def apply_token_bitmask_inplace_triton(
    logits: torch.Tensor,
    bitmask: torch.Tensor,
    indices: torch.Tensor | None = None,
    vocab_size: int | None = None,
) -> None:
    """Launch the kernel; arguments already checked, indices an int32 tensor on logits' device."""
    logits2, bitmask2 = _as_2d(logits, bitmask)
    num_rows = logits2.shape[0] if indices is None else indices.numel()
    num_cols = logits2.shape[1]
    if num_rows == 0 or num_cols == 0:
        return
    grid = (num_rows, triton.cdiv(num_cols, 32 * _WORDS_PER_PROGRAM))
    single = logits2.shape[0] == 1  # row 0 only: any stride gives the same addresses, and a
    # stride of 0 lets Triton assume aligned rows (128-bit accesses at any V)
    _apply_token_bitmask_kernel[grid](
        logits2,
        bitmask2,
        indices if indices is not None else bitmask2,
        0 if single else logits2.stride(0),
        0 if single else bitmask2.stride(0),
        num_cols,
        bitmask2.shape[1],
        _cover(bitmask2, vocab_size),
        HAS_INDICES=indices is not None,
        WORDS=_WORDS_PER_PROGRAM,
        num_warps=4,
    )


def _as_2d(logits: torch.Tensor, bitmask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    if logits.dim() == 1:
        return logits.unsqueeze(0), bitmask.unsqueeze(0)
    return logits, bitmask


def _cover(bitmask: torch.Tensor, vocab_size: int | None) -> int:
    cover = 32 * bitmask.shape[-1]
    return cover if vocab_size is None else min(cover, vocab_size)
