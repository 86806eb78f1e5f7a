"""A GGUF model file as a Hugging Face model directory (safetensors, tokenizer, chat template).

Transformers' GGUF loader (with the ``gguf`` package) dequantizes the file into a model of the
architecture it names, but ``save_pretrained`` refuses a model loaded from GGUF; its weights are
therefore copied into a fresh model of the same config, with the GGUF quantization record
removed, and that model is saved. Weights are kept in fp32, the exact dequantized values; a
16-bit copy is one ``--dtype`` away when the model is loaded.
"""

from __future__ import annotations

from pathlib import Path

from treeopt.errors import TreeoptError


def convert_gguf(gguf: Path, out: Path) -> None:
    """Write the model and tokenizer of ``gguf`` into the directory ``out`` (which exists)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        import gguf as _  # noqa: F401  transformers' loader needs it
    except ModuleNotFoundError:
        raise TreeoptError("reading a GGUF file needs the gguf package: pip install "
                           "'treeopt[gguf]'") from None
    where, name = str(gguf.parent), gguf.name
    tokenizer = AutoTokenizer.from_pretrained(where, gguf_file=name)
    loaded = AutoModelForCausalLM.from_pretrained(where, gguf_file=name, dtype=torch.float32)
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config  # the weights below are plain fp32 tensors
    fresh = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    fresh.load_state_dict(loaded.state_dict(), strict=True)
    fresh.generation_config = loaded.generation_config
    fresh.save_pretrained(out)
    tokenizer.save_pretrained(out)
