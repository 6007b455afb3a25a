"""Run plumbing: Accelerate setup, seeding, the run directory, metrics, checkpoints and resume.

A run directory holds args.json (the flags), machine.json (each start's machine and resolved precision),
metrics.jsonl and checkpoints/. Checkpoint layout (`{run_dir}/checkpoints/step-{N}/`):
    model/     the policy in Hugging Face format (transformers and vLLM load it as is)
    state/     `accelerator.save_state`: weights, optimizer, scheduler and every process's RNGs
    meta.json  step and args; written last, then the folder is renamed from `.tmp-step-{N}`,
               so a kill during the save never damages (or replaces) the previous checkpoint.
The position in the data needs no state: the prompts of step N are a function of (seed, N).
"""

import contextlib
import dataclasses
import importlib.util
import json
import logging
import os
import random
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
import transformers
import tyro
from accelerate import Accelerator
from accelerate.utils import ProjectConfiguration, set_seed

from common.data import TEMPLATES
from common.errors import BadSpec, Unavailable, UsageError
from common.model import check_model, hf_names, unwrap
from common.precision import Precision, keep_freed_memory, machine, resolve_precision
from common.vllm_internals import verbose

STARTED = time.perf_counter()  # when a script's setup began (this module is imported first): its start's time

TRACKER_PACKAGES = {"tensorboard": "tensorboard", "wandb": "wandb"}


def cli(main: Callable, args_type: type) -> None:
    """Parse the flags into `args_type` (tyro: `--help` lists them, a value outside a flag's choices is refused) and
    run `main`; a bad flag, data spec, path or missing package ends the run with one line that names it, exit 1.
    Freed memory stays in the process for the next step (keep_freed_memory). The script's own lines and bars are
    the screen: transformers' weight-loading and shard-writing bars are off (RL_MATH_VERBOSE=1: on)."""
    args = tyro.cli(args_type)
    keep_freed_memory()
    if not verbose():
        transformers.utils.logging.disable_progress_bar()
    try:
        main(args)
    except UsageError as e:
        sys.exit(f"error: {e}")


def make_accelerator(args) -> tuple[Accelerator, Precision]:
    """The run's precision (--precision, resolved on this machine: common/precision.py), printed once with why, and an
    Accelerator that runs the update in it: bf16 autocast with fp32 master weights, or fp32. Trackers write under
    --output-dir/<run name>."""
    precision = resolve_precision(args.precision)
    cuda = torch.cuda.is_available()
    log_with = None if args.track in (None, "none") else args.track
    if log_with is not None and importlib.util.find_spec(TRACKER_PACKAGES[log_with]) is None:
        raise Unavailable(f"--track {log_with}: the {TRACKER_PACKAGES[log_with]} package is not installed "
                          f"(pip install {TRACKER_PACKAGES[log_with]})")
    # cpu=True makes a multi-process CPU launch (torchrun, `accelerate launch --multi_gpu`) a real gloo process
    # group; without it the processes run as independent copies that never average gradients (docs/design.md).
    accelerator = Accelerator(cpu=not cuda, mixed_precision="bf16" if precision.update_bf16 else "no", log_with=log_with,
                              project_config=ProjectConfiguration(project_dir=args.output_dir))
    if args.prompts_per_step % accelerator.num_processes:
        raise BadSpec(f"--prompts-per-step {args.prompts_per_step} must be a multiple of the {accelerator.num_processes} processes")
    if accelerator.num_processes > 1 and args.precision == "auto":  # the CPU probe is timed in each process
        chosen = accelerator.gather_for_metrics([precision.name], use_gather_object=True)
        if len(set(chosen)) > 1:
            raise BadSpec(f"--precision {args.precision}: the processes chose {', '.join(chosen)} (process order); "
                          "pass --precision fp32 or bf16")
    accelerator.print(precision)
    accelerator.precision = precision  # machine.json records the setting (mixed_precision does not name it)
    return accelerator, precision


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    set_seed(seed)


