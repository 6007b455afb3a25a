"""Math reward: final-answer extraction and equivalence through math-verify, batched and hang-proof.

    math_reward("... so the answer is \\boxed{\\frac12}.", "0.5")        # -> 1.0
    batch_math_reward(completions, answers, num_workers=2, timeout=2.0)  # -> list[float], never hangs

Answer extraction (`extract_answer`): only the FINAL answer counts, so a completion that lists several
candidates earns nothing unless its last one is right.
  1. the last `\\boxed{...}` / `\\fbox{...}` (braces matched by a linear scan, escaped `\\{ \\}` skipped),
     or `\\boxed 5` (the token after the space); if that last box is empty, never closed (truncated)
     or over 1000 characters -> None;
  2. else the last number on the last GSM8K `#### <answer>` line;
  3. else the last number in the text: `-3`, `1,000`, `2.5`, `3/4`, `\\frac{3}{4}`;
  4. else None.

Equivalence (`is_equiv`) is math-verify's `verify` on both sides parsed as `\\boxed{...}`, so
0.5 == 1/2 == \\dfrac12, \\sqrt3 == \\sqrt{3}, \\left( \\right) and \\! are ignored, {1,2} == {2,1},
x=3 == 3, 1,000 == 1000, 27.0 == 27; floats compare after rounding to 6 decimals (3.14159265 == \\pi,
3.14 != \\pi, 0.333 != 1/3). Where the public graders differ, we follow math-verify:
  - percentages: "50\\%" == "50" (the sign is read as a unit, as in the Hendrycks MATH grader) and
    "50\\%" == "0.5" (the sign read as /100); a bare 50 != 0.5. The Qwen2.5-Math grader's
    `include_percentage` also accepts pred == gold/100 or gold*100 with no % sign anywhere; we don't,
    since it would pay 1000 for a gold answer of 10.
  - units and degrees: `\\text{ cm}`, `\\mbox{ inches}^2`, `^\\circ`, `\\$` are dropped (all three graders
    agree). Degrees are not converted to radians: 90^\\circ != \\frac{\\pi}{2}.
  - intervals and tuples: (1,2) is an open interval and != [1,2] (a closed one) or (2,1) (a tuple).

Model text is hostile input. It is never eval'ed, and before sympy sees an answer `_unsafe` rejects
(scores 0) what could blow up, above all in C code that no timeout interrupts: answers over 1000
characters or 20 nested brackets; integrals, limits, sums, products; power towers (`9^{9^{9}}`,
`10**10**10`, `(9^{99})^{99}`); exponents or factorial/binomial arguments over 10^4; integers of more
than ~20,000 digits (`100000000!`); polynomials of total degree over 100 or over 200 terms once
expanded (`(x+y+z)^{50}`). Of the 14.8k gold answers in ../shared/data it rejects one (a Minerva
physics formula). In the main thread math-verify's own signal.alarm timeouts (2 s a step) bound the
rest. In other threads signals don't work and the guard is all there is, best effort: sympy's
simplify can still spend tens of seconds on contrived symbolic input (factorials of symbols next to
huge integers). Hence the batched form for the trainer, whose workers are killed on a deadline.

Batched form: `batch_math_reward` extracts and guards answers in the caller, then sends (pred, gold)
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
import math
import os
import re
import select
import subprocess
import sys
import threading
import time
from collections import deque

from math_verify import parse, verify

MAX_ANSWER_CHARS = 1000  # no real answer is longer; sympy on 1 MB of LaTeX is slow
MAX_DEPTH = 20  # nested brackets; the deepest gold answer in our 7 data sets has 3
MAX_ARG = 10_000  # largest literal allowed in an exponent or a factorial/binomial argument
MAX_DIGITS = 20_000  # rough digits of the integers sympy may compute exactly (gold: 2004!, 2^{4950})
MAX_DEGREE = 100  # total degree of the symbolic powers in an answer (gold answers reach 96)
MAX_TERMS = 200  # terms of their expansions: (x+1)^{100} has 101, (x+y+z)^{50} 1326 (20 s)
MV_TIMEOUT_S = 2  # math-verify's per-step alarm (main thread only); whole seconds (signal.alarm).
# A cold ANTLR parser takes 0.4 s on a first \left( \right) with 8 processes on 2 cores: 1 s is too tight.
logger = logging.getLogger(__name__)
_REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _clean(s: object) -> str:
    """Any input -> a str without NUL bytes or lone surrogates (which break encoding downstream)."""
    s = s if isinstance(s, str) else str(s)
    return s.replace("\x00", "").encode("utf-8", "replace").decode("utf-8")


# ---------------------------------------------------------------------------------------------
# Extraction
# ---------------------------------------------------------------------------------------------
def _braced(text: str, i: int) -> str | None:
    """Content of the brace group opening at text[i] == '{', or None if it does not close within
    MAX_ANSWER_CHARS (a longer answer would be rejected anyway; this keeps the scan short)."""
    depth, j, stop = 0, i, min(len(text), i + MAX_ANSWER_CHARS + 2)
    while j < stop:
        c = text[j]
        if c == "\\":  # \{ and \} are literal braces (sets), not grouping
            j += 2
            continue
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                return text[i + 1 : j]
        j += 1
    return None


_TOKEN = re.compile(r" +([^\s$]+)")
# "\frac{3}{4}", or a number: thousands groups before plain digit runs, so "1,000" is one number but
# "1, 2" two; a minus only where it can't be a subtraction ("3-5" -> 5); a simple fraction "3/4".
_NUMBER = re.compile(
    r"\\[dt]?frac\{(-?\d+)\}\{(\d+)\}"
    r"|(?<![\w)])-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:\s*/\s*\d+(?![\d.]))?"
)


def _last_number(text: str) -> str | None:
    last = None
    for last in _NUMBER.finditer(text):
        pass
    if last is None:
        return None
    if last.group(1) is not None:
        return f"{last.group(1)}/{last.group(2)}"
    return last.group().replace(" ", "")


def extract_answer(text: str) -> str | None:
    """The final answer of a completion (rule in the module docstring), or None."""
    if not isinstance(text, str):
        return None
    k = max(text.rfind("\\boxed"), text.rfind("\\fbox"))
    if k != -1:
        j = k + (6 if text.startswith("\\boxed", k) else 5)
        if text.startswith("{", j):
            content = _braced(text, j)
        else:  # "\boxed 5"
            token = _TOKEN.match(text, j)
            content = token.group(1) if token else None
        if content is None:  # never closed (truncated) or too long: no answer
            return None
        return content.strip() or None
    k = text.rfind("####")
    if k != -1:  # GSM8K: "#### 1,000", "#### $18."
        line = text[k + 4 :].split("\n", 1)[0]
        if (number := _last_number(line)) is not None:
            return number
    return _last_number(text)


def normalize_gold(answer: str) -> str:
    """Tidy a data set's gold answer: GSM8K's '#### 1,000' -> '1000', '$x$' -> 'x', '\\boxed{x}' -> 'x'."""
    s = _clean(answer).strip()
    if "####" in s or s.startswith("\\boxed"):  # a whole GSM8K solution, a boxed answer
        s = extract_answer(s) or s
    s = s.strip().rstrip(".").strip("$").strip()
    if re.fullmatch(r"-?\d{1,3}(,\d{3})+(\.\d+)?", s):
        s = s.replace(",", "")
    return s


# ---------------------------------------------------------------------------------------------
# Safety: reject answers that could make sympy compute astronomically large numbers
# ---------------------------------------------------------------------------------------------
_GROWER = re.compile(r"\^|\*\*|(?<!\\)!(?!=)|\\[dt]?binom|\\choose|\\Gamma")
_CALCULUS = re.compile(r"\\(?:[io]*int|lim|sum|prod)(?![a-zA-Z])")  # none in 14.8k gold answers
_POWER_NEXT = re.compile(r"\s*(\^|\*\*)")
_LETTER = re.compile(r"[a-zA-Z]")
_LETTERS, _DIGITS = re.compile(r"[a-zA-Z]*"), re.compile(r"[\d.]*")
_OPEN, _CLOSE = "([{", ")]}"


def _group_end(s: str, i: int) -> int:
    """Index just past the bracket group opening at s[i] (any bracket kind), or len(s)."""
    depth = 0
    for j in range(i, len(s)):
        depth += (s[j] in _OPEN) - (s[j] in _CLOSE)
        if depth == 0:
            return j + 1
    return len(s)


def _operand_after(s: str, i: int) -> tuple[str, int]:
    """The operand starting at s[i] (a bracket group, a \\command with its groups, a number, or a
    character) and the index after it."""
    while i < len(s) and s[i] == " ":
        i += 1
    if i >= len(s):
        return "", i
    if s[i] in _OPEN:
        j = _group_end(s, i)
    elif s[i] == "\\":
        j = _LETTERS.match(s, i + 1).end()
        while j < len(s) and s[j] == "{":
            j = _group_end(s, j)
    elif s[i].isdigit() or s[i] == "-":
        j = _DIGITS.match(s, i + 1).end()
    else:
        j = i + 1
    return s[i:j], j


def _operand_before(s: str, i: int) -> str:
    """The operand ending just before s[i]: a bracket group, a number, or a character."""
    j = i - 1
    while j >= 0 and s[j] == " ":
        j -= 1
    if j < 0:
        return ""
    if s[j] in _CLOSE:
        depth = 0
        for k in range(j, -1, -1):
            depth += (s[k] in _CLOSE) - (s[k] in _OPEN)
            if depth == 0:
                return s[k : j + 1]
        return s[: j + 1]
    k = j
    while k > 0 and (s[k - 1].isdigit() or s[k - 1] == "."):
        k -= 1
    return s[k : j + 1]


def _int_bound(s: str) -> float:
    """Crude upper bound on the value of an operand without powers: the product of its literals."""
    bound = 1.0
    for lit in re.findall(r"\d+", s):
        lit = lit.lstrip("0")
        bound *= float("inf") if len(lit) > 9 else max(1, int(lit or 0))
    return bound


def _unsafe(ans: str) -> bool:
    """True if sympy could hang on `ans`: huge integers (in C code, where no timeout reaches),
    huge polynomial expansions, deep recursion."""
    if len(ans) > MAX_ANSWER_CHARS:
        return True
    if _CALCULUS.search(ans):  # a final answer is a value; sympy may integrate or sum for minutes
        return True
    depth = 0
    for c in ans:
        depth += (c in _OPEN) - (c in _CLOSE)
        if depth > MAX_DEPTH:
            return True
    digits = 0.0  # rough total of the digits of the big integers sympy may compute exactly
    degree, terms = 0.0, 1  # of the polynomials it may expand
    for m in _GROWER.finditer(ans):
        op = m.group()
        if op == "!":
            args = [_operand_before(ans, m.start())]
        elif op == "\\choose":  # {n \choose k}: no operand scan, judge the whole answer
            args = [ans.replace("\\choose", " ")]
        else:
            arg, end = _operand_after(ans, m.end())
            args = [arg]
            if op.endswith("binom"):
                args.append(_operand_after(ans, end)[0])
            elif op in ("^", "**") and _POWER_NEXT.match(ans, end):
                return True  # unbraced tower: a^b^c, 10**10**10
        if any(_GROWER.search(a) or _int_bound(a) > MAX_ARG for a in args):
            return True  # towers 9^{9^{9}}, (10^{9})!, huge exponents or factorials
        n = max(_int_bound(a) for a in args)
        if op in ("^", "**"):
            # (9^{999})^{999} nests powers through the base: multiply the exponents inside it too.
            base = _operand_before(ans, m.start())
            for b in _GROWER.finditer(base):
                if b.group() in ("^", "**"):
                    n *= _int_bound(_operand_after(base, b.end())[0])
            if _LETTER.search(base):
                # simplify() expands and factors polynomials: (x+1)^{1000} or x^{999} in a fraction
                # take seconds. Bound the total degree and the number of terms.
                degree += n
                k = 1 + base.count("+") + base[1:].count("-")  # terms in the base
                if degree <= MAX_DEGREE:  # terms of (a_1 + ... + a_k)^n; products of powers multiply
                    terms *= math.comb(int(n) + k - 1, k - 1)
                if degree > MAX_DEGREE or terms > MAX_TERMS:
                    return True
                continue
            digits += n * max(1, sum(c.isdigit() for c in base))
        elif any(_LETTER.search(a) for a in args):  # (n+999)!/n!, \binom{y}{999}: polynomials
            degree += 10 * n  # and slower ones than powers: simplify(\binom{99}{x}) takes 50 s
            if degree > MAX_DEGREE:
                return True
        else:  # n!, \Gamma(n), \binom{n}{k}: at most n * log10(n) digits
            digits += n * len(str(int(n)))
        if digits > MAX_DIGITS:
            return True
    return False


# ---------------------------------------------------------------------------------------------
# Equivalence
# ---------------------------------------------------------------------------------------------
def _in_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


_PARSED: dict[str, tuple] = {}  # gold answers repeat G times per prompt; eval re-checks answers


def _parse(s: str, use_alarm: bool) -> tuple:
    if s in _PARSED:
        return _PARSED[s]
    # Wrapped in \boxed{} so math-verify reads the whole string as one answer (its boxed rules strip
    # units, \text, \left/\right) instead of hunting for the last expression inside it.
    parsed = tuple(parse("\\boxed{" + s + "}", parsing_timeout=MV_TIMEOUT_S if use_alarm else None))
    if parsed:  # an empty result may be a timeout on a busy machine: don't remember it
        if len(_PARSED) >= 10_000:
            _PARSED.clear()
        _PARSED[s] = parsed
    return parsed


def is_equiv(pred: str, gold: str) -> bool:
    """True if two answer strings are mathematically equivalent (decisions in the module docstring)."""
    try:
        pred, gold = _clean(pred).strip().rstrip("."), _clean(gold).strip().rstrip(".")
        if not pred or not gold or _unsafe(pred) or _unsafe(gold):
            return False
        if pred == gold:
            return True
        use_alarm = _in_main_thread()
        p, g = _parse(pred, use_alarm), _parse(gold, use_alarm)
        if not p or not g:
            return False
        return bool(verify(list(g), list(p), timeout_seconds=MV_TIMEOUT_S if use_alarm else None))
    except BaseException as e:  # math-verify's TimeoutException derives from BaseException
        if isinstance(e, (KeyboardInterrupt, SystemExit)):
            raise
        return False


def math_reward(completion: str, answer: str) -> float:
    """1.0 if the completion's final answer is equivalent to the gold answer, else 0.0. Never raises."""
    try:
        pred = extract_answer(_clean(completion))
        return 1.0 if pred is not None and is_equiv(pred, normalize_gold(answer)) else 0.0
    except Exception:
        return 0.0


# ---------------------------------------------------------------------------------------------
# Batched form: a persistent pool of worker processes (design in the module docstring)
# ---------------------------------------------------------------------------------------------
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
            pred, gold = extract_answer(_clean(completion)), normalize_gold(answer)
        except Exception:
            continue
        if pred and gold and not _unsafe(pred) and not _unsafe(gold):
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
