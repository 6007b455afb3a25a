"""Numeric precision of a run (`--precision auto|fp32|bf16`), decided once, here, and printed at the start.

bf16 means what it means on a GPU: the update under bf16 autocast with fp32 master weights, gradients, optimizer
state and log-probs (common/heads.py returns fp32), and generation in bf16 (vLLM's dtype, autocast around HF
generate). `auto` is bf16 where the hardware computes it natively and fp32 elsewhere:
- CUDA: `torch.cuda.is_bf16_supported()` (Ampere and newer);
- x86 CPU: the `avx512_bf16` or `amx_bf16` flag in /proc/cpuinfo (the instructions oneDNN's bf16 matmuls use);
- ARM CPU: the `bf16` feature in /proc/cpuinfo.
A CPU without them emulates bf16, far slower than fp32 (a 2048x576 @ 576x1536 matmul: 1.2 against 33 GFLOP/s on a
2-core AVX2 EPYC, 2026-12-02), so `auto` keeps fp32 there; `--precision bf16` still runs and says it will be slow.
"""

from dataclasses import dataclass
from pathlib import Path

import torch

from common.errors import BadSpec

CPU_BF16_FLAGS = ("avx512_bf16", "amx_bf16", "bf16")  # x86 (AVX-512 BF16, AMX), ARM (FEAT_BF16)


@dataclass(frozen=True)
class Precision:
    name: str  # "fp32" or "bf16"
    reason: str  # why, in words: printed at the start

    @property
    def bf16(self) -> bool:
        return self.name == "bf16"

    @property
    def torch_dtype(self) -> torch.dtype:
        return torch.bfloat16 if self.bf16 else torch.float32

    @property
    def vllm_dtype(self) -> str:
        return "bfloat16" if self.bf16 else "float32"

    def __str__(self) -> str:
        return f"precision: {self.name} ({self.reason})"


def cpu_bf16_flags(cpuinfo: str | None = None) -> list[str]:
    """The native-bf16 flags this CPU reports in /proc/cpuinfo (`cpuinfo`: that file's text; read it if None)."""
    if cpuinfo is None:
        path = Path("/proc/cpuinfo")
        cpuinfo = path.read_text(errors="replace") if path.exists() else ""
    flags = set()
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):  # x86, ARM
            flags.update(value.split())
    return [f for f in CPU_BF16_FLAGS if f in flags]


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


def resolve_precision(flag: str, cpuinfo: str | None = None) -> Precision:
    """The precision `--precision flag` means on this machine, with the reason the start prints."""
    if flag not in ("auto", "fp32", "bf16"):
        raise BadSpec(f"--precision {flag!r}: must be auto, fp32 or bf16")
    native, evidence = native_bf16(cpuinfo)
    if flag == "auto":
        return Precision("bf16" if native else "fp32", f"auto: {evidence}")
    if flag == "bf16" and not native:
        return Precision("bf16", f"--precision bf16; {evidence}, so every matmul is emulated and this run will be "
                                 "much slower than fp32")
    return Precision(flag, f"--precision {flag}; {evidence}")
