"""Build the first demo model (v1, 1.8M parameters) with
`python -m thinkgate.engine.demo.build --out DIR`; and the byte-level BPE training
(`bpe_tokenizer`) both demo models use. The bundled model is
now v3, trained by `benchmarks/training/` (its README has the commands).

Trains, on CPU in a few minutes and fully seeded, (1) a byte-level BPE tokenizer on the Python
standard library's sources plus synthetic chats, and (2) a tiny Qwen3 on synthetic chats with the
loss on the assistant turn only, until it writes `<think>…</think>` then a hermes `<tool_call>` or
an answer. Tests and CI use the committed folder and never run this.
"""

from __future__ import annotations

import argparse
import logging
import math
import random
import sysconfig
import time
from pathlib import Path
from typing import Any

from thinkgate.engine.demo import DEMO_MODEL_DIR
from thinkgate.engine.demo.data import Example, make_example

logger = logging.getLogger(__name__)

SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
ADDED = ["<think>", "</think>", "<tool_call>", "</tool_call>", "<tool_response>",
         "</tool_response>"]
BPE_VOCAB = 8000
PAD_MULTIPLE = 64

CHAT_TEMPLATE = (Path(__file__).resolve().parent / "chat_template.jinja").read_text()


def stdlib_texts(budget: int) -> list[str]:
    """Python standard library sources, in name order, until `budget` characters are taken
    (tokenizer corpora: code and English)."""
    texts: list[str] = []
    for path in sorted(Path(sysconfig.get_paths()["stdlib"]).glob("*.py")):
        text = path.read_text(errors="ignore")
        texts.append(text)
        budget -= len(text)
        if budget <= 0:
            break
    return texts


def _corpus(num_chats: int, seed: int) -> list[str]:
    texts = stdlib_texts(6_000_000)
    rng = random.Random(seed)
    for _ in range(num_chats):
        ex = make_example(rng)
        texts.append(" ".join(m["content"] for m in ex.messages) + " " + ex.completion)
        texts.extend(str(t) for t in (ex.tools or []))
    return texts


def train_tokenizer(seed: int):
    """Byte-level BPE with Qwen's special and added tokens, wrapped for transformers."""
    from tokenizers import pre_tokenizers

    return bpe_tokenizer(pre_tokenizers.ByteLevel(add_prefix_space=False),
                         _corpus(4000, seed), BPE_VOCAB, CHAT_TEMPLATE)


