"""Under `torchrun --nproc_per_node 2`: save_checkpoint while the second process writes its part of the state (its
RNG states) 2 s late; the main process must not move the checkpoint into place before that part is in it.

    torchrun --nproc_per_node 2 tests/checkpoint_race.py MODEL_DIR RUN_DIR
"""

import sys
import time
from pathlib import Path
from dataclasses import dataclass

import torch
from accelerate import Accelerator
from transformers import AutoModelForCausalLM, AutoTokenizer

from common.run import save_checkpoint
from tests.torchrun import leave_together


@dataclass
class Args:
    seed: int = 1


if __name__ == "__main__":
    model_dir, run_dir = sys.argv[1], Path(sys.argv[2])
    accelerator = Accelerator(cpu=True)
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    model, optimizer = accelerator.prepare(model, torch.optim.SGD(model.parameters(), lr=0.1))
    if accelerator.process_index == 1:  # a slow disk or a busy core: this process's files land late
        save = torch.save
        torch.save = lambda *a, **k: (time.sleep(2), save(*a, **k))[1]
    args = Args()  # save_checkpoint writes dataclasses.asdict(args) into meta.json
    save_checkpoint(accelerator, run_dir, 1, model, AutoTokenizer.from_pretrained(model_dir), args, keep=1)
    leave_together()
