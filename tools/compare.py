"""The four algorithms compared on one model: train each for every seed, then plot and tabulate the curves.

Each (seed, algorithm) is a separate `python <algorithm>.py` process, run one after the other (never in
parallel: each run uses every core), with the same settings, its output teed to <out>/logs/<algo>__<seed>.log.
Then <out>/compare.png (held-out accuracy and mean response length vs step: the mean over seeds, a band from
min to max when there are 2 or more) and <out>/compare.md (the table, also printed, and the commands).

    python tools/compare.py                                          # 4 algorithms x seeds 1 2, scripts' defaults
    python tools/compare.py --algorithms lite_ppo grpo --seeds 1 2 3 --total-steps 16 --eval-every 4
    python tools/compare.py --skip-existing --seeds 1 2 3            # add seed 3, reuse the finished runs
    python tools/compare.py --plot-only                              # redraw the plot and table from the runs
    python tools/compare.py --algorithms grpo dapo -- --temperature 0.99 --top-p 0.99   # after --: to every script

Unset settings (None) are the scripts' own defaults; flags after `--` go to every script as they are. A run
that fails is reported (algorithm, seed, log, its last lines) and the others go on; the exit status is then 1.
"""

import json
import math
import os
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import tyro

ROOT = Path(__file__).resolve().parents[1]
Algorithm = Literal["lite_ppo", "grpo", "dapo", "ppo_vanilla"]
SETTINGS = ("model", "dataset", "eval_dataset", "eval_size", "template", "total_steps", "prompts_per_step", "group_size",
            "max_new_tokens", "learning_rate", "eval_every", "backend")  # the Args fields passed to every script
TAIL_LINES = 25  # lines of a failed run's log shown in the report


@dataclass
class Args:
    algorithms: list[Algorithm] = field(default_factory=lambda: ["lite_ppo", "grpo", "dapo", "ppo_vanilla"])
    """scripts to compare (<name>.py at the repo root), in this order in the table and the legend"""
    seeds: list[int] = field(default_factory=lambda: [1, 2])
    """seeds: every algorithm runs once per seed"""
    out: str = "results/compare"
    """output folder: runs/ (the run directories), logs/, compare.png, compare.md"""
    skip_existing: bool = False
    """reuse a run that finished with the same flags (metrics.jsonl holds its final eval) instead of rerunning it"""
    plot_only: bool = False
    """run nothing: plot and tabulate the runs already in --out"""
    # the settings that define the comparison, the same for every script (None: the scripts' own default)
    model: str | None = None
    """hub id, local Hugging Face directory or smollm2-135m-instruct"""
    dataset: str | None = None
    """training problems (arithmetic[:...], gsm8k, math, a file or a hub id)"""
    eval_dataset: str | None = None
    """held-out problems (the scripts' default: the test split of --dataset)"""
    eval_size: int | None = None
    """held-out problems evaluated (the first N)"""
    template: str | None = None
    """prompt: chat or plain"""
    total_steps: int | None = None
    """policy updates per run"""
    prompts_per_step: int | None = None
    """prompts per step"""
    group_size: int | None = None
    """samples per prompt (G)"""
    max_new_tokens: int | None = None
    """completion length limit"""
    learning_rate: float | None = None
    """AdamW learning rate"""
    eval_every: int | None = None
    """held-out evaluation every N steps (and before the first and after the last): the accuracy curve's points"""
    backend: str | None = None
    """generation engine: vllm, hf or auto"""


def settings_flags(args: Args, extra: list[str]) -> list[str]:
    """The flags every script gets (besides --seed, --run-name, --output-dir): the set settings, then `extra`."""
    flags = []
    for name in SETTINGS:
        if (value := getattr(args, name)) is not None:
            flags += [f"--{name.replace('_', '-')}", str(value)]
    return flags + extra


