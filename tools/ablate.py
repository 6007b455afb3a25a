"""The paper's techniques one at a time: named variants of one lite_ppo.py base run, each a switch away from it.

Every (seed, variant) is a separate `python lite_ppo.py <variant's flags>` process (grpo.py, dapo.py: SCRIPTS), one after the other, with the
same model, data, steps and seeds, seed after seed; each run samples --final-samples answers per held-out problem
after its last step (lite_ppo.py --eval-samples, on its engine that is up), and eval.py samples as many from the start
model once (avg@N, as tools/compare.py), so a stopped ablation keeps every run it finished with its eval. Per
technique, <out>/<technique>.png: held-out accuracy per step (greedy) with avg@N at the start and the end, beside the
technique's own mechanism metrics per step; and <out>/ablation.md: the table, the figures and the commands.

    python tools/ablate.py                                   # the four techniques, Lite PPO vs the paper's alternative
    python tools/ablate.py --techniques clip_higher --seeds 1
    python tools/ablate.py --techniques precision            # fp32, bf16, bf16 without the mismatch correction
    python tools/ablate.py --variants lite_ppo group_std no_std batch_mean --seeds 1 2 3
    python tools/ablate.py --skip-existing --seeds 1 2 3 4   # add a seed, reuse the finished runs
    python tools/ablate.py --plot-only
    python tools/ablate.py -- --total-steps 16               # after --: to every run
    python tools/ablate.py --cells gemma3:easy gemma3:hard --until-resolved --final-samples 4 --out docs/cells
    python tools/ablate.py --cells smollm2:arithmetic:digits=1,operands=3   # a cell on any arithmetic spec

A variant is lite_ppo.py's defaults (Lite PPO) plus its flags (VARIANTS); a technique names the variants it
compares and the metrics that show its mechanism (TECHNIQUES). Runs that fail are reported and the others go on;
a finished run keeps its checkpoints' models for the evals and drops their optimizer state (3 GB for Gemma 3 270M);
with --no-keep-models it keeps no checkpoint once its final avg@N is on record.

A cell (`--cells MODEL:TIER` or `MODEL:DATA`) is one of the paper's setups: a model of MODELS (an aligned one, a base
one) with its prompt protocol, trained and evaluated on a tier of problems its start model solves 5-20%, 20-50% or
50-90% of the time (TIERS, screened into <out>/<model>__<tier>/data by tools/screen.py) or on any arithmetic spec
(--cell-eval-size held-out problems). Each cell is a whole ablation in <out>/<model>__<tier>/, and <out>/cells.md
holds one table per technique, a column per cell, and the paired verdicts of the paper's claims (COMPARISONS,
tools/verdicts.py). --until-resolved runs the study's procedure instead (docs/cells/README.md): Lite PPO's learning
test in each cell first, then each comparison seed by seed until tools/paired.py resolves it or it has --max-seeds;
it reads what to run next from the records on disk, so rerunning the command resumes it.
"""

import dataclasses
import json
import math
import shlex
import shutil
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tools.compare import (ROOT, curve, describe, fmt_pm, fmt_seconds, load_run, load_sampled, parse,  # noqa: E402
                           read_jsonl, run_logged, sampled_eval, sampled_eval_command, stats, tail)

VARIANTS = {  # name: lite_ppo.py flags on top of its defaults
    "lite_ppo": [],  # the base: group mean, batch std, token level, clip 0.2, no filter, 0/1 rewards
    "group_std": ["--adv-std-level", "group"],  # GRPO's normalization (Eq. 5)
    "batch_mean": ["--adv-mean-level", "batch"],  # batch mean and std (Eq. 6)
    "no_std": ["--adv-std-level", "none"],  # reward - group mean (Eq. 7)
    "clip_high": ["--clip-eps-high", "0.28"],  # clip-higher (Eq. 8), DAPO's upper bound: on-policy, the ratio is 1
    # 4 optimizer steps per rollout: mini-batches 2-4 are off-policy, so a ratio can reach a clip bound
    "off_policy": ["--num-mini-batches", "4"],
    "clip_high_off_policy": ["--num-mini-batches", "4", "--clip-eps-high", "0.28"],
    "seq_agg": ["--loss-agg", "seq"],  # sequence-level aggregation
    "overlong_filter": ["--overlong-filter"],  # truncated responses out of the loss
    "minus_one": ["--wrong-reward", "-1"],  # -1/1 rewards
    "grpo": [], "dapo": [],  # the paper's headline: grpo.py and dapo.py as they are (SCRIPTS)
    # not one of the paper's techniques: the numerics under it (common/precision.py, common/mismatch.py)
    "fp32": ["--precision", "fp32"],  # pinned: the base's auto is bf16 where that is faster
    "bf16": ["--precision", "bf16"],  # with the default correction of the sampler-trainer mismatch
    "bf16_no_is": ["--precision", "bf16", "--sampler-is", "none"],  # uncorrected
}
Variant = Literal["lite_ppo", "group_std", "batch_mean", "no_std", "clip_high", "off_policy", "clip_high_off_policy",
                  "seq_agg", "overlong_filter", "minus_one", "grpo", "dapo", "fp32", "bf16", "bf16_no_is"]
