"""Agreement with the expected verdicts of the grader suite (tests/grader_cases.py), per kind of case: ours
(`common.grader.math_reward`) against math-verify's default pipeline (`verify(parse(gold), parse(completion))`,
the gold wrapped in $...$ as math-verify's README advises for a bare answer), and extraction throughput.

    .venv/bin/python benchmarks/bench_grader.py            # the table, then the cases where ours errs
"""

import logging
import sys
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
logging.disable(logging.WARNING)  # math-verify warns about timeouts off the main thread

from math_verify import parse, verify  # noqa: E402

from common.grader import extract_answer, math_reward  # noqa: E402
from tests.grader_cases import CASES  # noqa: E402


def math_verify_default(completion: str, gold: str) -> bool:
    try:
        return bool(verify(parse(f"${gold}$"), parse(completion)))
    except BaseException as e:  # its TimeoutException derives from BaseException
        if isinstance(e, KeyboardInterrupt):
            raise
        return False


def main() -> None:
    rows: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
    ours_only_wrong, both_wrong, mv_only_wrong = [], [], []
    for kind, completion, gold, expected, note in CASES:
        ours, mv = math_reward(completion, gold) == 1.0, math_verify_default(completion, gold)
        row = rows[kind]
        row[0] += 1
        row[1] += mv == expected
        row[2] += ours == expected
        case = (kind, completion, gold, expected, extract_answer(completion), note)
        if ours != expected:
            (both_wrong if mv != expected else ours_only_wrong).append(case)
        elif mv != expected:
            mv_only_wrong.append(case)
    total = [sum(r[i] for r in rows.values()) for i in range(3)]
    print("| kind | cases | math-verify default | ours |\n|---|---:|---:|---:|")
    for kind, (n, mv, ours) in rows.items():
        print(f"| {kind} | {n} | {mv} | {ours} |")
    print(f"| **all** | {total[0]} | {total[1]} ({total[1] / total[0]:.1%}) | {total[2]} ({total[2] / total[0]:.1%}) |")
    print(f"\nours right, math-verify wrong: {len(mv_only_wrong)}; both wrong: {len(both_wrong)}; "
          f"ours wrong, math-verify right: {len(ours_only_wrong)}")
    for title, cases in (("ours wrong, math-verify right", ours_only_wrong), ("both wrong", both_wrong)):
        for kind, completion, gold, expected, extracted, note in cases:
            print(f"  [{title}] {kind}: {completion!r} gold {gold!r} expected {int(expected)}, ours read {extracted!r}: {note}")
    texts = [c[1] for c in CASES] * 20
    start = time.perf_counter()
    for text in texts:
        extract_answer(text)
    print(f"\nextraction: {len(texts) / (time.perf_counter() - start):,.0f} completions/s (one thread)")


if __name__ == "__main__":
    main()
