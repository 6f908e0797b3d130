"""The induction loss that teaches attention heads to copy.

A small model trained on chats alone takes long to find the two-step circuit that copies a
value (one head notes each token's predecessor, a later head looks for the current token among
those and reads what followed). Telling a head where to look makes it form within a few
hundred steps: at each answer position p, the right places are the earlier positions j whose
previous token is the current one, wherever all of them hold the token to predict. The loss is
minus the log of the attention mass the head puts there.
"""

from __future__ import annotations


def induction_targets(input_ids, labels, max_context: int = 3):
    """Where an induction head should look: for each answer position p, the earlier positions j
    whose previous n tokens are the n tokens ending at p (`ids[j-n:j] == ids[p-n+1:p+1]`), with
    the smallest n (up to `max_context`) for which every such j holds the token to predict
    (`ids[j] == ids[p+1]`). One token of context is ambiguous after a space or a digit that
    occurs all over the prompt; two or three are not. Returns (B, T, T) bool sources and
    (B, T) bool positions that have some."""
    import torch

    ids = input_ids
    B, T = ids.shape
    pad = torch.full((B, max_context), -1, dtype=ids.dtype)
    padded = torch.cat([pad, ids, pad[:, :1]], dim=1)  # ids[i] at max_context + i
    nxt = padded[:, max_context + 1:max_context + 1 + T]  # ids[p+1]
    right = ids[:, None, :] == nxt[:, :, None]  # (B, T, T): ids[j] == ids[p+1]
    match = torch.ones(T, T, dtype=torch.bool).tril().expand(B, T, T)  # j <= p
    answer = torch.cat([labels[:, 1:] != -100, torch.zeros(B, 1, dtype=torch.bool)], dim=1)
    sources = torch.zeros(B, T, T, dtype=torch.bool)
    ok = torch.zeros(B, T, dtype=torch.bool)
    for n in range(1, max_context + 1):
        before_j = padded[:, max_context - n:max_context - n + T]  # ids[j-n]
        at_p = padded[:, max_context - n + 1:max_context - n + 1 + T]  # ids[p-n+1]
        match = match & (before_j[:, None, :] == at_p[:, :, None])
        found = match.any(-1) & ~(match & ~right).any(-1) & ~ok
        sources = torch.where(found[:, :, None], match, sources)
        ok = ok | found
    return sources, ok & answer


def watch_copy_heads(model, heads: list[tuple[int, int]]) -> dict:
    """Keep what each copy head's attention layer is called with, to recompute those heads;
    `heads` are (layer, head) pairs."""
    seen: dict = {"heads": heads}

    def hook(layer: int):
        def keep(_module, _args, kwargs) -> None:
            seen[layer] = (kwargs["hidden_states"], kwargs["position_embeddings"])
        return keep

    for layer in sorted({layer for layer, _ in heads}):
        model.model.layers[layer].self_attn.register_forward_pre_hook(hook(layer),
                                                                      with_kwargs=True)
    return seen


def head_weights(model, inputs: tuple, head: tuple[int, int], mask):
    """One head's attention probabilities (B, T, T), computed as its layer computes them (the
    model itself runs a fused attention that does not return them)."""
    import torch
    from transformers.models.qwen3.modeling_qwen3 import apply_rotary_pos_emb

    attn = model.model.layers[head[0]].self_attn
    hidden, (cos, sin) = inputs
    B, T, _ = hidden.shape
    d = attn.head_dim
    kv = head[1] // attn.num_key_value_groups
    q = attn.q_norm(attn.q_proj(hidden).view(B, T, -1, d)[:, :, head[1]])  # (B, T, d)
    k = attn.k_norm(attn.k_proj(hidden).view(B, T, -1, d)[:, :, kv])
    q, k = apply_rotary_pos_emb(q[:, None], k[:, None], cos, sin)
    scores = (q @ k.transpose(-1, -2))[:, 0].float() * attn.scaling  # (B, T, T)
    allowed = torch.ones(T, T, dtype=torch.bool, device=scores.device).tril() & \
        mask[:, None, :].bool()
    return scores.masked_fill(~allowed, float("-inf")).softmax(-1)


def copy_loss(model, seen: dict, input_ids, labels, mask):
    """The induction loss of the watched heads on this batch (their mean); None where no
    position has a source."""
    sources, ok = induction_targets(input_ids, labels)
    inputs = {layer: seen.pop(layer) for layer in {layer for layer, _ in seen["heads"]}}
    if not ok.any():
        return None
    losses = []
    for head in seen["heads"]:
        weights = head_weights(model, inputs[head[0]], head, mask)  # (B, T, T)
        on_source = (weights * sources).sum(-1)[ok]  # attention mass on right sources
        losses.append(-(on_source + 1e-6).log().mean())
    return sum(losses) / len(losses)
