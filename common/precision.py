"""Numeric precision of a run (`--precision auto|fp32|bf16|bf16-fp32-head|bf16-gen`), decided once, here, and printed
at the start.

A setting says three things (SETTINGS): the dtype the update's forward and backward compute in (bf16 autocast over
fp32 master weights, gradients and AdamW state, as on a GPU; or fp32), whether the LM head's logits stay fp32 under
that autocast, and the dtype generation computes in (vLLM's weight dtype, autocast around HF generate):
- fp32: everything fp32;
- bf16: the update under bf16 autocast, its LM head too (the logits rounded to bf16 before the fp32 log-softmax), and
  generation in bf16;
- bf16-fp32-head: as bf16, but the LM head's logits in fp32 (MiniMax-M1, arXiv 2506.13585, keeps its head in fp32
  against the sampler-trainer mismatch): the trainer's from the fp32 master weights and hidden states, vLLM's from
  its bf16 weights cast up (its `head_dtype`), HF generate's from the fp32 weights;
- bf16-gen: bf16 generation (its head too), the update in fp32.
Log-probs always leave common/heads.py in fp32. What each costs and how it learns: docs/performance.md, "Precision",
and docs/precision/parity.json (the default run, paired seeds, one machine).

`auto` chooses by that evidence: on a machine where bf16 is native and faster, the fastest setting of LEARNS_AS_FP32
(shown to learn as fp32 does); else fp32, except on a CUDA GPU, where an empty list leaves bf16 (what GPU recipes
train in). Native and faster:
- CUDA: `torch.cuda.is_bf16_supported()` (Ampere and newer);
- CPU: a native-bf16 flag in /proc/cpuinfo (x86: `avx512_bf16` or `amx_bf16`, the instructions oneDNN's bf16 matmuls
  use; ARM: `bf16`), and then a measured probe (bf16_speedup, ~0.5 s): a layer of SmolLM2-135M's MLP shape, forward
  + backward, must run at least BF16_MIN_SPEEDUP times faster under bf16 autocast than in fp32.
The flag alone does not say bf16 is faster. Measured with 2 threads, torch 2.13 (2026-12-02), bf16 against fp32:
- AMD EPYC Zen 4 (avx512_bf16): a 2048x576 @ 576x1536 matmul at 353 against 116 GFLOP/s: bf16 wins;
- Intel Xeon family 6 model 207 under KVM (avx512_bf16, AMX not exposed): 149 against 240 GFLOP/s, the probe
  0.61x and the default run's 8 steps 0.66x the speed of fp32: fp32 wins;
- AMD EPYC Zen 3 (no flag: bf16 emulated): 1.2 against 33 GFLOP/s.
A bf16 setting runs anywhere; without a flag it says the run will be much slower.

The rest of what a run's speed depends on is here too, and machine.json records it (`machine`): the CPU, its threads,
and how malloc treats the memory a step frees (`keep_freed_memory`).
"""

import ctypes
import math
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import torch

from common.errors import BadSpec

CPU_BF16_FLAGS = ("avx512_bf16", "amx_bf16", "bf16")  # x86 (AVX-512 BF16, AMX), ARM (FEAT_BF16)
BF16_MIN_SPEEDUP = 1.2  # auto's bar on CPU: bf16 rounds the update's matmuls, worth it only where clearly faster
PrecisionFlag = Literal["auto", "fp32", "bf16", "bf16-fp32-head", "bf16-gen"]  # the scripts' and eval.py's --precision


@dataclass(frozen=True)
class Setting:
    update: torch.dtype  # the update's forward and backward: torch.bfloat16 (autocast) or torch.float32
    fp32_head: bool  # the LM head's logits in fp32 where the rest computes in bf16: the trainer's and the sampler's
    generation: torch.dtype  # what generation computes in


SETTINGS = {  # fastest first where bf16 is faster
    "bf16": Setting(torch.bfloat16, fp32_head=False, generation=torch.bfloat16),
    "bf16-fp32-head": Setting(torch.bfloat16, fp32_head=True, generation=torch.bfloat16),
    "bf16-gen": Setting(torch.float32, fp32_head=False, generation=torch.bfloat16),
    "fp32": Setting(torch.float32, fp32_head=False, generation=torch.float32),
}
# The reduced-precision settings shown to learn as fp32 does on the default run: >= 5 seeds, paired by seed, the 95%
# interval of (setting - fp32) in avg@16 containing 0 with its lower end above -0.03 (docs/precision/parity.json,
# tests/test_precision.py checks this list against it). auto picks the fastest of them where bf16 is faster.
LEARNS_AS_FP32: tuple[str, ...] = ()


