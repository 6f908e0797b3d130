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

from thinkgate.benchmarks.training.batches import Batches, repeat_batch
from thinkgate.benchmarks.training.chats import MIXES
from thinkgate.benchmarks.training.copy_head import copy_loss, watch_copy_heads
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


SHAPES = {"demo": Shape(192, 6, 6, 2, 576), "reasoner": Shape(192, 6, 6, 2, 576)}


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


def loss_on_answers(model, input_ids, labels, mask, copy_weight: float = 0.0,
                    watched: dict | None = None, weight=None):
    """Next-token loss over the assistant positions (lm_head applied there only), a mean
    weighted by `weight` (B, T; labels' weights) when given, plus `copy_weight` times the
    induction loss of the copy heads (see `copy_head.py`)."""
    import torch.nn.functional as F

    hidden = model.model(input_ids=input_ids, attention_mask=mask).last_hidden_state  # (B, T, H)
    targets = labels[:, 1:]
    keep = targets != -100
    logits = model.lm_head(hidden[:, :-1][keep])  # (N, V)
    if weight is None:
        loss = F.cross_entropy(logits.float(), targets[keep])
    else:
        w = weight[:, 1:][keep]
        each = F.cross_entropy(logits.float(), targets[keep], reduction="none")
        loss = (each * w).sum() / w.sum()
    if not copy_weight:
        return loss, None
    copy = copy_loss(model, watched, input_ids, labels, mask)
    return (loss, None) if copy is None else (loss + copy_weight * copy, copy)