def make_run_dir(accelerator, script: str, args) -> Path:
    """`{output_dir}/{script}__{seed}__{time}` unless --run-name is given; the same on every process."""
    name = args.run_name or f"{script}__{args.seed}__{int(time.time())}"
    name = accelerator.gather_for_metrics([name], use_gather_object=True)[0] if accelerator.num_processes > 1 else name
    run_dir = Path(args.output_dir) / name
    if accelerator.is_main_process:
        run_dir.mkdir(parents=True, exist_ok=True)
        if args.resume:  # forget what the crashed run logged after its last checkpoint: those steps rerun
            _trim_metrics(run_dir / "metrics.jsonl", _step_of(latest_checkpoint(run_dir)))
        (run_dir / "args.json").write_text(json.dumps(dataclasses.asdict(args), indent=2, default=str))
        _record_machine(run_dir / "machine.json", accelerator)
        if args.track not in (None, "none"):  # hyperparameters as TensorBoard takes them: numbers, strings, booleans
            config = {k: v if isinstance(v, (int, float, str, bool)) else str(v) for k, v in dataclasses.asdict(args).items()}
            accelerator.init_trackers(name, config=config)
    return run_dir


def _record_machine(path: Path, accelerator) -> None:
    """Append this start's machine and resolved precision to machine.json (a resumed run may restart elsewhere):
    `--precision auto` in args.json does not say what a run computed in."""
    starts = json.loads(path.read_text()) if path.exists() else []
    starts.append({"time": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "processes": accelerator.num_processes,
                   "precision": accelerator.precision.name, **machine()})
    path.write_text(json.dumps(starts, indent=2))


def _trim_metrics(path: Path, step: int) -> None:
    """Keep the lines of steps before `step` and the training line of `step` (its eval is logged again)."""
    if not path.exists():
        return
    kept = [line for line in path.read_text().splitlines(keepends=True)
            if line.strip() and ((s := json.loads(line))["step"] < step
                                 or (s["step"] == step and not any(k.startswith("eval/") for k in s)))]
    tmp = path.with_suffix(".tmp")
    tmp.write_text("".join(kept))
    tmp.replace(path)


def log_metrics(accelerator, run_dir: Path, step: int, metrics: dict[str, float]) -> None:
    """Append one JSON line to `metrics.jsonl` (main process) and forward to the trackers.

    A NaN (e.g. a mean over no samples: DAPO's step that kept no group) is written as null: strict JSON."""
    if accelerator.is_main_process:
        clean = {k: None if isinstance(v, float) and v != v else v for k, v in metrics.items()}
        with open(run_dir / "metrics.jsonl", "a") as f:
            f.write(json.dumps({"step": step, **clean}, allow_nan=False) + "\n")
    accelerator.log(metrics, step=step)


def _step_of(checkpoint: Path | None) -> int:
    """N of a `step-N` checkpoint folder; 0 for no checkpoint."""
    return int(checkpoint.name.split("-")[1]) if checkpoint is not None else 0


def latest_checkpoint(run_dir: Path) -> Path | None:
    done = [p for p in (run_dir / "checkpoints").glob("step-*") if (p / "meta.json").exists()]
    return max(done, key=_step_of, default=None)


def save_checkpoint(accelerator, run_dir: Path, step: int, model, tokenizer, args, keep: int) -> Path:
    """Write checkpoint `step` atomically and keep the newest `keep` ones."""
    root = run_dir / "checkpoints"
    tmp, final = root / f".tmp-step-{step}", root / f"step-{step}"
    if accelerator.is_main_process:
        shutil.rmtree(tmp, ignore_errors=True)  # leftovers of a save that was killed
    accelerator.wait_for_everyone()
    with _quiet_shared_tensors():
        accelerator.save_state(str(tmp / "state"))
    state_dict = accelerator.get_state_dict(model)  # gathers shards (FSDP, ZeRO-3) on every process
    accelerator.wait_for_everyone()  # every process has written its part of the state (its RNG states) into tmp
    if accelerator.is_main_process:
        unwrap(model).save_pretrained(tmp / "model", state_dict=dict(hf_names(model, state_dict.items())))
        tokenizer.save_pretrained(tmp / "model")
        (tmp / "meta.json").write_text(json.dumps({"step": step, "args": dataclasses.asdict(args)}, default=str))
        os.replace(tmp, final)
        ckpts = sorted(root.glob("step-*"), key=_step_of)
        for old in ckpts[:-keep] if keep > 0 else []:
            shutil.rmtree(old)
    accelerator.wait_for_everyone()
    return final