@dataclass(frozen=True)
class Precision:
    name: str  # a key of SETTINGS
    reason: str  # why, in words: printed at the start

    @property
    def setting(self) -> Setting:
        return SETTINGS[self.name]

    @property
    def update_bf16(self) -> bool:
        """The update runs under bf16 autocast (Accelerator(mixed_precision="bf16"))."""
        return self.setting.update == torch.bfloat16

    @property
    def fp32_head(self) -> bool:
        return self.setting.fp32_head

    @property
    def torch_dtype(self) -> torch.dtype:
        """Generation's dtype (HF generate's autocast)."""
        return self.setting.generation

    @property
    def vllm_dtype(self) -> str:
        return "bfloat16" if self.setting.generation == torch.bfloat16 else "float32"

    def __str__(self) -> str:
        return f"precision: {self.name} ({self.reason})"


def untimed(line: str) -> str:
    """A precision line with the probe's measured figure blanked (it varies from run to run), to compare two."""
    return re.sub(r"\d+\.\d+x the speed", "Nx the speed", line)


def _cpuinfo() -> str:
    path = Path("/proc/cpuinfo")
    return path.read_text(errors="replace") if path.exists() else ""


def cpu_bf16_flags(cpuinfo: str | None = None) -> list[str]:
    """The native-bf16 flags this CPU reports in /proc/cpuinfo (`cpuinfo`: that file's text; read it if None)."""
    cpuinfo = _cpuinfo() if cpuinfo is None else cpuinfo
    flags = set()
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):  # x86, ARM
            flags.update(value.split())
    return [f for f in CPU_BF16_FLAGS if f in flags]


MALLOC = {"mmap_max": 0, "trim_threshold": 2**31 - 1}  # glibc's tunables as keep_freed_memory sets them (mallopt)
ALLOCATORS = re.compile(r"tcmalloc|jemalloc|mimalloc")  # a preloaded malloc (vLLM's CPU platform preloads libgomp)
_M_TRIM_THRESHOLD, _M_MMAP_MAX = -1, -4  # mallopt's parameter numbers (malloc.h)
_malloc = "glibc defaults"  # what this process's malloc does, as machine.json records it


def keep_freed_memory() -> str:
    """On a CPU, make glibc's malloc keep the memory a step frees for the next step: no mmap, no trimming.

    By default glibc serves every block over 32 MiB (a [chunk, vocab] logits block, a layer's activations over a
    batch) with its own mmap and unmaps it on free, so the next step faults it in again, zeroed page by page: on
    2 cores, a quarter of a Gemma 3 step's CPU time went to the kernel (docs/performance.md). Kept, the peak
    resident memory grows by about a tenth. Left alone on a GPU (its tensors are not malloc's), under another
    allocator (tcmalloc, jemalloc, mimalloc in LD_PRELOAD) or where GLIBC_TUNABLES names malloc tunables (the
    user's choice); returns what holds."""
    global _malloc
    if ALLOCATORS.search(os.environ.get("LD_PRELOAD", "")) or "glibc.malloc" in os.environ.get("GLIBC_TUNABLES", ""):
        _malloc = " ".join(f"{k}={os.environ[k]}" for k in ("LD_PRELOAD", "GLIBC_TUNABLES") if k in os.environ)
        return _malloc
    if torch.cuda.is_available():
        return _malloc
    try:
        libc = ctypes.CDLL(None)
        ok = libc.mallopt(_M_MMAP_MAX, MALLOC["mmap_max"]) and libc.mallopt(_M_TRIM_THRESHOLD, MALLOC["trim_threshold"])
    except (AttributeError, OSError):  # no glibc (musl, macOS): its allocator as it is
        return _malloc
    if ok:
        _malloc = ":".join(f"glibc.malloc.{k}={v}" for k, v in MALLOC.items())
    return _malloc


def machine(cpuinfo: str | None = None) -> dict:
    """What the run's speed and numerics depend on, as a run records it (common/run.py, machine.json): the CPU's
    model as /proc/cpuinfo names it (a VM may mask it to its vendor: family and model then tell the generation, e.g.
    AMD family 25 model 17 is Zen 4), its native-bf16 flags, the GPU, torch, its threads and malloc's setting."""
    cpuinfo = _cpuinfo() if cpuinfo is None else cpuinfo
    first = {}
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        first.setdefault(key.strip(), value.strip())
    return {"cpu": first.get("model name", ""), "cpu_family": first.get("cpu family", ""),
            "cpu_model": first.get("model", ""), "cpu_bf16_flags": cpu_bf16_flags(cpuinfo),
            "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
            "torch": torch.__version__, "torch_threads": torch.get_num_threads(), "malloc": _malloc}


