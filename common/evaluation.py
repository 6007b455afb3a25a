"""Evaluation with an already running engine: training's periodic eval and eval.py share it.

Metrics over P problems with n samples each, c_i of them correct (reward 1.0 from `math_reward`,
the same checker as training):
    accuracy   avg@n: mean reward over all P*n samples
    pass@k     mean over problems of the unbiased estimator 1 - C(n-c, k) / C(n, k) (Chen et al.
               2021, arXiv 2107.03374), for each k in `pass_k` (1 <= k <= n)
    maj@n      share of problems whose majority answer is correct: extracted final answers vote,
               equivalent forms (\\frac12, 0.5, 1/2) in one class (`is_equiv`), samples without an
               answer abstain, ties go to the class seen first
    response_len_mean, truncated_frac   over all samples (tokens; cut at max_new_tokens)
With n = 1, pass@1 and maj@1 equal accuracy: only accuracy is reported (and pass@k if asked).
"""

import json
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import replace

import torch
from accelerate.utils import gather_object
from tqdm import tqdm

from common.data import tokenize_prompts
from common.generation import SamplingConfig, rollout_seed
from common.reward import batch_math_reward, extract_answer, is_equiv
from common.run import STARTED, log_metrics


def pass_at_k(n: int, c: int, k: int) -> float:
    """Probability that at least one of k samples drawn without replacement from n (c correct) is correct."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass@k needs 0 <= c <= n and 1 <= k <= n; got n={n}, c={c}, k={k}")
    if n - c < k:  # every k-subset holds a correct sample
        return 1.0
    # C(n-c, k) / C(n, k) = prod_{i=n-c+1}^{n} (1 - k/i): no huge binomials, no cancellation
    miss = 1.0
    for i in range(n - c + 1, n + 1):
        miss *= 1.0 - k / i
    return 1.0 - miss


def default_pass_k(n: int) -> list[int]:
    """Powers of two up to n: 1, 2, 4, ..."""
    return [2**i for i in range(n.bit_length()) if 2**i <= n]


def majority_vote(answers: Sequence[str | None], equiv: Callable[[str, str], bool] = is_equiv) -> int | None:
    """Index of the first sample of the largest class of equivalent answers; None if no sample answered.

    Classes are built in order of first occurrence; a new answer joins the first class whose first
    member it is equivalent to (equivalence need not be transitive: a fixed representative keeps the
    classes well defined). Ties go to the class that appeared first.
    """
    reps: list[int] = []  # index of each class's first member
    votes: list[int] = []
    seen: dict[str, int] = {}  # exact string -> class: identical answers need no equivalence check
    for i, a in enumerate(answers):
        if a is None:
            continue
        cls = seen.get(a)
        if cls is None:
            cls = next((j for j, r in enumerate(reps) if equiv(a, answers[r])), None)
            if cls is None:
                reps.append(i)
                votes.append(0)
                cls = len(reps) - 1
            seen[a] = cls
        votes[cls] += 1
    if not votes:
        return None
    return reps[max(range(len(votes)), key=lambda j: (votes[j], -j))]


def evaluate(engine, tokenizer, rows: list[dict], *, template: str, sampling: SamplingConfig, n: int = 1,
             pass_k: Sequence[int] | None = None, accelerator=None, batch_samples: int = 256,
             desc: str | None = None) -> tuple[dict[str, float], list[dict]]:
    """Generate n samples per problem and score them; rows are split over processes (rank::world).

    Returns global metrics (module docstring; summed over processes) and this process's per-sample
    records {id, sample, completion, extracted, gold, correct, length, truncated}. Generation runs in
    chunks of ~batch_samples samples, each with its own seed derived from sampling.seed, so a run is
    deterministic for a seed and backend; `desc` shows a progress bar (main process).
    """
    rank, world = (accelerator.process_index, accelerator.num_processes) if accelerator else (0, 1)
    pass_k = ([] if n == 1 else default_pass_k(n)) if pass_k is None else list(pass_k)
    if any(not 1 <= k <= n for k in pass_k):
        raise ValueError(f"pass@k needs 1 <= k <= n = {n}; got {pass_k}")
    mine = rows[rank::world]
    prompt_ids = tokenize_prompts(tokenizer, [r["question"] for r in mine], template)
    chunk = max(1, batch_samples // n)  # prompts per generate call
    completions = []
    bar = tqdm(total=len(mine), desc=desc, disable=desc is None or rank != 0, leave=True)
    for c, start in enumerate(range(0, len(mine), chunk)):
        chunk_sampling = replace(sampling, seed=rollout_seed(sampling.seed, c, rank, world))
        completions += engine.generate(prompt_ids[start:start + chunk], n, chunk_sampling)
        bar.update(len(prompt_ids[start:start + chunk]))
    bar.close()
    golds = [r["answer"] for r in mine for _ in range(n)]
    scores = batch_math_reward([c.text for c in completions], golds)
    extracted = [extract_answer(c.text) for c in completions]
    records = [{"id": mine[i // n]["id"], "sample": i % n, "completion": c.text, "extracted": extracted[i],
                "gold": golds[i], "correct": scores[i], "length": len(c.token_ids), "truncated": c.truncated}
               for i, c in enumerate(completions)]
    # per-problem sums: pass@k estimates, and maj@n as the reward of the winning class's first sample
    # (its answer is equivalent to the gold under the very checker that scored the samples)
    pass_sums = [0.0] * len(pass_k)
    maj_sum = 0.0
    for p in range(len(mine)):
        group = slice(p * n, (p + 1) * n)
        correct = int(sum(s == 1.0 for s in scores[group]))
        for j, k in enumerate(pass_k):
            pass_sums[j] += pass_at_k(n, correct, k)
        if n > 1 and (winner := majority_vote(extracted[group])) is not None:
            maj_sum += scores[p * n + winner]
    sums = torch.tensor([sum(scores), sum(len(c.token_ids) for c in completions),
                         sum(c.truncated for c in completions), len(completions), len(mine), maj_sum, *pass_sums],
                        dtype=torch.float64)
    if accelerator is not None and world > 1:
        sums = accelerator.reduce(sums.to(accelerator.device), reduction="sum").cpu()
    samples, problems = max(sums[3].item(), 1.0), max(sums[4].item(), 1.0)
    metrics = {"accuracy": sums[0].item() / samples}
    metrics |= {f"pass@{k}": sums[6 + j].item() / problems for j, k in enumerate(pass_k)}
    if n > 1:
        metrics[f"maj@{n}"] = sums[5].item() / problems
    metrics |= {"response_len_mean": sums[1].item() / samples, "truncated_frac": sums[2].item() / samples}
    return metrics, records


def evaluate_sampled(engine, tokenizer, rows: list[dict], args, accelerator=None) -> dict[str, float]:
    """A training script's --eval-samples: N answers per held-out problem sampled as its rollouts are (--temperature,
    --top-p, --top-k, --max-new-tokens, --template), seeded by --seed, on the engine that is already up; avg@N,
    pass@k and maj@N as `eval_sampled/*` metrics, the measures eval.py gives a checkpoint."""
    sampling = SamplingConfig(max_new_tokens=args.max_new_tokens, temperature=args.temperature, top_p=args.top_p,
                              top_k=args.top_k, seed=args.seed)
    metrics, _ = evaluate(engine, tokenizer, rows, template=args.template, sampling=sampling, n=args.eval_samples,
                          accelerator=accelerator)
    return {f"eval_sampled/{k}": v for k, v in metrics.items()}


class HeldOut:
    """A training run's held-out evaluation on the engine it trains with: greedy accuracy before the first step and
    every --eval-every steps, avg@N after the last (--eval-samples), each logged (eval/*, eval_sampled/*), printed,
    and kept per problem in <run>/held_out.jsonl ({"step", "n", "correct": {problem id: right answers of n}}), so two
    runs can be paired by problem and re-graded. `rows` empty (--eval-size 0): nothing is measured or logged."""

    def __init__(self, engine, tokenizer, rows: list[dict], args, accelerator, run_dir):
        self.engine, self.tokenizer, self.rows, self.args = engine, tokenizer, rows, args
        self.accelerator, self.run_dir = accelerator, run_dir
        self.first = self.last = None  # (step, greedy accuracy)

    def _run(self, step: int, sampling: SamplingConfig, n: int, prefix: str) -> float:
        started = time.perf_counter()
        if self.first is None:  # where a run's time goes outside its steps: its start (model load, engine start, ...)
            log_metrics(self.accelerator, self.run_dir, step, {
                "overhead/start": started - STARTED, "overhead/engine_start": getattr(self.engine, "start_seconds", math.nan)})
        metrics, records = evaluate(self.engine, self.tokenizer, self.rows, template=self.args.template,
                                    sampling=sampling, n=n, accelerator=self.accelerator)
        metrics["seconds"] = time.perf_counter() - started  # and its held-out evaluations
        log_metrics(self.accelerator, self.run_dir, step, {f"{prefix}/{k}": v for k, v in metrics.items()})
        pairs = [(rec["id"], int(rec["correct"] == 1.0)) for rec in records]  # this process's problems
        correct = {}
        for problem, right in gather_object(pairs) if self.accelerator.num_processes > 1 else pairs:
            correct[problem] = correct.get(problem, 0) + right
        if self.accelerator.is_main_process:
            with open(self.run_dir / "held_out.jsonl", "a") as f:
                f.write(json.dumps({"step": step, "n": n, "kind": prefix, "correct": correct}) + "\n")
        return metrics["accuracy"]

    def greedy(self, step: int) -> float | None:
        """Greedy held-out accuracy at `step`, logged and printed."""
        if not self.rows:
            if self.first is None:
                self.accelerator.print("no held-out evaluation (0 held-out problems)")
                self.first = (step, None)
            return None
        sampling = SamplingConfig(max_new_tokens=self.args.max_new_tokens, temperature=0.0, seed=self.args.seed)
        accuracy = self._run(step, sampling, 1, "eval")
        if self.first is None:
            self.first = (step, accuracy)
            self.accelerator.print(f"held-out accuracy before step {step}: {accuracy:.3f} ({len(self.rows)} problems)")
        else:
            self._say(f"step {step}: held-out accuracy {accuracy:.3f}")
        self.last = (step, accuracy)
        return accuracy

    def _say(self, line: str) -> None:
        """A line on the main process's screen, above a running progress bar rather than inside it."""
        if self.accelerator.is_main_process:
            tqdm.write(line)

    def finish(self) -> None:
        """avg@--eval-samples after the last step, sampled as the rollouts are, and the run's last line."""
        args = self.args
        if args.eval_samples and self.rows:
            sampling = SamplingConfig(max_new_tokens=args.max_new_tokens, temperature=args.temperature,
                                      top_p=args.top_p, top_k=args.top_k, seed=args.seed)
            avg = self._run(args.total_steps, sampling, args.eval_samples, "eval_sampled")
            self.accelerator.print(f"held-out avg@{args.eval_samples} at step {args.total_steps}: {avg:.3f} "
                                   f"({len(self.rows)} problems)")
        held_out = (f"held-out accuracy: {self.first[1]:.3f} at step {self.first[0]}, {self.last[1]:.3f} at step "
                    f"{self.last[0]}; " if self.rows else "")
        self.accelerator.print(f"{held_out}run in {self.run_dir}")
