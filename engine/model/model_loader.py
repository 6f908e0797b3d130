"""Load a local Hugging Face folder (or a GGUF file) into a native model, or transformers' model.

A folder needs config.json and `*.safetensors` (one file, or shards listed in
model.safetensors.index.json) plus tokenizer files. Llama, Mistral, Qwen2 and Qwen3 run natively;
other architectures fall back to transformers. A `.gguf` file (or a folder holding one and no
safetensors) of a dense native architecture is read by gguf_loader.py (quantized projections
stay quantized on CPU); other GGUF files are read by transformers (`gguf_file=`, dequantized),
then their state dict goes to the native model or the fallback.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from thinkgate.engine.config import resolve_dtype
from thinkgate.engine.model.llama import (
    ARCHITECTURES,
    ArchConfig,
    LlamaFamilyForCausalLM,
    materialize,
    rope_inv_freq,
)
from torch import nn

logger = logging.getLogger(__name__)


@dataclass
class LoadedModel:
    model: nn.Module
    hf_config: dict[str, Any]
    vocab_size: int
    max_position_embeddings: int
    dtype: torch.dtype
    native: bool
    source: Path  # the folder (tokenizer files live here)
    gguf_file: str | None = None
    arch: ArchConfig | None = None


def resolve_model_path(model: str | None) -> tuple[Path, str | None]:
    """The model folder and, for GGUF, the file name in it; raise if there is nothing to load.
    None is the bundled demo model; a bundled model's name that is not a path is that model."""
    if model is None:
        from thinkgate.engine.demo import demo_model_path

        return Path(demo_model_path()), None
    from thinkgate.engine.demo import bundled_model_path

    bundled = bundled_model_path(str(model))  # "thinkgate-reasoner"; a path of that name wins
    if bundled is not None:
        return Path(bundled), None
    path = Path(model).expanduser()
    if path.is_file() and path.suffix == ".gguf":
        return path.parent, path.name
    if not path.is_dir():
        raise FileNotFoundError(f"model path {str(model)!r} does not exist or is not a folder")
    if not any(path.glob("*.safetensors")):
        ggufs = sorted(p.name for p in path.glob("*.gguf"))
        if len(ggufs) == 1:
            return path, ggufs[0]
    if not (path / "config.json").is_file():
        raise FileNotFoundError(f"model folder {str(path)!r} has no config.json")
    return path, None


def _safetensors_files(folder: Path) -> list[Path]:
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        weight_map = json.loads(index.read_text())["weight_map"]
        files = [folder / name for name in sorted(set(weight_map.values()))]
        missing = [f.name for f in files if not f.is_file()]
        if missing:
            raise FileNotFoundError(f"{index} lists shards that are not in the folder: {missing}")
        return files
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"model folder {str(folder)!r} has no *.safetensors weights")
    return files


def _iter_safetensors(files: list[Path]) -> Iterator[tuple[str, torch.Tensor]]:
    from safetensors import safe_open

    for file in files:
        with safe_open(str(file), framework="pt") as f:
            for name in f.keys():
                yield name, f.get_tensor(name)


_SAFETENSORS_DTYPES = {"F32": "float32", "BF16": "bfloat16", "F16": "float16"}


def _checkpoint_dtype(hf_config: dict[str, Any], files: list[Path]) -> str | None:
    """config.json's dtype, else the dtype of the first floating tensor in the weights."""
    declared = hf_config.get("torch_dtype") or hf_config.get("dtype")
    if declared:
        return str(declared)
    with files[0].open("rb") as f:
        header = json.loads(f.read(int.from_bytes(f.read(8), "little")))
    for name, entry in header.items():
        if name != "__metadata__" and entry.get("dtype") in _SAFETENSORS_DTYPES:
            return _SAFETENSORS_DTYPES[entry["dtype"]]
    return None


def load_model(model: str | None, dtype: str | torch.dtype, device: str) -> LoadedModel:
    folder, gguf_file = resolve_model_path(model)
    if gguf_file is not None:
        return _load_gguf(folder, gguf_file, dtype, device)
    hf_config = json.loads((folder / "config.json").read_text())
    arch_name = (hf_config.get("architectures") or [None])[0]
    if arch_name in ARCHITECTURES:
        arch = ArchConfig.from_hf(hf_config)
        files = _safetensors_files(folder)
        torch_dtype = resolve_dtype(dtype, _checkpoint_dtype(hf_config, files), device)
        logger.info("loading %s in %s on %s", folder, torch_dtype, device)
        return _load_native(folder, hf_config, arch, _iter_safetensors(files), torch_dtype, device)
    torch_dtype = resolve_dtype(
        dtype, hf_config.get("torch_dtype") or hf_config.get("dtype"), device
    )
    return _load_fallback(folder, hf_config, torch_dtype, device)