TECHNIQUES = {  # name: (title, the variants compared, the metrics that show the mechanism)
    # Lite PPO's mixed normalization (group mean, batch std) vs GRPO's group std vs batch mean and std
    "normalization": ("advantage normalization", ["lite_ppo", "group_std", "batch_mean"],
                      ["rollout/adv_abs_mean", "rollout/adv_abs_max"]),
    # on the base (one update per rollout) every ratio is exactly 1 and no clip bound acts: compared off-policy
    "clip_higher": ("clip-higher", ["off_policy", "clip_high_off_policy"], ["losses/clipfrac", "losses/entropy"]),
    "aggregation": ("loss aggregation", ["lite_ppo", "seq_agg"], ["rollout/response_len_mean"]),
    "overlong_filter": ("overlong filtering", ["lite_ppo", "overlong_filter"], ["rollout/truncated_frac"]),
    "headline": ("Lite PPO against GRPO and DAPO", ["lite_ppo", "grpo", "dapo"],
                 ["rollout/solve_none_frac", "rollout/response_len_mean"]),
    "precision": ("precision and the mismatch correction", ["fp32", "bf16", "bf16_no_is"],
                  ["rollout/sampler_kl", "rollout/sampler_ratio_max", "time/generation", "time/training"]),
}
PAPER = ["normalization", "clip_higher", "aggregation", "overlong_filter"]  # the default: the paper's four
MODELS = {  # a cell's model: its type, the flags that select it, its prompt protocol (docs/evidence.md)
    "smollm2": ("aligned", ["--model", "smollm2-135m-instruct", "--template", "chat"]),
    # base: does not follow an instruction (5% right under "plain"), answers worked problems in one line of 19-28
    # tokens (fewshot: 19% on one-digit sums at T=1). Its rate: 8 steps on digits=1,operands=3 took the held-out
    # greedy accuracy from 0.115 to 0.025 in 2 steps at 2e-5, to 0.005 at 1e-5, 0.050 at 3e-6, 0.055 at 1e-6; at
    # 3e-6 it learns after 8 steps: on the medium tier greedy 0.120, 0.075, 0.130, 0.230 at steps 0, 8, 16, 24
    "gemma3": ("base", ["--model", "gemma3-270m", "--template", "fewshot", "--max-new-tokens", "48",
                        "--learning-rate", "3e-6", "--total-steps", "24"]),
}
SCRIPTS = {"grpo": "grpo.py", "dapo": "dapo.py"}  # variants run by another script, as it is (else lite_ppo.py)
# The paper's claims as paired comparisons: (technique, variant a, variant b, {model type: the variant the paper expects
# to do better, what it says}); a type left out: the paper makes no claim there, and the comparison is not run
COMPARISONS = [
    ("normalization", "lite_ppo", "group_std", {t: ("lite_ppo", "group mean with batch std beats group std, most of all "
                                                "where most groups are uniform") for t in ("aligned", "base")}),
    ("normalization", "lite_ppo", "batch_mean", {t: ("lite_ppo", "group mean with batch std beats batch mean and std")
                                                 for t in ("aligned", "base")}),
    ("aggregation", "lite_ppo", "seq_agg", {"aligned": ("seq_agg", "sequence level does better on aligned models"),
                                            "base": ("lite_ppo", "token level helps base models")}),
    # on the base (one update per rollout) every ratio is 1 and no clip bound acts: compared off-policy
    ("clip_higher", "clip_high_off_policy", "off_policy",
     {"aligned": ("clip_high_off_policy", "clip-higher helps aligned models"),
      "base": ("off_policy", "clip-higher can hurt base models, whose clip rate is tiny")}),
    ("overlong_filter", "overlong_filter", "lite_ppo",
     {t: ("overlong_filter", "helps where the length limit truncates many responses") for t in ("aligned", "base")}),
    ("headline", "lite_ppo", "grpo", {"base": ("lite_ppo", "Lite PPO beats GRPO on base models")}),
    ("headline", "lite_ppo", "dapo", {"base": ("lite_ppo", "Lite PPO beats DAPO on base models")}),
]
TRUNCATES = 0.1  # overlong filtering is compared only in cells whose Lite PPO rollouts truncate this share or more
# A study's cells run over sessions on different machines, and `auto` is bf16 where it is faster (an AMD Zen 4 here)
# and fp32 elsewhere (an Intel Xeon here): pinned, so every run of the study computes alike (docs/performance.md)
CELL_PRECISION = ["--precision", "fp32"]
MIN_SEEDS, MAX_SEEDS = 3, 10  # the second edition's until-resolved design (tests/test_paired.py: its power and errors)
DELTA = 0.03  # a paired difference of end avg@N inside +-DELTA is "no effect" (about the first edition's seed spread)
TIERS = ("easy", "medium", "hard")  # by the start model's solve rate: tools/screen.py writes <out>/<model>__<tier>/data
Technique = Literal["normalization", "clip_higher", "aggregation", "overlong_filter", "headline", "precision"]


