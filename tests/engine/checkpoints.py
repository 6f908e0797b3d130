"""Tiny random checkpoints (and a tiny tokenizer) built on the spot for the engine tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

_CORPUS = [
    "hello world, the weather in Paris is sunny today.",
    "What is the capital of France? The capital of France is Paris.",
    "Numbers: 0 1 2 3 4 5 6 7 8 9 10 11 12. Symbols: {}[]():;,.!?",
    "The quick brown fox jumps over the lazy dog. Le café coûte 3€ — naïve résumé 日本語",
]


def make_tokenizer(folder: Path) -> Any:
    """A tiny byte-level BPE tokenizer with <|im_end|> as EOS, saved into `folder`."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_CORPUS * 4, trainer=trainer)
    hf = PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>"
    )
    hf.save_pretrained(folder)
    return hf


def make_checkpoint(folder: Path, arch: str = "qwen3", **overrides: Any) -> Any:
    """A tiny random checkpoint of `arch` with the tiny tokenizer; returns the HF model."""
    from transformers import (
        AutoModelForCausalLM,
        LlamaConfig,
        MistralConfig,
        MixtralConfig,
        Qwen2Config,
        Qwen2MoeConfig,
        Qwen3Config,
        Qwen3MoeConfig,
    )

    tok = make_tokenizer(folder)
    common: dict[str, Any] = dict(
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=128,
        vocab_size=448,
        max_position_embeddings=512,
        eos_token_id=tok.eos_token_id,
    )
    configs = {
        "qwen3": (Qwen3Config, dict(head_dim=16, tie_word_embeddings=True)),
        "qwen2": (Qwen2Config, dict(tie_word_embeddings=False)),
        "mistral": (MistralConfig, dict(tie_word_embeddings=False)),
        # experts: 6, 2 a token; Qwen3-MoE with a dense first layer and renormalized weights,
        # Qwen2-MoE with its gated shared expert, Mixtral (renormalizes always)
        "qwen3_moe": (Qwen3MoeConfig, dict(head_dim=16, num_experts=6, num_experts_per_tok=2,
                                           moe_intermediate_size=48, norm_topk_prob=True,
                                           mlp_only_layers=[0], tie_word_embeddings=False)),
        "qwen2_moe": (Qwen2MoeConfig, dict(num_experts=6, num_experts_per_tok=2,
                                           moe_intermediate_size=48,
                                           shared_expert_intermediate_size=96,
                                           tie_word_embeddings=False)),
        "mixtral": (MixtralConfig, dict(num_local_experts=6, num_experts_per_tok=2,
                                        intermediate_size=48, tie_word_embeddings=False)),
        "llama": (
            LlamaConfig,
            dict(
                rope_scaling={
                    "rope_type": "llama3",
                    "factor": 8.0,
                    "low_freq_factor": 1.0,
                    "high_freq_factor": 4.0,
                    "original_max_position_embeddings": 64,
                },
                tie_word_embeddings=False,
            ),
        ),
    }
    cls, extra = configs[arch]
    config = cls(**{**common, **extra, **overrides})
    torch.manual_seed(1234)
    model = AutoModelForCausalLM.from_config(config).eval()
    for param in model.parameters():  # larger weights: sharper, less tie-prone distributions
        param.data.mul_(4.0) if param.dim() > 1 else None
    return model
