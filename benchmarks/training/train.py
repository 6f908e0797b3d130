"""Train one bundled model on CPU from a seed:
`python -m thinkgate.benchmarks.training.train --model demo|reasoner --out DIR`.

The tokenizer (`tokenizer.py`) is trained first, then a small Qwen3 on chats from `chats.py`
drawn fresh every step, loss on the assistant's turn only (the logits are computed at those
positions only: most of a chat is its prompt). Batches are bucketed by length, AdamW with
warm-up and cosine decay. The saved folder is a Hugging Face checkpoint in float32 (the demo
model's dtype: the engine runs it in float32 on CPU) that thinkgate's loader runs natively.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import random
import time
from dataclasses import dataclass
from pathlib import Path

from thinkgate.benchmarks.training.chats import Chat, make_chat
from thinkgate.benchmarks.training.tokenizer import train_tokenizer

logger = logging.getLogger(__name__)

HERE = Path(__file__).resolve().parent
DEMO_TEMPLATE = HERE.parent.parent / "engine" / "demo" / "chat_template.jinja"
TEMPLATES = {"demo": DEMO_TEMPLATE, "reasoner": HERE / "reasoner_chat_template.jinja"}
PAD_MULTIPLE = 64


@dataclass(frozen=True)
class Shape:
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    intermediate: int


SHAPES = {"demo": Shape(192, 4, 6, 2, 576), "reasoner": Shape(192, 4, 6, 2, 576)}


def encode(tok, chat: Chat) -> tuple[list[int], int]:
    """Prompt + completion + <|im_end|> ids, and where the completion starts."""
    prompt = tok.apply_chat_template(chat.messages, tools=chat.tools, add_generation_prompt=True,
                                     tokenize=False, **chat.template_kwargs)
    prompt_ids = tok.encode(prompt, add_special_tokens=False)
    completion_ids = tok.encode(chat.completion + "<|im_end|>", add_special_tokens=False)
    return prompt_ids + completion_ids, len(prompt_ids)


def build_model(tok, shape: Shape, seed: int):
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    config = Qwen3Config(
        vocab_size=math.ceil(len(tok) / PAD_MULTIPLE) * PAD_MULTIPLE,
        hidden_size=shape.hidden, intermediate_size=shape.intermediate,
        num_hidden_layers=shape.layers, num_attention_heads=shape.heads,
        num_key_value_heads=shape.kv_heads, head_dim=shape.hidden // shape.heads,
        max_position_embeddings=2048, rope_theta=10000.0, rms_norm_eps=1e-6,
        tie_word_embeddings=True,
        bos_token_id=tok.convert_tokens_to_ids("<|endoftext|>"),
        eos_token_id=tok.convert_tokens_to_ids("<|im_end|>"),
        pad_token_id=tok.convert_tokens_to_ids("<|endoftext|>"),
    )
    torch.manual_seed(seed)
    return Qwen3ForCausalLM(config)


class Batches:
    """Chats drawn from one seeded stream, grouped by length so little of a batch is padding."""

    def __init__(self, tok, model: str, batch_size: int, seed: int, pool: int = 8,
                 weights: tuple[float, ...] | None = None) -> None:
        self.tok, self.model, self.batch_size, self.pool = tok, model, batch_size, pool
        self.weights = weights
        self.rng = random.Random(seed)
        self.ready: list[list[tuple[list[int], int]]] = []

    def next(self):
        import torch

        if not self.ready:
            rows = [encode(self.tok, make_chat(self.rng, self.model, weights=self.weights))
                    for _ in range(self.batch_size * self.pool)]
            rows.sort(key=lambda r: len(r[0]))
            self.ready = [rows[i:i + self.batch_size] for i in range(0, len(rows),
                                                                      self.batch_size)]
            self.rng.shuffle(self.ready)
        batch = self.ready.pop()
        width = max(len(ids) for ids, _ in batch)
        pad = self.tok.pad_token_id
        input_ids = torch.full((len(batch), width), pad, dtype=torch.long)  # (B, T)
        labels = torch.full((len(batch), width), -100, dtype=torch.long)
        mask = torch.zeros((len(batch), width), dtype=torch.long)
        for i, (ids, split) in enumerate(batch):
            input_ids[i, :len(ids)] = torch.tensor(ids)
            labels[i, split:len(ids)] = torch.tensor(ids[split:])
            mask[i, :len(ids)] = 1
        return input_ids, labels, mask


def repeat_batch(rng: random.Random, batch_size: int, vocab: int):
    """Random token runs written twice, loss on the second: the plainest copying there is, over
    the whole vocabulary (with `induction_targets`, what forms the copy head)."""
    import torch

    rows = []
    for _ in range(batch_size):
        run = [rng.randrange(3, vocab) for _ in range(rng.randint(4, 24))]
        rows.append((run + run, len(run)))
    width = max(len(r) for r, _ in rows)
    input_ids = torch.zeros((batch_size, width), dtype=torch.long)  # (B, T)
    labels = torch.full((batch_size, width), -100, dtype=torch.long)
    mask = torch.zeros((batch_size, width), dtype=torch.long)
    for i, (ids, split) in enumerate(rows):
        input_ids[i, :len(ids)] = torch.tensor(ids)
        labels[i, split + 1:len(ids)] = torch.tensor(ids[split + 1:])
        mask[i, :len(ids)] = 1
    return input_ids, labels, mask


def induction_targets(input_ids, labels):
    """Where an induction head should look: for each answer position p, the earlier positions j
    whose previous token is the current token (`ids[j-1] == ids[p]`), kept only where every
    such j holds the token to predict (`ids[j] == ids[p+1]`), so copying from there is right.
    Returns (B, T, T) bool sources and (B, T) bool positions that have some."""
    import torch

    ids = input_ids
    B, T = ids.shape
    prev = torch.cat([torch.full((B, 1), -1, dtype=ids.dtype), ids[:, :-1]], dim=1)  # (B, T)
    nxt = torch.cat([ids[:, 1:], torch.full((B, 1), -1, dtype=ids.dtype)], dim=1)
    causal = torch.ones(T, T, dtype=torch.bool).tril()  # j <= p
    match = (prev[:, None, :] == ids[:, :, None]) & causal  # (B, T, T): ids[j-1] == ids[p]
    right = ids[:, None, :] == nxt[:, :, None]  # ids[j] == ids[p+1]
    answer = torch.cat([labels[:, 1:] != -100, torch.zeros(B, 1, dtype=torch.bool)], dim=1)
    ok = match.any(-1) & ~(match & ~right).any(-1) & answer
    return match, ok


def loss_on_answers(model, input_ids, labels, mask, copy_weight: float = 0.0,
                    watched: dict | None = None):
    """Mean next-token loss over the assistant positions (lm_head applied there only), plus
    `copy_weight` times the induction loss of the copy head (see `watch_copy_head`)."""
    import torch.nn.functional as F

    hidden = model.model(input_ids=input_ids, attention_mask=mask).last_hidden_state  # (B, T, H)
    targets = labels[:, 1:]
    keep = targets != -100
    logits = model.lm_head(hidden[:, :-1][keep])  # (N, V)
    loss = F.cross_entropy(logits.float(), targets[keep])
    if not copy_weight:
        return loss, None
    sources, ok = induction_targets(input_ids, labels)
    if not ok.any():
        return loss, None
    weights = copy_head_weights(model, watched, mask)  # (B, T, T)
    on_source = (weights * sources).sum(-1)[ok]  # attention mass on right sources
    copy = -(on_source + 1e-6).log().mean()
    return loss + copy_weight * copy, copy


COPY_HEAD = (1, 0)  # (layer, head) taught to attend like an induction head


def watch_copy_head(model) -> dict:
    """Keep what COPY_HEAD's attention layer is called with, to recompute that one head."""
    seen: dict = {}

    def hook(_module, _args, kwargs) -> None:
        seen["hidden"] = kwargs["hidden_states"]
        seen["rope"] = kwargs["position_embeddings"]

    model.model.layers[COPY_HEAD[0]].self_attn.register_forward_pre_hook(hook, with_kwargs=True)
    return seen