@dataclass
class Args:
    techniques: list[Technique] = field(default_factory=lambda: list(PAPER))
    """techniques to compare: each runs its variants (the base run is shared); precision: fp32, bf16, bf16 uncorrected"""
    variants: list[Variant] = field(default_factory=list)
    """more variants to run (e.g. no_std batch_mean minus_one); they join the figure of every technique they change"""
    seeds: list[int] = field(default_factory=lambda: [1, 2, 3])
    """seeds: every variant runs once per seed"""
    out: str = "results/ablation"
    """output folder: runs/, logs/, evals/, <technique>.png, ablation.md"""
    skip_existing: bool = False
    """reuse a run that finished with the same flags instead of rerunning it"""
    plot_only: bool = False
    """run nothing: plot and tabulate the runs already in --out"""
    final_samples: int = 16
    """samples per held-out problem (avg@N) after each run's last step (in the run) and from the start model
    (eval.py, once); 0 = none"""
    cells: list[str] = field(default_factory=list)
    """MODEL:TIER or MODEL:DATA setups (MODELS: smollm2, gemma3; TIERS: easy, medium, hard; DATA: an arithmetic spec),
    each a whole ablation; none: one ablation on the flags after --"""
    cell_eval_size: int = 200
    """held-out problems per cell (avg@N's standard error over problems is ~0.02 at 200)"""
    until_resolved: bool = False
    """--cells: the study's procedure (tools/verdicts.py): Lite PPO's learning test first, then each of the paper's
    comparisons (COMPARISONS) seed by seed, 1, 2, ..., until its paired verdict is resolved or it has --max-seeds;
    --techniques and --seeds are not used; rerun the same command to resume"""
    min_seeds: int = MIN_SEEDS
    """--until-resolved: seeds every comparison and the learning test start with"""
    max_seeds: int = MAX_SEEDS
    """--until-resolved: the most seeds a comparison gets"""
    budget_hours: float = math.inf
    """--until-resolved: start no run after this many hours (wall time) of this invocation"""
    keep_models: bool = True
    """keep each finished run's model (its last checkpoint, for eval.py's benchmarks); --no-keep-models deletes a
    run's checkpoints once its final avg@N is on record (a Gemma 3 cell's 18 runs keep ~20 GB)"""


def run_name(variant: str, seed: int) -> str:
    return f"ablate__{variant}__{seed}"


def variants_of(args: Args) -> list[str]:
    names = [v for t in args.techniques for v in TECHNIQUES[t][1]] + list(args.variants)
    return list(dict.fromkeys(names))  # in order, once each


def mean_over_steps(run: dict, key: str) -> float:
    """A mechanism metric's mean over a run's steps (NaN where the run never logged it)."""
    return sum(v for _, v in run[key]) / len(run[key]) if run.get(key) else math.nan


def mechanism_keys(techniques: list[str]) -> list[str]:
    """The metrics that show the techniques' mechanisms, once each, in order."""
    return list(dict.fromkeys(k for t in techniques for k in TECHNIQUES[t][2]))


def metric_curves(run_dir: Path, keys: list[str]) -> dict[str, list[tuple[int, float]]]:
    rows = [r for r in read_jsonl(run_dir / "metrics.jsonl") if "rollout/response_len_mean" in r]
    return {k: [(r["step"], r[k]) for r in rows if r.get(k) is not None] for k in keys}


def record_path(out: Path, variant: str, seed: int) -> Path:
    """Where run_variant writes a run's record once its process has exited."""
    return out / "logs" / f"{variant}__{seed}.json"


def record_of(out: Path, variant: str, seed: int) -> dict:
    """What run_variant wrote once the run's process had exited (flags, returncode, wall_s), or {} before that."""
    path = record_path(out, variant, seed)
    return json.loads(path.read_text()) if path.exists() else {}