def _load_native(
    folder: Path,
    hf_config: dict[str, Any],
    arch: ArchConfig,
    tensors: Any,
    dtype: torch.dtype,
    device: str,
    gguf_file: str | None = None,
) -> LoadedModel:
    with torch.device("meta"):
        net = LlamaFamilyForCausalLM(arch)
    net = materialize(net, device, dtype)
    net.inv_freq = rope_inv_freq(arch).float().to(device)  # buffers are not in checkpoints
    net.load_weights(tensors)
    net.init_rope_cache(arch.max_position_embeddings)
    return LoadedModel(
        net.eval(),
        hf_config,
        arch.vocab_size,
        arch.max_position_embeddings,
        dtype,
        True,
        folder,
        gguf_file,
        arch,
    )


def _load_fallback(
    folder: Path, hf_config: dict[str, Any], dtype: torch.dtype, device: str
) -> LoadedModel:
    from thinkgate.engine.model.hf_fallback import TransformersFallback
    from transformers import AutoModelForCausalLM

    _safetensors_files(folder)  # same clear error when weights are missing
    arch_name = (hf_config.get("architectures") or ["?"])[0]
    logger.warning("architecture %s has no native implementation; using transformers", arch_name)
    try:
        hf_model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=dtype)
    except Exception as exc:  # transformers raises many types; the message is what matters
        raise ValueError(f"transformers could not load {str(folder)!r}: {exc}") from exc
    text_cfg = hf_model.config.get_text_config()
    return LoadedModel(
        TransformersFallback(hf_model.to(device)),
        hf_config,
        int(text_cfg.vocab_size),
        int(getattr(text_cfg, "max_position_embeddings", 2048) or 2048),
        dtype,
        False,
        folder,
    )


def _load_gguf(folder: Path, gguf_file: str, dtype: str | torch.dtype, device: str) -> LoadedModel:
    from thinkgate.engine.model.gguf_loader import (
        gguf_hf_config,
        load_gguf_model,
        open_gguf,
        reads_natively,
    )

    path = folder / gguf_file
    reader = open_gguf(path)
    hf_config = gguf_hf_config(path, reader)
    if reads_natively(reader, hf_config):
        # quantized weights: on CPU, bf16 where the CPU has it (the int4 kernels take bf16)
        torch_dtype = resolve_dtype(dtype, "bfloat16" if device == "cpu" else None, device)
        arch = ArchConfig.from_hf(hf_config)
        logger.info("loading %s in %s on %s", path, torch_dtype, device)
        net = load_gguf_model(path, reader, arch, torch_dtype, device)
        return LoadedModel(net.eval(), hf_config, arch.vocab_size, arch.max_position_embeddings,
                           torch_dtype, True, folder, gguf_file, arch)
    del reader
    return _load_gguf_transformers(folder, gguf_file, dtype, device)


def _load_gguf_transformers(
    folder: Path, gguf_file: str, dtype: str | torch.dtype, device: str
) -> LoadedModel:
    """Other GGUF architectures (and mixture-of-experts files): dequantized by transformers."""
    from transformers import AutoModelForCausalLM

    hf_model = AutoModelForCausalLM.from_pretrained(
        str(folder), gguf_file=gguf_file, dtype=torch.float32
    )
    hf_config = hf_model.config.to_dict()
    if not hf_config.get("architectures"):
        hf_config["architectures"] = [type(hf_model).__name__]
    torch_dtype = resolve_dtype(dtype, None, device)
    if hf_config["architectures"][0] not in ARCHITECTURES:
        hf_model = hf_model.to(torch_dtype)
        from thinkgate.engine.model.hf_fallback import TransformersFallback

        return LoadedModel(
            TransformersFallback(hf_model.to(device)),
            hf_config,
            hf_config["vocab_size"],
            hf_config.get("max_position_embeddings", 2048),
            torch_dtype,
            False,
            folder,
            gguf_file,
        )
    arch = ArchConfig.from_hf(hf_config)
    state = hf_model.state_dict()
    if arch.tie_word_embeddings:
        state.pop("lm_head.weight", None)
    return _load_native(folder, hf_config, arch, state.items(), torch_dtype, device, gguf_file)