@contextlib.contextmanager
def _quiet_shared_tensors():
    """A tied LM head is the embedding: accelerate's save_state stores it once and says "Removed shared tensor ...
    while saving" at every save; loading ties it again (tests/test_lite_ppo.py resumes bitwise from such a
    checkpoint). RL_MATH_VERBOSE=1 shows it."""
    log = logging.getLogger("accelerate.utils.other")
    drop = (lambda record: verbose() or "Removed shared tensor" not in record.getMessage())  # after a "[RANK 0] " prefix
    log.addFilter(drop)
    try:
        yield
    finally:
        log.removeFilter(drop)


def load_checkpoint(accelerator, ckpt: Path) -> int:
    """Restore weights, optimizer, scheduler and RNGs; return the step to continue from."""
    accelerator.load_state(str(ckpt / "state"))
    return json.loads((ckpt / "meta.json").read_text())["step"]


def all_gather(x: torch.Tensor) -> torch.Tensor:
    """Concatenate a tensor (same shape on every process) over all processes; identity when alone."""
    if not (torch.distributed.is_available() and torch.distributed.is_initialized()):
        return x
    # NCCL gathers only CUDA tensors; gloo (CPU runs) takes them where they are
    device = torch.device("cuda", torch.cuda.current_device()) if torch.distributed.get_backend() == "nccl" else x.device
    parts = [torch.empty_like(x, device=device) for _ in range(torch.distributed.get_world_size())]
    torch.distributed.all_gather(parts, x.contiguous().to(device))
    return torch.cat(parts).to(x.device)


def global_sum(x: float | torch.Tensor) -> float:
    """Sum a number over all processes; itself when alone."""
    return all_gather(torch.as_tensor(x, dtype=torch.float64).reshape(1)).sum().item()


def global_max(x: float | torch.Tensor) -> float:
    """The largest of a number over all processes; itself when alone."""
    return all_gather(torch.as_tensor(x, dtype=torch.float64).reshape(1)).max().item()


def check_args(args, **checks: tuple[bool, str]) -> None:
    """Reject bad flag values before any model or data is loaded; each error names its flag.

    The flags every script has are checked here; a script passes its own as flag=(ok, why)."""

    def need(ok: bool, flag: str, why: str) -> None:
        if not ok:
            raise BadSpec(f"--{flag.replace('_', '-')} {getattr(args, flag)!r}: {why}")

    check_model(args.model)
    need(args.group_size >= 2, "group_size", "needs at least 2 samples per prompt (advantages compare within a group)")
    need(args.prompts_per_step >= 1, "prompts_per_step", "must be positive")
    need(args.total_steps >= 1, "total_steps", "must be positive")
    need(args.max_new_tokens >= 1, "max_new_tokens", "must be positive")
    need(args.temperature > 0, "temperature", "must be > 0 (log-probs divide the logits by it)")
    need(0 < args.top_p <= 1, "top_p", "must be in (0, 1]")
    need(args.top_k >= 0, "top_k", "must be >= 0 (0 = off)")
    need(args.learning_rate > 0, "learning_rate", "must be positive")
    need(args.backend in ("auto", "vllm", "hf"), "backend", "must be auto, vllm or hf")
    need(args.template in TEMPLATES, "template", f"must be one of {', '.join(TEMPLATES)}")
    need(args.ppo_epochs >= 1, "ppo_epochs", "must be positive")
    need(args.num_mini_batches >= 1, "num_mini_batches", "must be positive")
    need(args.micro_batch_tokens >= 1, "micro_batch_tokens", "must be positive")
    need(args.eval_size >= 0, "eval_size", "must be >= 0 (0: no held-out evaluation)")
    need(args.eval_samples >= 0, "eval_samples", "must be >= 0 (0: no sampled evaluation)")
    need(args.eval_every >= 1 and args.save_every >= 1, "eval_every", "--eval-every and --save-every must be positive")
    need(args.sampler_is_cap > 0, "sampler_is_cap", "must be positive")
    need(not args.resume or args.run_name is not None, "resume", "needs --run-name (the run to continue)")
    if args.run_name is not None and not args.resume:
        need(not (Path(args.output_dir) / args.run_name / "metrics.jsonl").exists(), "run_name",
             f"{Path(args.output_dir) / args.run_name} already holds a run: pass --resume to continue it, "
             "or choose another --run-name")
    for flag, (ok, why) in checks.items():
        need(ok, flag, why)
