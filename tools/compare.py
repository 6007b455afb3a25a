"""The four algorithms compared on one model: train each for every seed, then plot and tabulate the curves.

Each (seed, algorithm) is a separate `python <algorithm>.py` process, run one after the other (never in
parallel: each run uses every core), with the same settings, its output teed to <out>/logs/<algo>__<seed>.log.
Then eval.py samples --final-samples answers per held-out problem from the start model and from each run's last
checkpoint, at the runs' own sampling settings (temperature, top-p, top-k, length): avg@N is the expected reward
of the policy that training optimizes, on the held-out set, and it does not hinge on one greedy answer per
problem. Then <out>/compare.png (greedy held-out accuracy and mean response length vs step, avg@N at the start
and the end: the mean over seeds, a band from min to max when there are 2 or more) and <out>/compare.md (the
table, also printed, and the commands).

    python tools/compare.py                                          # 4 algorithms x seeds 1 2, scripts' defaults
    python tools/compare.py --algorithms lite_ppo grpo --seeds 1 2 3 --total-steps 16 --eval-every 4
    python tools/compare.py --skip-existing --seeds 1 2 3            # add seed 3, reuse the finished runs
    python tools/compare.py --plot-only                              # redraw the plot and table from the runs
    python tools/compare.py --final-samples 0                        # greedy curves only, no sampled eval
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
    final_samples: int = 16
    """eval.py's samples per held-out problem (avg@N) from the start model and each run's last checkpoint; 0 = none"""
    # the settings that define the comparison, the same for every script (None: the scripts' own default)
    model: str | None = None
    """hub id, local Hugging Face directory or an embedded model (smollm2-135m-instruct, gemma3-270m)"""
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


def sampled_eval_command(run_args: dict, model: str, n: int, out_dir: Path) -> list[str]:
    """eval.py on the run's held-out set with the run's sampling settings and --precision, n samples per problem,
    seed 0."""
    return [sys.executable, str(ROOT / "eval.py"), "--model", model,
            "--datasets", run_args["eval_dataset"] or run_args["dataset"], "--split", "test",
            "--limit", str(run_args["eval_size"]), "--n", str(n), "--temperature", str(run_args["temperature"]),
            "--top-p", str(run_args["top_p"]), "--top-k", str(run_args["top_k"]),
            "--max-new-tokens", str(run_args["max_new_tokens"]), "--template", run_args["template"],
            "--backend", run_args["backend"], "--precision", run_args.get("precision", "auto"), "--seed", "0",
            "--output-dir", str(out_dir)]


def load_sampled(eval_dir: Path) -> dict | None:
    """n, avg@n and the problem count of an eval.py summary with one data set, or None if there is none."""
    try:
        (result,) = json.loads((eval_dir / "summary.json").read_text())["results"].values()
    except (OSError, ValueError, KeyError):
        return None
    return {"n": result["n"], "avg": result["metrics"]["accuracy"], "problems": result.get("problems")}


def run_logged(cmd: list[str], log: Path, what: str) -> tuple[int, float]:
    """Run a command to the end, its stdout and stderr teed to the console and to `log`; (exit status, seconds)."""
    print(f"[compare] {what}: {shlex.join(cmd)}\n[compare] log: {log}", flush=True)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}  # logs in real time
    start = time.perf_counter()
    with open(log, "wb") as f:
        f.write(f"$ {shlex.join(cmd)}\n".encode())
        f.flush()
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, cwd=ROOT)  # paths: repo-relative
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


def sampled_eval(cmd: list[str], eval_dir: Path, log: Path, what: str) -> str | None:
    """Run eval.py unless eval_dir holds the result of this same command; None, or why it failed."""
    record, out = log.with_suffix(".json"), str(eval_dir.parents[1])

    def portable(args: list[str]) -> list[str]:  # paths under <out> (checkpoints, eval folders) as {out}/...
        return [a.replace(out, "{out}", 1) if a.startswith(out) else a for a in args]

    if record.exists() and load_sampled(eval_dir) is not None:
        previous = json.loads(record.read_text())
        # cmd[0] is the interpreter, cmd[1] eval.py's path: the same eval recorded from another copy of the tree, or
        # with <out> at another path (a study committed with its records and moved), is reused
        if portable(previous.get("command", [None])[1:]) == portable(cmd[2:]) and previous.get("returncode") == 0:
            print(f"[compare] {what}: finished eval reused ({eval_dir})", flush=True)
            return None
    shutil.rmtree(eval_dir, ignore_errors=True)
    returncode, seconds = run_logged(cmd, log, what)
    record.write_text(json.dumps({"command": [cmd[1], *portable(cmd[2:])], "returncode": returncode,
                                  "wall_s": seconds}, indent=2))
    if returncode != 0 or load_sampled(eval_dir) is None:
        print(f"\n[compare] FAILED: {what} (exit status {returncode}); log {log}, last lines:\n{tail(log)}\n", flush=True)
        return f"{what} failed (exit status {returncode})"
    return None


def sampled_evals(results: dict[str, list[dict]], seeds_of: dict[str, list[int]], out: Path,
                  n: int) -> list[tuple[str, str, Path]]:
    """eval.py, n samples per held-out problem, on the start model (once: every run starts from it) and on each
    finished run's last checkpoint; the failures as (what, why, log)."""
    runs = [(algo, seed, run) for algo, algo_runs in results.items() for seed, run in zip(seeds_of[algo], algo_runs)]
    start_dir = out / "evals" / "start"
    start_cmds = [sampled_eval_command(run["args"], run["args"]["model"], n, start_dir) for _, _, run in runs]
    failed, jobs = [], []  # jobs: (what, eval command, eval folder, log)
    if any(cmd != start_cmds[0] for cmd in start_cmds):
        failed.append(("start model", "the runs differ in model or eval settings: no shared start", out / "logs"))
    else:
        jobs.append(("start model", start_cmds[0], start_dir, out / "logs" / "start__eval.log"))
    for algo, seed, run in runs:
        eval_dir = out / "evals" / run_name(algo, seed)
        checkpoint = out / "runs" / run_name(algo, seed) / "checkpoints" / f"step-{run['args']['total_steps']}"
        jobs.append((f"{algo} seed {seed}", sampled_eval_command(run["args"], str(checkpoint), n, eval_dir), eval_dir,
                     out / "logs" / f"{algo}__{seed}__eval.log"))
    for what, cmd, eval_dir, log in jobs:
        if why := sampled_eval(cmd, eval_dir, log, f"sampled eval of {what}"):
            failed.append((what, why, log))
    return failed