def run_name(algo: str, seed: int) -> str:
    return f"compare__{algo}__{seed}"


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def load_run(run_dir: Path) -> dict | None:
    """A finished run's curves and end points, or None if it did not finish (no eval line at its last step)."""
    try:
        run_args = json.loads((run_dir / "args.json").read_text())
        rows = read_jsonl(run_dir / "metrics.jsonl")
        total = run_args["total_steps"]
    except (OSError, ValueError, KeyError):
        return None
    evals = {r["step"]: r for r in rows if "eval/accuracy" in r}
    train = {r["step"]: r for r in rows if "rollout/response_len_mean" in r}
    if total not in evals or total not in train:
        return None
    first = min(evals)
    return {"args": run_args,
            "acc": sorted((s, r["eval/accuracy"]) for s, r in evals.items()),
            "len": sorted((s, r["rollout/response_len_mean"]) for s, r in train.items()),
            "start_acc": evals[first]["eval/accuracy"], "final_acc": evals[total]["eval/accuracy"],
            "final_len": train[total]["rollout/response_len_mean"]}


def tail(path: Path, n: int = TAIL_LINES) -> str:
    try:
        text = path.read_text(errors="replace").replace("\r", "\n")
    except OSError:
        return "(no log)"
    return "\n".join([line for line in text.splitlines() if line.strip()][-n:])  # tqdm's \r updates: one line each


def run_one(algo: str, seed: int, flags: list[str], out: Path) -> tuple[int, float]:
    """Run one script to the end, its stdout and stderr teed to the console and its log; (exit status, seconds)."""
    log = out / "logs" / f"{algo}__{seed}.log"
    cmd = [sys.executable, str(ROOT / f"{algo}.py"), "--seed", str(seed), "--run-name", run_name(algo, seed),
           "--output-dir", str(out / "runs"), *flags]
    print(f"[compare] {algo} seed {seed}: {shlex.join(cmd)}\n[compare] log: {log}", flush=True)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}  # logs in real time
    start = time.perf_counter()
    with open(log, "wb") as f:
        f.write(f"$ {shlex.join(cmd)}\n".encode())
        f.flush()
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
        try:
            for chunk in iter(lambda: proc.stdout.read1(65536), b""):
                f.write(chunk)
                f.flush()
                sys.stdout.buffer.write(chunk)
                sys.stdout.flush()
            returncode = proc.wait()
        except BaseException:  # Ctrl-C: stop the child too, then stop
            proc.kill()
            proc.wait()
            raise
    return returncode, time.perf_counter() - start


def stats(values: list[float]) -> tuple[float, float]:
    """Mean and half the range (max - min) / 2, ignoring NaN; (nan, nan) when nothing is left."""
    values = [v for v in values if not math.isnan(v)]
    if not values:
        return math.nan, math.nan
    return sum(values) / len(values), (max(values) - min(values)) / 2


def fmt_pm(values: list[float], digits: int = 3) -> str:
    """'mean ± half range' over seeds; just the value for one seed."""
    mean, spread = stats(values)
    if math.isnan(mean):
        return "—"
    return f"{mean:.{digits}f} ± {spread:.{digits}f}" if len(values) > 1 else f"{mean:.{digits}f}"


def fmt_seconds(s: float) -> str:
    return "—" if math.isnan(s) else f"{s:.1f} s" if s < 120 else f"{s / 60:.1f} min"


def curve(runs: list[dict], key: str) -> tuple[list[int], list[float], list[float], list[float]]:
    """steps, mean, min, max over the runs that have each step (NaN values left out)."""
    by_step: dict[int, list[float]] = {}
    for r in runs:
        for step, value in r[key]:
            if value is not None and not math.isnan(value):
                by_step.setdefault(step, []).append(value)
    steps = sorted(by_step)
    return (steps, [sum(by_step[s]) / len(by_step[s]) for s in steps], [min(by_step[s]) for s in steps],
            [max(by_step[s]) for s in steps])


def describe(run_args: dict) -> str:
    model = run_args["model"]
    model = Path(model).name if "/" in model and Path(model).exists() else model  # a local path: its folder name
    p, g = run_args["prompts_per_step"], run_args["group_size"]
    return f"{model} on {run_args['dataset']}, {p} prompts x {g} samples = {p * g} samples/step"