def copy_head_weights(model, seen: dict, mask):
    """COPY_HEAD's attention probabilities (B, T, T), computed as the layer computes them (the
    model itself runs a fused attention that does not return them)."""
    import torch
    from transformers.models.qwen3.modeling_qwen3 import apply_rotary_pos_emb

    attn = model.model.layers[COPY_HEAD[0]].self_attn
    hidden, (cos, sin) = seen.pop("hidden"), seen.pop("rope")
    B, T, _ = hidden.shape
    d, head = attn.head_dim, COPY_HEAD[1]
    kv = head // attn.num_key_value_groups
    q = attn.q_norm(attn.q_proj(hidden).view(B, T, -1, d)[:, :, head])  # (B, T, d)
    k = attn.k_norm(attn.k_proj(hidden).view(B, T, -1, d)[:, :, kv])
    q, k = apply_rotary_pos_emb(q[:, None], k[:, None], cos, sin)
    scores = (q @ k.transpose(-1, -2))[:, 0].float() * attn.scaling  # (B, T, T)
    allowed = torch.ones(T, T, dtype=torch.bool, device=scores.device).tril() & \
        mask[:, None, :].bool()
    return scores.masked_fill(~allowed, float("-inf")).softmax(-1)


def train(model, tok, args: argparse.Namespace, template: str) -> None:
    import torch

    weights = tuple(float(w) for w in args.weights.split(",")) if args.weights else None
    batches = Batches(tok, args.model, args.batch_size, args.seed + 1, weights=weights)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01,
                            betas=(0.9, 0.95))
    model.train()
    start, cpu_start, seen = time.perf_counter(), time.process_time(), 0.0
    rng = random.Random(args.seed + 2)
    watched = watch_copy_head(model) if args.copy_weight else None
    plain_vocab = tok.convert_tokens_to_ids("<think>")  # BPE ids lie below the markers
    for step in range(args.steps):
        if step < args.repeat_steps or (args.repeat_every and step % args.repeat_every == 0):
            input_ids, labels, mask = repeat_batch(rng, 2 * args.batch_size, plain_vocab)
        else:
            input_ids, labels, mask = batches.next()
        warm = min(1.0, (step + 1) / args.warmup)
        decay = 0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * step / args.steps))
        for group in opt.param_groups:
            group["lr"] = args.lr * warm * decay
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.bf16):
            loss, copy = loss_on_answers(model, input_ids, labels, mask, args.copy_weight,
                                         watched)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        lm = loss.item() - (args.copy_weight * copy.item() if copy is not None else 0.0)
        seen = 0.98 * seen + 0.02 * lm if step else lm
        if step % args.log_every == 0 or step == args.steps - 1:
            logger.info("step %d/%d loss %.4f (avg %.4f) copy %.3f %d tokens %.0fs (cpu %.0fs)",
                        step, args.steps, lm, seen,
                        copy.item() if copy is not None else float("nan"), input_ids.numel(),
                        time.perf_counter() - start, time.process_time() - cpu_start)
        if args.save_every and (step + 1) % args.save_every == 0 and step + 1 < args.steps:
            save(model, tok, template, args.out.with_name(f"{args.out.name}-step{step + 1}"))
    model.eval()


