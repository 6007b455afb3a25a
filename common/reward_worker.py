"""Worker process of `common.reward.batch_math_reward`: `python -m common.reward_worker`.

Protocol, JSON lines: it prints {"ready": true} once imported and warmed up, then answers each input
line {"pred": str, "gold": str} with {"reward": 0.0 | 1.0}, one at a time, and exits at end of input.
It runs `is_equiv` in its main thread, so math-verify's signal.alarm timeouts work; the parent kills it
if it still overruns its deadline. Test hooks, on only with REWARD_WORKER_TEST_HOOKS=1 in its
environment (gold answers come from data sets, never from model text): gold "__hang__" sleeps
forever, gold "__die__" exits at once without answering.
"""

import json
import logging
import os
import signal
import sys
import time


def main() -> None:
    # Our protocol owns the real stdout; anything a library prints goes to stderr instead.
    out = os.fdopen(os.dup(sys.stdout.fileno()), "w")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's business; we exit on EOF
    logging.getLogger("math_verify").setLevel(logging.ERROR)  # per-item timeout warnings

    from common.grader import is_equiv

    # Warm up the ANTLR parser (its first parse of each construct is slow) before the parent's
    # per-item deadlines start counting.
    warm_up = [("\\frac{1}{2}", "0.5"), ("\\left( 3, \\sqrt{2} \\right)", "[1,2)"), ("x^2+1=y", "\\{1,2\\}")]
    for pred, gold in warm_up:
        is_equiv(pred, gold)
    hooks = os.environ.get("REWARD_WORKER_TEST_HOOKS") == "1"
    out.write('{"ready": true}\n')
    out.flush()
    for line in sys.stdin:
        item = json.loads(line)
        if hooks and item["gold"] == "__hang__":
            time.sleep(3600)
        if hooks and item["gold"] == "__die__":
            os._exit(3)
        reward = 1.0 if is_equiv(item["pred"], item["gold"]) else 0.0
        out.write(json.dumps({"reward": reward}) + "\n")
        out.flush()


if __name__ == "__main__":
    main()