def bpe_tokenizer(pre_tokenizer: Any, texts: list[str], vocab_size: int, chat_template: str):
    """A byte-level BPE trained on `texts` behind `pre_tokenizer`, with Qwen's special (`SPECIAL`)
    and added (`ADDED`) tokens, as a transformers fast tokenizer (also the training scripts'
    tokenizer: benchmarks/training/tokenizer.py)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizer
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=SPECIAL, show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(texts, trainer=trainer)
    tok.add_tokens(ADDED)
    hf = PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>",
        additional_special_tokens=["<|im_start|>", "<|im_end|>"],
    )
    hf.chat_template = chat_template
    hf.model_max_length = 2048
    return hf


def encode_example(tok, ex: Example) -> tuple[list[int], int]:
    """Token ids of prompt + completion + <|im_end|>, and where the completion starts."""
    prompt = tok.apply_chat_template(ex.messages, tools=ex.tools, add_generation_prompt=True,
                                     tokenize=False, enable_thinking=ex.enable_thinking)
    prompt_ids = tok.encode(prompt, add_special_tokens=False)
    completion_ids = tok.encode(ex.completion + "<|im_end|>", add_special_tokens=False)
    return prompt_ids + completion_ids, len(prompt_ids)


def build_model(tok, seed: int):
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    vocab = math.ceil(len(tok) / PAD_MULTIPLE) * PAD_MULTIPLE
    config = Qwen3Config(
        vocab_size=vocab, hidden_size=128, intermediate_size=384, num_hidden_layers=4,
        num_attention_heads=4, num_key_value_heads=2, head_dim=32, max_position_embeddings=2048,
        rope_theta=10000.0, rms_norm_eps=1e-6, tie_word_embeddings=True,
        bos_token_id=tok.convert_tokens_to_ids("<|endoftext|>"),
        eos_token_id=tok.convert_tokens_to_ids("<|im_end|>"),
        pad_token_id=tok.convert_tokens_to_ids("<|endoftext|>"),
    )
    torch.manual_seed(seed)
    return Qwen3ForCausalLM(config)


def train(model, tok, steps: int, batch_size: int, seed: int, lr: float = 3e-3) -> None:
    import torch

    rng = random.Random(seed + 1)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01, betas=(0.9, 0.95))
    pad = tok.pad_token_id
    model.train()
    start = time.perf_counter()
    for step in range(steps):
        batch = [encode_example(tok, make_example(rng)) for _ in range(batch_size)]
        width = max(len(ids) for ids, _ in batch)
        input_ids = torch.full((batch_size, width), pad, dtype=torch.long)
        labels = torch.full((batch_size, width), -100, dtype=torch.long)
        mask = torch.zeros((batch_size, width), dtype=torch.long)
        for i, (ids, split) in enumerate(batch):
            input_ids[i, : len(ids)] = torch.tensor(ids)
            labels[i, split: len(ids)] = torch.tensor(ids[split:])
            mask[i, : len(ids)] = 1
        warm = min(1.0, (step + 1) / 30)
        for group in opt.param_groups:
            group["lr"] = lr * warm * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * step / steps)))
        loss = model(input_ids=input_ids, attention_mask=mask, labels=labels).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step % 25 == 0 or step == steps - 1:
            logger.info("step %d/%d loss %.4f (%.0fs)", step, steps, loss.item(),
                        time.perf_counter() - start)
    model.eval()


def save(model, tok, out: Path) -> None:
    import json

    from transformers import GenerationConfig

    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)
    (out / "chat_template.jinja").write_text(CHAT_TEMPLATE)
    eos = [tok.convert_tokens_to_ids("<|im_end|>"), tok.convert_tokens_to_ids("<|endoftext|>")]
    GenerationConfig(eos_token_id=eos, pad_token_id=tok.pad_token_id, do_sample=False,
                     bos_token_id=tok.convert_tokens_to_ids("<|endoftext|>")).save_pretrained(out)
    # the chat template lives in chat_template.jinja; keep tokenizer_config.json free of a copy
    cfg_path = out / "tokenizer_config.json"
    cfg = json.loads(cfg_path.read_text())
    for key in ("chat_template", "is_local", "local_files_only"):  # loader state, not config
        cfg.pop(key, None)
    cfg_path.write_text(json.dumps(cfg, indent=2, ensure_ascii=False) + "\n")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True,
                    help=f"where to write v1 (not {DEMO_MODEL_DIR}: the bundled v3 lives there)")
    ap.add_argument("--steps", type=int, default=320)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--init-from", type=Path, default=None,
                    help="start from this folder's tokenizer and weights instead of from scratch")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (1 is steadier on a busy machine)")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    import torch

    torch.set_num_threads(args.threads)
    if args.init_from is not None:  # continue training an earlier build (a second phase)
        from transformers import AutoModelForCausalLM, AutoTokenizer

        tok = AutoTokenizer.from_pretrained(args.init_from)
        tok.chat_template = CHAT_TEMPLATE
        model = AutoModelForCausalLM.from_pretrained(args.init_from, dtype=torch.float32)
    else:
        tok = train_tokenizer(args.seed)
        model = build_model(tok, args.seed)
    logger.info("tokenizer %d tokens, model %.2fM parameters", len(tok),
                sum(p.numel() for p in model.parameters()) / 1e6)
    train(model, tok, args.steps, args.batch_size, args.seed, lr=args.lr)
    save(model, tok, args.out)
    logger.info("saved to %s", args.out)


if __name__ == "__main__":
    main()