def native_bf16(cpuinfo: str | None = None) -> tuple[bool, str]:
    """(does this machine compute bf16 natively, the evidence in words)."""
    if torch.cuda.is_available():
        name = torch.cuda.get_device_name()
        ok = torch.cuda.is_bf16_supported()
        return ok, f"CUDA {name} {'supports' if ok else 'does not support'} bf16"
    found = cpu_bf16_flags(cpuinfo)
    if found:
        return True, f"this CPU has native bf16: {', '.join(found)} in /proc/cpuinfo"
    return False, "this CPU has no native bf16: no avx512_bf16, amx_bf16 or bf16 flag in /proc/cpuinfo"


def bf16_speedup(rows: int = 1024, width: int = 576, reps: int = 5) -> float:
    """fp32 seconds / bf16-autocast seconds of one nn.Linear(width, 8/3 width) forward + backward on `rows` rows
    (SmolLM2-135M's MLP up-projection at 576), on this machine's CPU threads: the best of `reps` each, interleaved."""
    generator = torch.Generator().manual_seed(0)
    layer = torch.nn.Linear(width, 8 * width // 3)
    x = torch.randn(rows, width, generator=generator, requires_grad=True)

    def seconds(bf16: bool) -> float:
        start = time.perf_counter()
        with torch.autocast("cpu", torch.bfloat16, enabled=bf16):
            y = layer(x)
        y.float().sum().backward()
        return time.perf_counter() - start

    seconds(False), seconds(True)  # warm-up: oneDNN picks and caches its kernels
    fp32, bf16 = math.inf, math.inf
    for _ in range(reps):  # interleaved, so a slow spell of the machine falls on both
        fp32, bf16 = min(fp32, seconds(False)), min(bf16, seconds(True))
    return fp32 / bf16


def resolve_precision(flag: str, cpuinfo: str | None = None, speedup: float | None = None,
                      learns_as_fp32: tuple[str, ...] | None = None) -> Precision:
    """The precision `--precision flag` means on this machine, with the reason the start prints. `speedup`: the
    probe's figure (bf16_speedup, measured here if None and auto needs it); `learns_as_fp32`: auto's candidates,
    fastest first (None: LEARNS_AS_FP32)."""
    if flag != "auto" and flag not in SETTINGS:
        raise BadSpec(f"--precision {flag!r}: must be auto, {', '.join(reversed(SETTINGS))}")
    native, evidence = native_bf16(cpuinfo)
    if flag == "auto":
        candidates = LEARNS_AS_FP32 if learns_as_fp32 is None else learns_as_fp32
        if not native:
            return Precision("fp32", f"auto: {evidence}")
        if torch.cuda.is_available():
            faster = ""
        else:
            speedup = bf16_speedup() if speedup is None else speedup
            probe = f"a bf16 layer's forward+backward runs {speedup:.2f}x the speed of fp32 here"
            if speedup < BF16_MIN_SPEEDUP:
                return Precision("fp32", f"auto: {evidence}, but {probe} (bf16 needs {BF16_MIN_SPEEDUP}x)")
            faster = f", and {probe}"
        fastest = next((name for name in SETTINGS if name in candidates), None)
        if fastest is None and torch.cuda.is_available():  # what GPU recipes train in: fp32 there is many times slower
            return Precision("bf16", f"auto: {evidence}; bf16 as GPU recipes train (no bf16 setting is shown to learn "
                                     "as fp32 does on the CPU's default run: docs/precision/parity.json)")
        if fastest is None:
            return Precision("fp32", f"auto: {evidence}{faster}, but no bf16 setting has been shown to learn as fp32 "
                                     "does (docs/precision/parity.json)")
        return Precision(fastest, f"auto: {evidence}{faster}; the fastest setting shown to learn as fp32 does "
                                  "(docs/precision/parity.json)")
    if flag != "fp32" and not native:
        return Precision(flag, f"--precision {flag}; {evidence}, so every bf16 matmul is emulated and this run will "
                               "be much slower than fp32")
    return Precision(flag, f"--precision {flag}; {evidence}")
