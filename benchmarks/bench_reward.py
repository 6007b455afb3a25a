"""Grader throughput: completions per second, `math_reward` in a loop vs `batch_math_reward` (workers).

The mix (~200): MATH solutions graded against their own answer (right) or another problem's (wrong),
GSM8K solutions ("#### 1,000") the same way, answers restated in other forms ("0.5" for "\\frac12"),
prose ending in a number, and a few hostile ones. The single-process pass starts with an empty parse
cache; the batched form is timed twice after an untimed call that starts its workers: first with the
workers' caches cold, then warm (gold answers repeat G times per prompt in training).

    RL_MATH_DATA=/path/to/data python benchmarks/bench_reward.py    # the public sets as JSONL (common/data.py)
    RL_MATH_DATA=/path/to/data python benchmarks/bench_reward.py --n 400 --num-workers 4
"""

import argparse
import json
import os
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import common.grader as grader  # noqa: E402
import common.reward as reward  # noqa: E402

RESTATED = [("0.5", "\\frac12"), ("\\dfrac{3}{4}", "0.75"), ("\\sqrt{8}", "2\\sqrt2"), ("x=3", "3"),
            ("(1, 2)", "\\left(1,2\\right)"), ("\\{2,1\\}", "\\{1,2\\}"), ("30^\\circ", "30"), ("50\\%", "50"),
            ("1,000", "1000"), ("27.0", "27"), ("(x+1)^2", "x^2+2x+1"), ("\\frac{\\pi}{2}", "\\pi/2")]
HOSTILE = ["\\boxed{9^{9^{9^{9}}}}", "\\boxed{100000000!}", "\\boxed{" + "(" * 3000 + ")" * 3000 + "}",
           "1" * 100_000, "\\boxed{(x+y+z)^{50}}", "\\boxed{\\int_0^1 e^{x^2} dx}"]


def make_mix(n: int, seed: int = 0) -> tuple[list[str], list[str]]:
    rng = random.Random(seed)
    if not os.environ.get("RL_MATH_DATA"):
        raise SystemExit("set RL_MATH_DATA to a folder holding math/train.jsonl and gsm8k/test.jsonl (common/data.py)")
    DATA = Path(os.environ["RL_MATH_DATA"])
    math_rows = [json.loads(line) for line in open(DATA / "math" / "train.jsonl")][:2000]
    gsm_rows = [json.loads(line) for line in open(DATA / "gsm8k" / "test.jsonl")][:500]
    items = []
    for _ in range(int(n * 0.4)):
        row, other = rng.choice(math_rows), rng.choice(math_rows)
        items.append((row["solution"], row["answer"] if rng.random() < 0.5 else other["answer"]))
    for _ in range(int(n * 0.3)):
        row, other = rng.choice(gsm_rows), rng.choice(gsm_rows)
        items.append((row["answer"], (row if rng.random() < 0.5 else other)["answer"].split("####")[-1].strip()))
    for _ in range(int(n * 0.15)):
        pred, gold = rng.choice(RESTATED)
        items.append((f"Working through it step by step... so the answer is $\\boxed{{{pred}}}$.", gold))
    for _ in range(int(n * 0.1)):
        k = rng.randint(2, 500)
        items.append((f"She buys {k // 2} apples and {k - k // 2} pears, so {k} fruits in total.", str(k)))
    while len(items) < n:
        items.append((rng.choice(HOSTILE), "5"))
    rng.shuffle(items)
    return [c for c, _ in items], [a for _, a in items]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=200, help="completions in the mix")
    parser.add_argument("--num-workers", type=int, default=2, help="worker processes of the batched form")
    args = parser.parse_args()
    completions, answers = make_mix(args.n)

    grader._PARSED.clear()
    t = time.perf_counter()
    single = [grader.math_reward(c, a) for c, a in zip(completions, answers)]
    single_s = time.perf_counter() - t

    reward.batch_math_reward(["\\boxed{1}"], ["1"], num_workers=args.num_workers, timeout=60.0)  # start workers
    timings = []
    for _ in range(2):
        t = time.perf_counter()
        batched = reward.batch_math_reward(completions, answers, num_workers=args.num_workers)
        timings.append(time.perf_counter() - t)
    reward.shutdown_pool()

    n = len(completions)
    print(f"{n} completions, mean reward {sum(single) / n:.2f}, batched == single: {batched == single}")
    print(f"single process (math_reward loop):      {n / single_s:7.1f} completions/s")
    print(f"batched, {args.num_workers} workers, cold caches:       {n / timings[0]:7.1f} completions/s")
    print(f"batched, {args.num_workers} workers, warm caches:       {n / timings[1]:7.1f} completions/s")


if __name__ == "__main__":
    main()
