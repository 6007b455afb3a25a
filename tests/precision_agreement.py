"""Under `torchrun --nproc_per_node 2`: make_accelerator with a precision per process (argv: one name per rank),
as auto's CPU probe could choose if its timings fell on both sides of the bar; prints the precision if they agree.

    torchrun --nproc_per_node 2 tests/precision_agreement.py fp32 bf16 OUTPUT_DIR
"""

import os
import sys
from types import SimpleNamespace

import common.run
from common.precision import Precision
from common.run import make_accelerator
from tests.torchrun import leave_together

if __name__ == "__main__":
    *names, output_dir = sys.argv[1:]
    precision = Precision(names[int(os.environ["RANK"])], "given by the test")
    common.run.resolve_precision = lambda flag: precision  # what this process's auto chose
    args = SimpleNamespace(precision="auto", track="none", output_dir=output_dir, prompts_per_step=8)
    make_accelerator(args)
    leave_together()