def run_variant(variant: str, seed: int, flags: list[str], out: Path, skip_existing: bool,
                eval_samples: int = 0) -> str | None:
    """Run (or reuse) one variant and seed, with its final avg@eval_samples computed in the run (lite_ppo.py
    --eval-samples, on the engine that is up); None, or why it failed. A finished run with the same variant flags
    is reused whatever its eval_samples: a run without them is evaluated by eval.py instead (sampled_evals)."""
    run_dir, record, log = out / "runs" / run_name(variant, seed), record_path(out, variant, seed), \
        out / "logs" / f"{variant}__{seed}.log"
    previous = record_of(out, variant, seed) if skip_existing else {}
    if previous.get("flags") == flags and previous.get("returncode") == 0 and load_run(run_dir) is not None:
        print(f"[ablate] {variant} seed {seed}: finished run reused ({run_dir})", flush=True)
        return None
    shutil.rmtree(run_dir, ignore_errors=True)  # the script refuses a run name that holds a run
    shutil.rmtree(out / "evals" / run_name(variant, seed), ignore_errors=True)
    cmd = [sys.executable, str(ROOT / SCRIPTS.get(variant, "lite_ppo.py")), "--seed", str(seed), "--run-name", run_name(variant, seed),
           "--output-dir", str(out / "runs"), *flags]
    cmd += ["--eval-samples", str(eval_samples)] if eval_samples else []
    returncode, seconds = run_logged(cmd, log, f"{variant} seed {seed}")
    record.write_text(json.dumps({"variant": variant, "seed": seed, "flags": flags, "returncode": returncode,
                                  "wall_s": seconds, "command": shlex.join(["python", *sys.argv])}, indent=2))
    why = (f"exit status {returncode}" if returncode else
           "no final eval line in metrics.jsonl" if load_run(run_dir) is None else None)
    if why:
        print(f"\n[ablate] FAILED: {variant} seed {seed} ({why}); log {log}, last lines:\n{tail(log)}\n", flush=True)
    else:  # the optimizer's state only serves --resume, and a failed run is rerun whole: keep the model for evals
        for state in (run_dir / "checkpoints").glob("step-*/state"):
            shutil.rmtree(state)
    return why


def drop_models(out: Path, variant: str, seed: int, final_samples: int) -> None:
    """--no-keep-models: delete a finished run's checkpoints once nothing here needs them, that is once its final
    avg@final_samples is on record (in its metrics, or eval.py's); a run whose eval failed keeps its model to retry."""
    runs = collect([variant], [seed], out, [])[variant]
    if runs and (final_samples == 0 or (runs[0]["final_sampled"] or {}).get("n") == final_samples):
        shutil.rmtree(out / "runs" / run_name(variant, seed) / "checkpoints", ignore_errors=True)


def in_run_sampled(run_dir: Path, run: dict) -> dict | None:
    """The avg@N a run sampled at its last step (--eval-samples N), as load_sampled gives eval.py's; or None."""
    n, total = run["args"].get("eval_samples", 0), run["args"]["total_steps"]
    rows = [r for r in read_jsonl(run_dir / "metrics.jsonl") if r.get("step") == total and "eval_sampled/accuracy" in r]
    return {"n": n, "avg": rows[-1]["eval_sampled/accuracy"], "problems": None, "in_run": True} if n and rows else None


def collect(variants: list[str], seeds: list[int], out: Path, keys: list[str]) -> dict[str, list[dict]]:
    """The finished runs of each variant: compare.load_run's curves, the mechanism metrics, wall time, seed. A run
    counts once run_variant has written its record with exit status 0: before that, one still running has its final
    greedy eval but not yet the avg@N sampled after it, and would be tabulated by its greedy accuracy."""
    results, start = {}, load_sampled(out / "evals" / "start")
    for variant in variants:
        results[variant] = []
        for seed in seeds:
            run_dir, record = out / "runs" / run_name(variant, seed), record_of(out, variant, seed)
            if record.get("returncode") != 0 or (run := load_run(run_dir)) is None:
                continue
            run |= metric_curves(run_dir, keys) | {"seed": seed, "wall_s": record["wall_s"],
                                                   "machine": machine_of(run_dir), "steps_s": steps_seconds(run_dir)}
            final = in_run_sampled(run_dir, run) or load_sampled(out / "evals" / run_name(variant, seed))
            run["final_sampled"] = final
            if final and start and final["n"] == start["n"]:
                run["sampled"] = [(min(s for s, _ in run["acc"]), start["avg"]), (run["args"]["total_steps"], final["avg"])]
                run["sampled_n"] = final["n"]
            results[variant].append(run)
    return results


