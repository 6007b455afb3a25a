"""Launch a test script on 2 real gloo processes, as `torchrun --nproc_per_node 2` does on a CPU machine.

On a failure the error names each process's own last lines: torchrun's console shows only the process that
noticed the crash (usually rank 0 waiting in a collective), not the one that crashed. The launched scripts end
with `leave_together()`.
"""

import os
import socket
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def leave_together() -> None:
    """The end of a script under torchrun: wait for the other processes, then exit without tearing gloo down.

    A process that exits through the interpreter with gloo's threads alive, or even after destroy_process_group,
    sometimes aborts in C++ destructors after its work is done ("terminate called without an active exception",
    SIGABRT): one rank in about five after FSDP2's step (a 2-core Zen 2), once in the step-equivalence script, and
    once in the precision-agreement script (a Zen 4 CI run, 2026-12-04). Every result is written before this call.
    """
    import torch.distributed

    if torch.distributed.is_initialized():
        torch.distributed.barrier()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def torchrun(script: str, *args: str, log_dir: Path, timeout: int = 300, nproc: int = 2) -> subprocess.CompletedProcess:
    # the repository, then what the caller put on PYTHONPATH (a fork's scratch copy: tests/test_forks.py)
    # CUDA hidden: gloo processes on the CPU, also on a machine with fewer GPUs than processes
    env = {**os.environ, "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": "",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(nproc), "--master_port",
           str(free_port()), "--log-dir", str(log_dir), "--redirects", "3", str(ROOT / "tests" / script), *args]
    result = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout, env=env)
    if result.returncode != 0:
        tails = []
        for log in sorted(log_dir.rglob("std*.log")):  # <run id>/attempt_0/<rank>/stdout.log, stderr.log
            text = log.read_text(errors="replace").strip()
            if text:
                tails.append(f"--- {log.relative_to(log_dir)} ---\n{text[-2500:]}")
        raise AssertionError(f"torchrun {script} failed (exit {result.returncode})\n" + "\n".join(tails)
                             + f"\n--- torchrun ---\n{result.stderr[-1500:]}")
    return result