def attach_sampled(results: dict[str, list[dict]], seeds_of: dict[str, list[int]], out: Path) -> None:
    """Give each run with an avg@N of its last checkpoint, and of the start model with the same N, the points
    run["sampled"] = [(first eval step, start avg), (last step, final avg)] and run["sampled_n"] = N."""
    start = load_sampled(out / "evals" / "start")
    for algo, runs in results.items():
        for seed, run in zip(seeds_of[algo], runs):
            final = load_sampled(out / "evals" / run_name(algo, seed))
            if start and final and start["n"] == final["n"]:
                run["sampled"] = [(min(step for step, _ in run["acc"]), start["avg"]),
                                  (run["args"]["total_steps"], final["avg"])]
                run["sampled_n"] = final["n"]


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
    """steps, mean, min, max over the runs that have each step (NaN values and runs without `key` left out)."""
    by_step: dict[int, list[float]] = {}
    for r in runs:
        for step, value in r.get(key, []):
            if value is not None and not math.isnan(value):
                by_step.setdefault(step, []).append(value)
    steps = sorted(by_step)
    lo, hi = [min(by_step[s]) for s in steps], [max(by_step[s]) for s in steps]
    # clamped: the float mean of equal values can lie outside them (3 x 0.045 -> 0.045000000000000005), and an
    # error bar from it would be negative
    mean = [min(max(sum(by_step[s]) / len(by_step[s]), a), b) for s, a, b in zip(steps, lo, hi)]
    return steps, mean, lo, hi


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

    n = sampled_n(results)
    fig, axes = plt.subplots(1, 3 if n else 2, figsize=(18 if n else 12, 4.5))
    panels = list(zip(axes, ("acc", "len", "sampled")))
    for algo, runs in results.items():
        label = f"{algo} ({len(runs)} seed{'s' * (len(runs) > 1)})"
        for ax, key in panels:
            with_key = [r for r in runs if key in r]
            if not with_key:
                continue
            steps, mean, lo, hi = curve(with_key, key)
            (line,) = ax.plot(steps, mean, marker="o" if len(steps) <= 40 else None, markersize=4, label=label)
            if len(with_key) >= 2:
                ax.fill_between(steps, lo, hi, color=line.get_color(), alpha=0.2, linewidth=0)
    first = next(r for runs in results.values() for r in runs)
    ax_acc, ax_len = axes[0], axes[1]
    band = " (band: min..max over seeds)" if any(len(r) >= 2 for r in results.values()) else ""
    fig.suptitle(describe(first["args"]) + band)
    ax_acc.set(title="held-out accuracy (greedy)", xlabel="step", ylabel="eval/accuracy")
    ax_len.set(title="mean response length (training samples)", xlabel="step", ylabel="rollout/response_len_mean (tokens)")
    if n:
        axes[2].set(title=f"held-out avg@{n}, sampled at T={first['args']['temperature']}: start and last step",
                    xlabel="step", ylabel=f"avg@{n}")
    for ax in axes:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def sampled_n(results: dict[str, list[dict]]) -> int | None:
    """N of the avg@N evals, if any run has one."""
    return next((r["sampled_n"] for runs in results.values() for r in runs if "sampled" in r), None)