def steps_seconds(run_dir: Path) -> float:
    """The seconds a run spent in its steps (rollout, reward, update, weight sync: its time/* metrics); the rest of
    its wall time is its start, held-out evals and checkpoints."""
    return sum(v for r in read_jsonl(run_dir / "metrics.jsonl") for k, v in r.items() if k.startswith("time/"))


def machine_of(run_dir: Path) -> str:
    """The CPU (or GPU) a run's wall time was measured on, from its machine.json: "AMD EPYC (family 25, model 17)";
    the starts' machines joined with " + " where a resumed run moved; "not recorded" for runs older than the record."""
    try:
        starts = json.loads((run_dir / "machine.json").read_text())
    except (OSError, ValueError):
        return "not recorded"
    names = [s["gpu"] or f"{s['cpu'] or 'CPU'} (family {s['cpu_family']}, model {s['cpu_model']})" for s in starts]
    return " + ".join(dict.fromkeys(names)) or "not recorded"


def sampled_evals(results: dict[str, list[dict]], out: Path, n: int, start: bool = True) -> list[str]:
    """avg@n of the start model (if `start`) and of every finished run's last checkpoint; the failures."""
    failed, runs = [], [(v, r) for v, rs in results.items() for r in rs]
    if not runs:
        return failed
    first = runs[0][1]["args"]
    jobs = [("start model", sampled_eval_command(first, first["model"], n, out / "evals" / "start"), out / "evals" / "start",
             out / "logs" / "start__eval.log")] if start else []
    for variant, run in runs:
        if run["final_sampled"] and run["final_sampled"]["n"] == n and run["final_sampled"].get("in_run"):
            continue  # the run sampled its own avg@n at its last step
        name = run_name(variant, run["seed"])
        checkpoint = out / "runs" / name / "checkpoints" / f"step-{run['args']['total_steps']}"
        jobs.append((f"{variant} seed {run['seed']}", sampled_eval_command(run["args"], str(checkpoint), n, out / "evals" / name),
                     out / "evals" / name, out / "logs" / f"{variant}__{run['seed']}__eval.log"))
    for what, cmd, eval_dir, log in jobs:
        if why := sampled_eval(cmd, eval_dir, log, f"sampled eval of {what}"):
            failed.append(f"{what}: {why}")
    return failed


