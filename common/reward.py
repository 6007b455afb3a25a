"""The math reward the trainer calls: `math_reward` (common/grader.py's rules) over a batch, hang-proof.

    batch_math_reward(completions, answers, num_workers=2, timeout=2.0)  # -> list[float], never hangs

`batch_math_reward` extracts and guards answers in the caller, then sends (pred, gold)
pairs to a persistent pool of worker processes, `python -m common.reward_worker`, speaking JSON lines
over stdin/stdout, one item in flight per worker. The parent waits with poll() against a per-item
deadline; a worker that overruns it is killed (its item scores 0) and restarted, one that dies
(os._exit, segfault) likewise, and the rest of the batch goes on (a warning says how many were lost).
Why subprocess.Popen and not multiprocessing: 'fork' would copy a process holding torch/vLLM threads,
and 'spawn'/'forkserver' re-import the caller's __main__ (the training script, which imports torch);
Popen fork+execs a fresh interpreter that imports only this module, and the workers run is_equiv in
their main thread, where math-verify's alarms work. The pool lives across calls (starting a worker
costs ~1 s of imports) and is shut down at interpreter exit; one batch runs at a time.
Keep `common/__init__.py` free of heavy imports: every worker imports it.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import select
import subprocess
import sys
import threading
import time
from collections import deque

from common.grader import clean_text, extract_answer, is_equiv, is_unsafe, math_reward, normalize_gold

__all__ = ["batch_math_reward", "math_reward", "shutdown_pool"]  # math_reward: the one-item form, from common/grader.py

logger = logging.getLogger(__name__)
_REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

STARTUP_TIMEOUT_S = 120.0  # importing sympy + math-verify on a busy 2-core machine


class _Worker:
    """One `python -m common.reward_worker` process; `job` is the batch index it is scoring."""

    def __init__(self) -> None:
        path = os.pathsep.join(filter(None, [_REPO_ROOT, os.environ.get("PYTHONPATH")]))
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "common.reward_worker"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0,
            cwd=_REPO_ROOT, env=dict(os.environ, PYTHONPATH=path),  # so `common` imports from anywhere
        )
        self.buf = b""
        self.ready = False
        self.job: int | None = None
        self.deadline = time.monotonic() + STARTUP_TIMEOUT_S

    def send(self, job: int, pred: str, gold: str, timeout: float) -> bool:
        self.job, self.deadline = job, time.monotonic() + timeout
        try:  # one short line (answers are capped at 1000 chars): fits the pipe buffer, never blocks
            self.proc.stdin.write((json.dumps({"pred": pred, "gold": gold}) + "\n").encode())
            return True
        except OSError:  # BrokenPipe: it died since the last item
            return False

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait()
        self.proc.stdin.close()
        self.proc.stdout.close()


class _Pool:
    """The persistent workers, and the loop that hands them one item each and enforces deadlines."""

    def __init__(self) -> None:
        self.workers: list[_Worker] = []
        self.lock = threading.Lock()  # one batch at a time; callers from other threads wait
        self.pid = os.getpid()

    def resize(self, n: int) -> None:
        if self.pid != os.getpid():  # we were forked: those pipes belong to the parent
            self.workers, self.pid = [], os.getpid()
        for i, w in enumerate(self.workers):
            # Dead since the last batch, or busy because that batch was interrupted (an exception,
            # Ctrl-C) and its answer would land in this one: start afresh.
            if w.proc.poll() is not None or w.job is not None:
                w.kill()
                self.workers[i] = _Worker()
        while len(self.workers) > n:
            self.workers.pop().kill()
        self.workers += [_Worker() for _ in range(n - len(self.workers))]

    def run(self, jobs: list[tuple[int, str, str]], rewards: list[float], timeout: float) -> int:
        """Score `jobs` (index, pred, gold) into `rewards`; returns how many were lost to a kill."""
        pending, lost = deque(jobs), 0
        while True:
            for w in self.workers:
                if w.ready and w.job is None and pending:
                    job, pred, gold = pending.popleft()
                    if not w.send(job, pred, gold, timeout):
                        self._replace(w)  # its item scores 0
                        lost += 1
            waiting = [w for w in self.workers if w.job is not None or not w.ready]
            if not pending and all(w.job is None for w in waiting):
                return lost  # the rest are still starting: they'll be ready next call
            poller = select.poll()
            for w in waiting:
                poller.register(w.proc.stdout.fileno(), select.POLLIN)
            wait_s = min(w.deadline for w in waiting) - time.monotonic()
            ready_fds = {fd for fd, _ in poller.poll(max(0.0, wait_s) * 1000)}
            for w in waiting:
                if w.proc.stdout.fileno() in ready_fds:
                    data = os.read(w.proc.stdout.fileno(), 65536)
                    if not data:  # died (os._exit, segfault, OOM kill)
                        lost += w.job is not None
                        self._replace(w)
                        continue
                    w.buf += data
                    while b"\n" in w.buf:
                        line, w.buf = w.buf.split(b"\n", 1)
                        msg = json.loads(line)
                        if "ready" in msg:
                            w.ready = True
                        elif w.job is not None:
                            rewards[w.job] = float(msg["reward"])
                            w.job = None
                elif time.monotonic() >= w.deadline:  # hung: kill it, its item scores 0
                    lost += w.job is not None
                    self._replace(w)

    def _replace(self, w: _Worker) -> None:
        if not w.ready:
            w.kill()
            raise RuntimeError("common.reward_worker failed to start (see its stderr above)")
        w.kill()
        self.workers[self.workers.index(w)] = _Worker()

    def close(self) -> None:
        for w in self.workers:
            w.proc.stdin.close()  # EOF: the worker exits
        for w in self.workers:
            try:
                w.proc.wait(timeout=1.0)
            except subprocess.TimeoutExpired:
                w.proc.kill()
                w.proc.wait()
            w.proc.stdout.close()
        self.workers = []


_POOL = _Pool()
atexit.register(_POOL.close)


def batch_math_reward(
    completions: list[str], answers: list[str], num_workers: int = 2, timeout: float = 2.0
) -> list[float]:
    """`math_reward` over a batch, in `num_workers` persistent worker processes; any thread may call it.

    An item whose check runs past `timeout` seconds, or whose worker dies, scores 0.0; the worker is
    restarted and the rest of the batch is kept. num_workers=0 scores in this process (no hang guard).
    """
    if len(completions) != len(answers):
        raise ValueError(f"{len(completions)} completions but {len(answers)} answers")
    rewards = [0.0] * len(completions)
    jobs = []
    for i, (completion, answer) in enumerate(zip(completions, answers)):
        try:  # extraction and the guard are cheap and safe here; only sympy goes to the workers
            pred, gold = extract_answer(clean_text(completion)), normalize_gold(answer)
        except Exception:
            continue
        if pred and gold and not is_unsafe(pred) and not is_unsafe(gold):
            jobs.append((i, pred, gold))
    if num_workers <= 0:
        for i, pred, gold in jobs:
            rewards[i] = float(is_equiv(pred, gold))
        return rewards
    with _POOL.lock:
        _POOL.resize(num_workers)
        lost = _POOL.run(jobs, rewards, timeout)
    if lost:  # a few per run is normal (hostile samples); many mean `timeout` is too tight
        logger.warning("batch_math_reward: %d of %d items timed out or crashed their worker", lost, len(jobs))
    return rewards


def shutdown_pool() -> None:
    """Stop the worker processes now (they restart on the next batch); also runs at exit."""
    with _POOL.lock:
        _POOL.close()