def table(results: dict[str, list[dict]], seeds_of: dict[str, list[int]]) -> str:
    n = sampled_n(results)
    sampled_head = f" start avg@{n} | final avg@{n} | gain avg@{n} |" if n else ""
    lines = [f"| algorithm | seeds | start acc | final acc | gain |{sampled_head} wall time per run | final response length |",
             "|---|---|---:|---:|---:|" + "---:|" * (3 if n else 0) + "---:|---:|"]
    for algo, runs in results.items():
        if not runs:
            lines.append(f"| {algo} | none finished |" + " — |" * (7 if n else 4))
            continue
        gain, _ = stats([r["final_acc"] - r["start_acc"] for r in runs])
        wall, _ = stats([r["wall_s"] for r in runs])
        length, _ = stats([r["final_len"] for r in runs])  # NaN: DAPO kept no group at the last step
        sampled = ""
        if n:
            points = [r["sampled"] for r in runs if "sampled" in r]  # [(start step, avg), (last step, avg)] per run
            sampled_gain, _ = stats([end - start for (_, start), (_, end) in points])
            sampled = (f" {fmt_pm([p[0][1] for p in points])} | {fmt_pm([p[1][1] for p in points])} | "
                       f"{'—' if math.isnan(sampled_gain) else f'{sampled_gain:+.3f}'} |")
        lines.append(f"| {algo} | {' '.join(map(str, seeds_of[algo]))} | {fmt_pm([r['start_acc'] for r in runs])} | "
                     f"{fmt_pm([r['final_acc'] for r in runs])} | {gain:+.3f} |{sampled} {fmt_seconds(wall)} | "
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
    failed: list[tuple[str, str, Path]] = []  # what ("grpo seed 1", "start model"), why, its log
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
            shutil.rmtree(out / "evals" / run_name(algo, seed), ignore_errors=True)  # the eval of a checkpoint now gone
            cmd = [sys.executable, str(ROOT / f"{algo}.py"), "--seed", str(seed), "--run-name", run_name(algo, seed),
                   "--output-dir", str(out / "runs"), *flags]
            returncode, seconds = run_logged(cmd, log, f"{algo} seed {seed}")
            record.write_text(json.dumps({"algorithm": algo, "seed": seed, "flags": flags, "returncode": returncode,
                                          "wall_s": seconds, "log": str(log), "command": this_command}, indent=2))
            why = (f"exit status {returncode}" if returncode != 0 else
                   f"exit status 0 but no final eval line in {run_dir / 'metrics.jsonl'}" if load_run(run_dir) is None else None)
            if why:
                failed.append((f"{algo} seed {seed}", why, log))
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
                if args.plot_only or not any(what == f"{algo} seed {seed}" for what, _, _ in failed):
                    failed.append((f"{algo} seed {seed}", f"no finished run in {run_dir}", out / "logs" / f"{algo}__{seed}.log"))
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
    if args.final_samples > 0 and not args.plot_only and any(results.values()):
        failed += sampled_evals(results, seeds_of, out, args.final_samples)
    attach_sampled(results, seeds_of, out)
    missing = "".join(f"- {what}: {why}; log {log}\n" for what, why, log in failed)
    if not any(results.values()):
        print(f"\n[compare] no finished run: nothing to plot\n{missing}", flush=True)
        return 1
    plot(results, out / "compare.png")
    first = next(r for runs in results.values() for r in runs)
    n = sampled_n(results)
    eval_record = out / "logs" / "start__eval.json"
    eval_cmd = None
    if n and eval_record.exists():  # shown as run from the repository root, like the scripts' commands
        script, *eval_flags = json.loads(eval_record.read_text())["command"]
        eval_cmd = shlex.join(["python", os.path.relpath(script, ROOT), *eval_flags])
    text = "\n".join([
        f"# {', '.join(args.algorithms)}: {describe(first['args'])}", "",
        f"{first['args']['total_steps']} steps, held-out set: the first {first['args']['eval_size']} problems (or all, if fewer) of "
        f"{first['args']['eval_dataset'] or first['args']['dataset'] + ' (test split)'}, greedy. "
        "Each cell: mean over seeds ± half the range (max - min) / 2 over seeds; gain: the mean of final - start; "
        "wall time: the whole process (model load and evals included); final response length: mean tokens of "
        "the last step's training samples (DAPO: of the groups it kept)." + (
            f" avg@{n}: the mean reward of {n} answers per held-out problem sampled by eval.py at the runs' temperature "
            f"({first['args']['temperature']}), top-p and length limit, from the start model and from each run's last "
            "checkpoint." if n else ""), "",
        table(results, seeds_of), "",
        *(["Not in the table:", "", missing] if failed else []),
        "![curves](compare.png)", "",
        "Runs made by:", "", "```bash", *(made_by or ["(unknown: no record in logs/)"]), "```", "",
        *(["Plot and table by:", "", "```bash", this_command, "```", ""] if made_by != [this_command] else []),
        "Each run (one seed shown; the others differ only in --seed and --run-name):", "",
        "```bash", *commands, "```", "",
        *(["Sampled evals (the start model shown; a run's differs in --model and --output-dir):", "", "```bash", eval_cmd,
           "```", ""] if eval_cmd else [])])
    (out / "compare.md").write_text(text)
    print(f"\n{text}\n[compare] wrote {out / 'compare.png'} and {out / 'compare.md'}", flush=True)
    return 1 if failed else 0


def parse(argv: list[str], args_type=None, description: str = __doc__):
    """(this tool's flags, the flags after a bare `--`, which go unchanged to every script); also tools/ablate.py's."""
    split = argv.index("--") if "--" in argv else len(argv)
    args = tyro.cli(args_type or Args, args=argv[:split], description=description)
    if args.plot_only and split < len(argv):
        raise SystemExit("--plot-only runs nothing: flags after -- would be ignored")
    if args.final_samples < 0:
        raise SystemExit(f"--final-samples {args.final_samples}: must be >= 0 (0: no sampled eval)")
    return args, argv[split + 1:]


def cli(argv: list[str]) -> int:
    return main(*parse(argv))


if __name__ == "__main__":
    sys.exit(cli(sys.argv[1:]))