def plot_technique(technique: str, results: dict[str, list[dict]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    title, _, keys = TECHNIQUES[technique]
    fig, axes = plt.subplots(1, 1 + len(keys), figsize=(6 * (1 + len(keys)), 4.5), squeeze=False)
    axes = axes[0]
    n = next((r["sampled_n"] for runs in results.values() for r in runs if "sampled_n" in r), None)
    for variant, runs in results.items():
        if not runs:
            continue
        label = f"{variant} {' '.join(VARIANTS[variant]) or '(base)'} ({len(runs)} seed{'s' * (len(runs) > 1)})"
        color = None
        for ax, key in zip(axes, ["acc", *keys]):
            steps, mean, lo, hi = curve(runs, key)
            (line,) = ax.plot(steps, mean, marker="o", markersize=3, label=label, color=color)
            color = line.get_color()
            if len(runs) >= 2:
                ax.fill_between(steps, lo, hi, color=color, alpha=0.2, linewidth=0)
        if n and all("sampled" in r for r in runs):
            steps, mean, lo, hi = curve(runs, "sampled")
            axes[0].errorbar(steps, mean, yerr=[[m - a for m, a in zip(mean, lo)], [b - m for m, b in zip(mean, hi)]],
                             color=color, linestyle="--", marker="s", capsize=3, label=f"{variant}: avg@{n} (sampled)")
    first = next(r for runs in results.values() for r in runs)
    fig.suptitle(f"{title}: {describe(first['args'])} (band: min..max over seeds)")
    axes[0].set(title="held-out accuracy: greedy per eval, avg@N at start and end", xlabel="step", ylabel="accuracy")
    for ax, key in zip(axes[1:], keys):
        ax.set(title=key, xlabel="step", ylabel=key)
    for ax in axes:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def table(results: dict[str, list[dict]], keys: list[str]) -> str:
    n = next((r["sampled_n"] for runs in results.values() for r in runs if "sampled_n" in r), None)
    head = ["variant", "flags", "seeds", "start acc", "final acc"] + ([f"start avg@{n}", f"final avg@{n}"] if n else []) \
        + [f"{k} (mean over steps)" for k in keys] + ["wall time per run"]
    lines = ["| " + " | ".join(head) + " |", "|---|---|---|" + "---:|" * (len(head) - 3)]
    for variant, runs in results.items():
        if not runs:
            continue
        cells = [variant, " ".join(VARIANTS[variant]) or "(base)", " ".join(str(r["seed"]) for r in runs),
                 fmt_pm([r["start_acc"] for r in runs]), fmt_pm([r["final_acc"] for r in runs])]
        if n:
            cells += [fmt_pm([r["sampled"][0][1] for r in runs if "sampled" in r]),
                      fmt_pm([r["sampled"][1][1] for r in runs if "sampled" in r])]
        for k in keys:
            cells.append(fmt_pm([mean_over_steps(r, k) for r in runs]))
        cells.append(fmt_seconds(stats([r["wall_s"] for r in runs])[0]))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(args: Args, extra: list[str]) -> int:
    out = Path(args.out).resolve()
    for sub in ("runs", "logs", "evals"):
        (out / sub).mkdir(parents=True, exist_ok=True)
    variants = variants_of(args)
    keys = mechanism_keys(args.techniques)
    failed, started = [], False
    if not args.plot_only:
        for seed in args.seeds:  # seed-major; each run evaluated as it ends, so a stopped ablation keeps every run
            for variant in variants:  # it finished whole (its checkpoint need not outlive the session)
                if why := run_variant(variant, seed, VARIANTS[variant] + extra, out, args.skip_existing,
                                      args.final_samples):
                    failed.append(f"{variant} seed {seed}: {why}")
                    continue
                if args.final_samples > 0:  # the start model with the first run that finished
                    failed += sampled_evals(finished := collect([variant], [seed], out, keys), out, args.final_samples,
                                            start=not started)
                    started = started or any(finished.values())
                if not args.keep_models:
                    drop_models(out, variant, seed, args.final_samples)
    results = collect(variants, args.seeds, out, keys)
    if not any(results.values()):
        print("[ablate] no finished run: nothing to plot", flush=True)
        return 1
    sections = []
    for technique in args.techniques:
        compared = TECHNIQUES[technique][1] + [v for v in args.variants if technique_of(v) == technique]
        compared = [v for v in dict.fromkeys(compared) if results.get(v)]
        if not compared:
            continue
        subset = {v: results[v] for v in compared}
        plot_technique(technique, subset, out / f"{technique}.png")
        sections += [f"## {TECHNIQUES[technique][0]}", "", table(subset, TECHNIQUES[technique][2]), "",
                     f"![{technique}]({technique}.png)", ""]
    first = next(r for runs in results.values() for r in runs)
    held_out = f": {start['problems']}" if (start := load_sampled(out / "evals" / "start")) and start["problems"] else ""
    commands = sorted({shlex.join(["python", "lite_ppo.py", *VARIANTS[v], *extra, "--seed", "SEED"]) for v in variants})
    text = "\n".join([f"# The paper's techniques on lite_ppo.py: {describe(first['args'])}", "",
                      f"{first['args']['total_steps']} steps; held-out: the first {first['args']['eval_size']} problems "
                      f"(or all, if fewer{held_out}), "
                      "greedy per eval; avg@N sampled at the runs' temperature from the start model and the last "
                      "checkpoint. Cells: mean ± half the range over seeds.", "", *sections,
                      *(["Not in the tables:", "", *[f"- {f}" for f in failed], ""] if failed else []),
                      "Made by:", "", "```bash", shlex.join(["python", *sys.argv]), "```", "", "Each run:", "",
                      "```bash", *commands, "```", ""])
    (out / "ablation.md").write_text(text)
    print(f"\n{text}\n[ablate] wrote {out / 'ablation.md'}", flush=True)
    return 1 if failed else 0


def cell_flags(cell: str, eval_size: int, out: Path) -> tuple[str, list[str]]:
    """(folder name, lite_ppo.py flags) of a MODEL:TIER cell (the tier's problems screened into <out>/<folder>/data by
    tools/screen.py) or a MODEL:DATA one (an arithmetic spec); SystemExit naming --cells if it is neither."""
    model, _, tier = cell.partition(":")
    if model not in MODELS or not (tier in TIERS or tier.startswith("arithmetic")):
        raise SystemExit(f"--cells {cell!r}: expected MODEL:TIER or MODEL:DATA with MODEL one of {', '.join(MODELS)}, "
                         f"TIER one of {', '.join(TIERS)} and DATA an arithmetic spec (arithmetic:digits=1,operands=3)")
    from common.data import load_rows
    from common.errors import UsageError

    name = f"{model}__{tier if tier in TIERS else tier.removeprefix('arithmetic').lstrip(':') or 'default'}"
    folder = (out / name / "data").resolve()  # relative to the repository (the runs' working directory): the runs'
    data = (str(folder.relative_to(ROOT)) if folder.is_relative_to(ROOT) else str(folder)) if tier in TIERS else tier  # flags match on any clone
    if tier in TIERS and not (out / name / "data" / "test.jsonl").exists():
        raise SystemExit(f"--cells {cell}: {out / name / 'data'} holds no screened tier; run "
                         f"python tools/screen.py --model {model} --pool ... --out {out} first")
    try:
        held_out = len(load_rows(data, split="test", flag="--cells"))  # a bad spec stops here, not in every run
    except UsageError as e:
        raise SystemExit(str(e)) from None
    if held_out < eval_size:
        print(f"[ablate] cell {cell}: its held-out split has {held_out} problems, fewer than --cell-eval-size "
              f"{eval_size}", flush=True)
    return name, MODELS[model][1] + ["--dataset", data, "--eval-dataset", data, "--eval-size", str(eval_size)] + \
        CELL_PRECISION


def run_cells(args: Args, extra: list[str]) -> int:
    """Each cell as a whole ablation in its own folder, then <out>/cells.md: per technique, a column per cell."""
    out, status, results, keys = Path(args.out).resolve(), 0, {}, mechanism_keys(args.techniques)
    cells = {cell: cell_flags(cell, args.cell_eval_size, out) for cell in args.cells}  # every cell checked before any run
    for cell, (name, flags) in cells.items():
        print(f"[ablate] cell {cell}: {' '.join(flags)}", flush=True)
        sub = dataclasses.replace(args, cells=[], out=str(out / name))
        status |= main(sub, flags + extra)
        results[cell] = collect(variants_of(sub), args.seeds, out / name, keys)
    out.mkdir(parents=True, exist_ok=True)
    (out / "cells.md").write_text(cells_table(args, results, {c: n for c, (n, _) in cells.items()}))
    print(f"[ablate] wrote {out / 'cells.md'}", flush=True)
    return status


def next_runs(out: Path, names: list[str], args: Args, failed: set) -> list[tuple[str, str, int]]:
    """--until-resolved: the (cell folder, variant, seed) runs the study needs next, from the records on disk: Lite
    PPO's first min_seeds seeds; one more of Lite PPO while its learning test is short of 3 SE with every gain > 0;
    in a cell that learns, each comparison's first min_seeds seeds, then one more seed while it is unresolved and
    below max_seeds. The whole family is judged at once (tools/verdicts.py), as its verdicts are."""
    from tools.verdicts import cell_results, derive, learning

    entries = derive(out, looks=args.max_seeds - args.min_seeds + 1, delta=DELTA)
    todo = []
    for name in names:
        start, results = cell_results(out / name) if (out / name / "runs").is_dir() else (None, {})
        lite = results.get("lite_ppo", {})
        if len(lite) < args.min_seeds:
            todo += [(name, "lite_ppo", s) for s in range(1, args.min_seeds + 1) if s not in lite]
            continue
        learned = learning(start, lite)
        if not learned["learns"]:
            if learned.get("why", "").startswith("mean gain") and len(lite) < args.max_seeds:
                todo.append((name, "lite_ppo", max(lite) + 1))  # every seed gained: more seeds may show it
            continue
        cell = name.replace("__", ":", 1)
        for e in (e for e in entries if e["cell"] == cell):
            have = {v: set(results.get(v, {})) for v in (e["variant_a"], e["variant_b"])}
            if e["seeds"] < args.min_seeds:
                seeds = range(1, args.min_seeds + 1)
            elif e["verdict"] == "unresolved" and e["seeds"] < args.max_seeds:
                seeds = [min(set(range(1, args.max_seeds + 1)) - (have[e["variant_a"]] & have[e["variant_b"]]))]
            else:
                continue
            todo += [(name, v, s) for s in seeds for v in have if s not in have[v]]
    return [run for run in dict.fromkeys(todo) if run not in failed]


def until_resolved(args: Args, extra: list[str]) -> int:
    """The study: run what next_runs asks, round after round, until nothing is asked (or --budget-hours is spent);
    then tools/verdicts.py's records of the whole study under --out."""
    from tools.verdicts import write

    out, t0, failed = Path(args.out).resolve(), time.perf_counter(), set()
    flags = dict(cell_flags(cell, args.cell_eval_size, out) for cell in args.cells)  # every cell checked first
    while todo := next_runs(out, list(flags), args, failed):
        print(f"[ablate] next: {len(todo)} run(s): " + ", ".join(f"{n}/{v}/{s}" for n, v, s in todo), flush=True)
        for name, variant, seed in todo:
            if (time.perf_counter() - t0) / 3600 > args.budget_hours:
                print(f"[ablate] --budget-hours {args.budget_hours} spent: stopping; rerun to resume", flush=True)
                write(out, args.max_seeds - args.min_seeds + 1, DELTA, readme=False)
                return 0
            for sub in ("runs", "logs", "evals"):
                (out / name / sub).mkdir(parents=True, exist_ok=True)
            if why := run_variant(variant, seed, flags[name] + VARIANTS[variant] + extra, out / name, True,
                                  args.final_samples):
                failed.add((name, variant, seed))
                print(f"[ablate] {name}/{variant}/{seed} failed ({why}): not retried in this invocation", flush=True)
                continue
            if load_sampled(out / name / "evals" / "start") is None:  # the start model, once per cell
                finished = collect([variant], [seed], out / name, [])
                if fails := sampled_evals(finished, out / name, args.final_samples, start=True):
                    print(f"[ablate] {name}: the start's eval failed ({fails}); rerun to retry", flush=True)
                    return 1
            if not args.keep_models:
                drop_models(out / name, variant, seed, args.final_samples)
    write(out, args.max_seeds - args.min_seeds + 1, DELTA, readme=False)
    return 1 if failed else 0


def cells_table(args: Args, results: dict[str, dict[str, list[dict]]], names: dict[str, str]) -> str:
    """Per technique: a row per variant, a column per cell, the final avg@N (mean ± half range over seeds; the
    final greedy accuracy where a cell has no sampled eval), the final greedy accuracy, then the technique's first
    mechanism metric; then the paired verdicts of the paper's claims (tools/verdicts.py, a fixed design: one look)
    and the cost per machine."""
    lines = [f"# The paper's techniques per setup (cells: {', '.join(args.cells)})", "",
             "Final held-out avg@N (greedy accuracy where no sampled eval ran), then the final greedy accuracy, "
             "mean ± half the range over seeds; each cell's folder has its ablation.md and figures.", ""]
    for technique in args.techniques:
        title, variants, keys = TECHNIQUES[technique]
        lines += [f"## {title}", "", "| variant | " + " | ".join(f"{c} ({names[c]}/)" for c in args.cells) + " |",
                  "|---|" + "---:|" * len(args.cells)]
        for variant in variants:
            cells = []
            for cell in args.cells:
                runs = results[cell].get(variant, [])
                metric = [mean_over_steps(r, keys[0]) for r in runs]
                greedy = [r["final_acc"] for r in runs]
                cells.append(f"{fmt_pm(finals(runs))}; greedy {fmt_pm(greedy)} ({keys[0]} {fmt_pm(metric)})"
                             if runs else "—")
            lines.append(f"| {variant} | " + " | ".join(cells) + " |")
        lines.append("")
    from tools.verdicts import derive, table

    out = Path(args.out).resolve()
    lines += ["## the paper's claims, paired over seeds", "", table(derive(out, looks=1, delta=DELTA), out), ""]
    lines += ["## cost", "", "Wall time per machine: the same run takes different times on different CPUs.", "",
              "| cell | machine | runs | wall time per run (mean) | of it in the steps | all runs |",
              "|---|---|---:|---:|---:|---:|"]
    for cell in args.cells:
        by_machine = {}
        for r in (r for runs in results[cell].values() for r in runs):
            by_machine.setdefault(r.get("machine", "not recorded"), []).append(r)
        for where, runs in sorted(by_machine.items()):
            wall = [r["wall_s"] for r in runs]
            lines.append(f"| {cell} | {where} | {len(runs)} | {fmt_seconds(stats(wall)[0])} | "
                         f"{fmt_seconds(stats([r.get('steps_s', math.nan) for r in runs])[0])} | {fmt_seconds(sum(wall))} |")
    return "\n".join(lines + [""])


def finals(runs: list[dict]) -> list[float]:
    """Each run's final held-out avg@N (its final greedy accuracy where no sampled eval ran)."""
    return [r["sampled"][1][1] if "sampled" in r else r["final_acc"] for r in runs]


def technique_of(variant: str) -> str | None:
    """The technique an extra variant belongs to (by the flag it sets)."""
    flag = VARIANTS[variant][0] if VARIANTS[variant] else None
    return {"--adv-std-level": "normalization", "--adv-mean-level": "normalization", "--wrong-reward": "normalization",
            "--clip-eps-high": "clip_higher", "--loss-agg": "aggregation", "--overlong-filter": "overlong_filter",
            "--precision": "precision"}.get(flag)


if __name__ == "__main__":
    args, extra = parse(sys.argv[1:], Args, __doc__)
    sys.exit(until_resolved(args, extra) if args.until_resolved else run_cells(args, extra) if args.cells else
             main(args, extra))