def plot(results: dict[str, list[dict]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    fig, (ax_acc, ax_len) = plt.subplots(1, 2, figsize=(12, 4.5))
    for algo, runs in results.items():
        if not runs:
            continue
        label = f"{algo} ({len(runs)} seed{'s' * (len(runs) > 1)})"
        for ax, key in ((ax_acc, "acc"), (ax_len, "len")):
            steps, mean, lo, hi = curve(runs, key)
            (line,) = ax.plot(steps, mean, marker="o" if len(steps) <= 40 else None, markersize=4, label=label)
            if len(runs) >= 2:
                ax.fill_between(steps, lo, hi, color=line.get_color(), alpha=0.2, linewidth=0)
    first = next(r for runs in results.values() for r in runs)
    band = " (band: min..max over seeds)" if any(len(r) >= 2 for r in results.values()) else ""
    fig.suptitle(describe(first["args"]) + band)
    ax_acc.set(title="held-out accuracy (greedy)", xlabel="step", ylabel="eval/accuracy")
    ax_len.set(title="mean response length (training samples)", xlabel="step", ylabel="rollout/response_len_mean (tokens)")
    for ax in (ax_acc, ax_len):
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def table(results: dict[str, list[dict]], seeds_of: dict[str, list[int]]) -> str:
    lines = ["| algorithm | seeds | start acc | final acc | gain | wall time per run | final response length |",
             "|---|---|---:|---:|---:|---:|---:|"]
    for algo, runs in results.items():
        if not runs:
            lines.append(f"| {algo} | none finished | — | — | — | — | — |")
            continue
        gain, _ = stats([r["final_acc"] - r["start_acc"] for r in runs])
        wall, _ = stats([r["wall_s"] for r in runs])
        length, _ = stats([r["final_len"] for r in runs])  # NaN: DAPO kept no group at the last step
        lines.append(f"| {algo} | {' '.join(map(str, seeds_of[algo]))} | {fmt_pm([r['start_acc'] for r in runs])} | "
                     f"{fmt_pm([r['final_acc'] for r in runs])} | {gain:+.3f} | {fmt_seconds(wall)} | "
                     f"{'—' if math.isnan(length) else f'{length:.1f}'} |")
    return "\n".join(lines)


def main(args: Args, extra: list[str]) -> int:
    out = Path(args.out).resolve()
    if args.plot_only and not (out / "runs").is_dir():
        raise SystemExit(f"--plot-only: no runs in {out} ({out / 'runs'} does not exist)")
    (out / "logs").mkdir(parents=True, exist_ok=True)
    (out / "runs").mkdir(parents=True, exist_ok=True)
    flags = settings_flags(args, extra)
    this_command = shlex.join(["python", *sys.argv])
    failed: list[tuple[str, int, str]] = []  # algorithm, seed, why
    for seed in args.seeds:  # seed-major: a partial comparison has every algorithm of the first seeds
        for algo in args.algorithms:
            run_dir, record = out / "runs" / run_name(algo, seed), out / "logs" / f"{algo}__{seed}.json"
            log = out / "logs" / f"{algo}__{seed}.log"
            if args.plot_only:
                continue
            if args.skip_existing and record.exists() and load_run(run_dir) is not None:
                previous = json.loads(record.read_text())
                if previous.get("flags") == flags and previous.get("returncode") == 0:
                    print(f"[compare] {algo} seed {seed}: finished run reused ({run_dir})", flush=True)
                    continue
                print(f"[compare] {algo} seed {seed}: the existing run had other flags ({previous.get('flags')}): rerun",
                      flush=True)
            if run_dir.exists():  # a script refuses a run name that holds a run (no --resume): start from nothing
                shutil.rmtree(run_dir)
            returncode, seconds = run_one(algo, seed, flags, out)
            record.write_text(json.dumps({"algorithm": algo, "seed": seed, "flags": flags, "returncode": returncode,
                                          "wall_s": seconds, "log": str(log), "command": this_command}, indent=2))
            why = (f"exit status {returncode}" if returncode != 0 else
                   f"exit status 0 but no final eval line in {run_dir / 'metrics.jsonl'}" if load_run(run_dir) is None else None)
            if why:
                failed.append((algo, seed, why))
                print(f"\n[compare] FAILED: {algo} seed {seed} ({why}, after {seconds:.1f} s); "
                      f"log {log}, last lines:\n{tail(log)}\n", flush=True)

    # collect the finished runs (in --plot-only mode, whatever --out holds for these algorithms and seeds)
    results: dict[str, list[dict]] = {algo: [] for algo in args.algorithms}
    seeds_of: dict[str, list[int]] = {algo: [] for algo in args.algorithms}
    commands: list[str] = []  # one script command per algorithm (its first finished seed)
    made_by: list[str] = []  # the compare.py commands that ran the runs shown
    for algo in args.algorithms:
        for seed in args.seeds:
            run_dir, record = out / "runs" / run_name(algo, seed), out / "logs" / f"{algo}__{seed}.json"
            run = load_run(run_dir)
            if run is None:
                if args.plot_only or not any(f[:2] == (algo, seed) for f in failed):
                    failed.append((algo, seed, f"no finished run in {run_dir}"))
                continue
            info = json.loads(record.read_text()) if record.exists() else {}
            run["wall_s"] = info.get("wall_s", math.nan)
            results[algo].append(run)
            seeds_of[algo].append(seed)
            if info.get("command") and info["command"] not in made_by:
                made_by.append(info["command"])
            if seeds_of[algo] == [seed] and "flags" in info:
                commands.append(shlex.join(["python", f"{algo}.py", "--seed", str(seed), "--run-name", run_name(algo, seed),
                                            "--output-dir", str(out / "runs"), *info["flags"]]))
    missing = "".join(f"- {algo} seed {seed}: {why}; log {out / 'logs' / f'{algo}__{seed}.log'}\n" for algo, seed, why in failed)
    if not any(results.values()):
        print(f"\n[compare] no finished run: nothing to plot\n{missing}", flush=True)
        return 1
    plot(results, out / "compare.png")
    first = next(r for runs in results.values() for r in runs)
    text = "\n".join([
        f"# {', '.join(args.algorithms)}: {describe(first['args'])}", "",
        f"{first['args']['total_steps']} steps, held-out set: the first {first['args']['eval_size']} problems (or all, if fewer) of "
        f"{first['args']['eval_dataset'] or first['args']['dataset'] + ' (test split)'}, greedy. "
        "Each cell: mean over seeds ± half the range (max - min) / 2 over seeds; gain: the mean of final - start; "
        "wall time: the whole process (model load and evals included); final response length: mean tokens of "
        "the last step's training samples (DAPO: of the groups it kept).", "",
        table(results, seeds_of), "",
        *(["Not in the table:", "", missing] if failed else []),
        "![curves](compare.png)", "",
        "Runs made by:", "", "```bash", *(made_by or ["(unknown: no record in logs/)"]), "```", "",
        *(["Plot and table by:", "", "```bash", this_command, "```", ""] if made_by != [this_command] else []),
        "Each run (one seed shown; the others differ only in --seed and --run-name):", "",
        "```bash", *commands, "```", ""])
    (out / "compare.md").write_text(text)
    print(f"\n{text}\n[compare] wrote {out / 'compare.png'} and {out / 'compare.md'}", flush=True)
    return 1 if failed else 0


def cli(argv: list[str]) -> int:
    """Flags after a bare `--` go unchanged to every script; the ones before it are this tool's."""
    split = argv.index("--") if "--" in argv else len(argv)
    args = tyro.cli(Args, args=argv[:split], description=__doc__)
    if args.plot_only and split < len(argv):
        raise SystemExit("--plot-only runs nothing: flags after -- would be ignored")
    return main(args, argv[split + 1:])


if __name__ == "__main__":
    sys.exit(cli(sys.argv[1:]))