def train(model, tok, args: argparse.Namespace, template: str) -> None:
    """The loop: copy drills first (and every `repeat_every`th step after), chats otherwise.
    Every `checkpoint_every` steps the whole state goes to OUT.resume.pt, which `--resume`
    continues from (same batches, same result: a run killed on a shared machine loses little)."""
    import torch

    weights = tuple(float(w) for w in args.weights.split(",")) if args.weights else None
    batches = Batches(tok, args.model, args.batch_size, args.seed + 1, args.max_tokens,
                      weights=weights, mix=args.mix, answer_weight=args.answer_weight)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01,
                            betas=(0.9, 0.95))
    rng = random.Random(args.seed + 2)
    first, cpu_before = 0, 0.0
    seen = {"chat": 0.0, "drill": 0.0}  # moving averages of the two kinds of batch
    resume = args.out.with_name(args.out.name + ".resume.pt")
    if args.resume and resume.is_file():
        state = torch.load(resume, weights_only=False)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        batches.load_state(state["batches"])
        rng.setstate(state["rng"])
        first, cpu_before = state["step"], state["cpu"]
        if isinstance(state["seen"], dict):
            seen = state["seen"]
        logger.info("resumed at step %d (%.0fs of CPU before)", first, cpu_before)
    model.train()
    start, cpu_start = time.perf_counter(), time.process_time() - cpu_before
    heads = [(int(lh.split(":")[0]), int(lh.split(":")[1])) for lh in args.copy_heads.split(",")]
    watched = watch_copy_heads(model, heads) if args.copy_weight else None
    plain_vocab = tok.convert_tokens_to_ids("<think>")  # BPE ids lie below the markers
    for step in range(first, args.steps):
        drill = step < args.repeat_steps or bool(args.repeat_every
                                                 and step % args.repeat_every == 0)
        weight = None
        if drill:
            input_ids, labels, mask = repeat_batch(rng, 2 * args.batch_size, plain_vocab)
        else:
            input_ids, labels, mask, weight = batches.next()
            if args.answer_weight == 1.0:
                weight = None  # the plain mean: what the recipes before the flag ran
        warm = min(1.0, (step + 1) / args.warmup)
        decay = 0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * step / args.steps))
        for group in opt.param_groups:
            group["lr"] = args.lr * warm * decay
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.bf16):
            loss, copy = loss_on_answers(model, input_ids, labels, mask, args.copy_weight,
                                         watched, weight)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        lm = loss.item() - (args.copy_weight * copy.item() if copy is not None else 0.0)
        key = "drill" if drill else "chat"
        seen[key] = 0.95 * seen[key] + 0.05 * lm if seen[key] else lm
        if step % args.log_every == 0 or step == args.steps - 1:
            logger.info("step %d/%d loss %.4f copy %.3f (averages: chats %.4f, drills %.4f) "
                        "%d tokens %.0fs (cpu %.0fs)", step, args.steps, lm,
                        copy.item() if copy is not None else float("nan"), seen["chat"],
                        seen["drill"], input_ids.numel(), time.perf_counter() - start,
                        time.process_time() - cpu_start)
        done = step + 1
        if args.save_every and done % args.save_every == 0 and done < args.steps:
            save(model, tok, template, args.out.with_name(f"{args.out.name}-step{done}"))
        if args.checkpoint_every and done % args.checkpoint_every == 0 and done < args.steps:
            torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": done,
                        "batches": batches.state(), "rng": rng.getstate(), "seen": seen,
                        "cpu": time.process_time() - cpu_start}, resume)
    logger.info("trained %d steps in %.0fs of CPU", args.steps, time.process_time() - cpu_start)
    resume.unlink(missing_ok=True)
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


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", choices=sorted(TEMPLATES), required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--warmup", type=int, default=50)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--tokenizer-seed", type=int, default=0)
    ap.add_argument("--init-from", type=Path, default=None,
                    help="start from this checkpoint (its tokenizer and weights): a second "
                    "phase at a lower learning rate")
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
    ap.add_argument("--copy-heads", default="1:0,2:0",
                    help="LAYER:HEAD,... taught to attend like induction heads")
    ap.add_argument("--weights", default=None, help="kind weights, comma-separated in "
                    "chats.KINDS order (default: the model's mixture)")
    ap.add_argument("--answer-weight", type=float, default=1.0,
                    help="loss weight of the answer after </think> (calls, JSON, text) "
                    "relative to the thinking: where values are copied and must end exactly")
    ap.add_argument("--mix", choices=MIXES, default="v2",
                    help="the training chats: v2 (what v2 and the reasoner were trained on) or "
                    "v3 / v4 (chats.make_chat lists the changes)")
    ap.add_argument("--max-tokens", type=int, default=8192,
                    help="at most this many tokens (padding included) in a chat batch")
    ap.add_argument("--checkpoint-every", type=int, default=100,
                    help="save the training state every N steps (OUT.resume.pt)")
    ap.add_argument("--resume", action="store_true",
                    help="continue from OUT.resume.pt when it is there")
    ap.add_argument("--log-every", type=int, default=25)
    ap.add_argument("--save-every", type=int, default=0,
                    help="also save OUT-stepN every N steps (pilots: when does copying start?)")
    return ap


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    import torch

    torch.set_num_threads(args.threads)
    template = TEMPLATES[args.model].read_text()
    shape = SHAPES[args.model]
    if args.hidden or args.layers:
        h = args.hidden or shape.hidden
        shape = Shape(h, args.layers or shape.layers, h // 32, max(1, h // 96), 3 * h)
    if args.init_from:
        from transformers import AutoTokenizer, Qwen3ForCausalLM

        tok = AutoTokenizer.from_pretrained(args.init_from)
        tok.chat_template = template
        model = Qwen3ForCausalLM.from_pretrained(args.init_from, dtype=torch.float32)
        cfg = model.config
        shape = Shape(cfg.hidden_size, cfg.num_hidden_layers, cfg.num_attention_heads,
                      cfg.num_key_value_heads, cfg.intermediate_size)
    else:
        tok = train_tokenizer(args.tokenizer_seed, template)
        model = build_model(tok, shape, args.seed)
    logger.info("tokenizer %d tokens, model %s, %.2fM parameters", len(tok), shape,
                sum(p.numel() for p in model.parameters()) / 1e6)
    train(model, tok, args, template)
    save(model, tok, template, args.out)
    logger.info("saved to %s", args.out)


if __name__ == "__main__":
    main()