def save(model, tok, template: str, out: Path) -> None:
    from transformers import GenerationConfig

    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)
    (out / "chat_template.jinja").write_text(template)
    eos = [tok.convert_tokens_to_ids("<|im_end|>"), tok.convert_tokens_to_ids("<|endoftext|>")]
    GenerationConfig(eos_token_id=eos, pad_token_id=tok.pad_token_id, do_sample=False,
                     bos_token_id=tok.convert_tokens_to_ids("<|endoftext|>")).save_pretrained(out)
    cfg_path = out / "tokenizer_config.json"  # the template lives in chat_template.jinja
    cfg = json.loads(cfg_path.read_text())
    for key in ("chat_template", "is_local", "local_files_only"):
        cfg.pop(key, None)
    cfg_path.write_text(json.dumps(cfg, indent=2, ensure_ascii=False) + "\n")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", choices=sorted(TEMPLATES), required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--warmup", type=int, default=50)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--tokenizer-seed", type=int, default=0)
    ap.add_argument("--hidden", type=int, default=None, help="override the model's width")
    ap.add_argument("--layers", type=int, default=None, help="override the model's depth")
    ap.add_argument("--bf16", action=argparse.BooleanOptionalAction, default=True,
                    help="bf16 autocast (2x faster here; the weights stay float32)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeat-steps", type=int, default=400,
                    help="first train this many steps on random token runs written twice")
    ap.add_argument("--repeat-every", type=int, default=4,
                    help="after those, every Nth step is such a batch too (keeps copying sharp)")
    ap.add_argument("--copy-weight", type=float, default=1.0,
                    help="weight of the induction loss on one attention head (0: none)")
    ap.add_argument("--weights", default=None, help="kind weights, comma-separated in "
                    "chats.KINDS order (default: the model's mixture)")
    ap.add_argument("--log-every", type=int, default=25)
    ap.add_argument("--save-every", type=int, default=0,
                    help="also save OUT-stepN every N steps (pilots: when does copying start?)")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    import torch

    torch.set_num_threads(args.threads)
    template = TEMPLATES[args.model].read_text()
    tok = train_tokenizer(args.tokenizer_seed, template)
    shape = SHAPES[args.model]
    if args.hidden or args.layers:
        h = args.hidden or shape.hidden
        shape = Shape(h, args.layers or shape.layers, h // 32, max(1, h // 96), 3 * h)
    model = build_model(tok, shape, args.seed)
    logger.info("tokenizer %d tokens, model %s, %.2fM parameters", len(tok), shape,
                sum(p.numel() for p in model.parameters()) / 1e6)
    train(model, tok, args, template)
    save(model, tok, template, args.out)
    logger.info("saved to %s", args.out)


if __name__ == "__main__":
    main()
