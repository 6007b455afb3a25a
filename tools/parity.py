"""Does a reduced-precision setting learn as fp32 does? The default run per setting and seed, paired with fp32 by seed.

Each (setting, seed) is `python lite_ppo.py --precision SETTING --seed SEED --eval-samples 16` (the default run: 8
steps, the embedded model, avg@16 and greedy accuracy on its 21 held-out problems after the last step), one run at a
time, in <runs>/<setting>__<seed>; a finished run is kept and reused, so a stopped study resumes. The start model's
avg@16 is sampled once per setting by eval.py (its generation dtype). Then <out> (docs/precision/parity.json) gets
one record per run, derived from the run directories alone:
    setting, seed, machine (the CPU as /proc/cpuinfo names it, family and model), steps_s (the 8 steps' wall
    seconds, as the run timed them), start_avg16, end_avg16, end_greedy, sampler_abs_diff (mean |log pi - log q|
    over the steps), auto (the setting `--precision auto` picks on this machine now)
and the comparison of each setting with fp32 is printed: the paired mean difference of end avg@16 over the seeds
both have, its 95% t interval (tools/paired.py), and whether it meets the bar for "learns as fp32 does": the
interval contains 0 and its lower end is above -MARGIN; and the 8 steps' speed-up over fp32 on the same seeds.

    python tools/parity.py --settings fp32 bf16-fp32-head bf16-gen --seeds 1 2 3 4 5
    python tools/parity.py --report-only            # the records and the comparison from the runs on disk
"""

import json
import shlex
import statistics
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import torch
import tyro

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from common.precision import SETTINGS, resolve_precision  # noqa: E402
from tools.compare import ROOT, read_jsonl, sampled_eval_command, load_sampled  # noqa: E402
from tools.paired import paired_interval  # noqa: E402

MARGIN = 0.03  # the largest loss of mean avg@16 against fp32 that still counts as learning as fp32 does
SAMPLES = 16


@dataclass
class Args:
    settings: list[str] = field(default_factory=lambda: ["fp32", "bf16-fp32-head", "bf16-gen"])
    """--precision settings to run (fp32 is the reference every other is paired with)"""
    seeds: list[int] = field(default_factory=lambda: [1, 2, 3, 4, 5])
    """seeds of each setting"""
    runs: str = "runs/parity"
    """where the runs go"""
    out: str = "docs/precision/parity.json"
    """the records"""
    report_only: bool = False
    """run nothing: the records and the comparison from the runs on disk"""


def run_command(setting: str, seed: int, runs: Path) -> list[str]:
    return [sys.executable, str(ROOT / "lite_ppo.py"), "--precision", setting, "--seed", str(seed),
            "--eval-samples", str(SAMPLES), "--output-dir", str(runs), "--run-name", f"{setting}__{seed}"]


def record(run_dir: Path, start_avg16: float | None, auto: str) -> dict | None:
    """A finished run's record (module docstring), or None if it did not finish."""
    try:
        run_args = json.loads((run_dir / "args.json").read_text())
        rows = read_jsonl(run_dir / "metrics.jsonl")
        start = json.loads((run_dir / "machine.json").read_text())[-1]
    except (OSError, ValueError, IndexError):
        return None
    total = run_args["total_steps"]
    train = [r for r in rows if "time/generation" in r]
    end = {k: v for r in rows if r["step"] == total for k, v in r.items()}
    if len(train) != total or "eval_sampled/accuracy" not in end or "eval/accuracy" not in end:
        return None
    diffs = [r["rollout/sampler_abs_diff"] for r in train if r.get("rollout/sampler_abs_diff") is not None]
    return {"setting": f"--precision {run_args['precision']}", "seed": run_args["seed"],
            "machine": f"{start['cpu']} (family {start['cpu_family']} model {start['cpu_model']}, "
                       f"{', '.join(start['cpu_bf16_flags']) or 'no bf16 flag'}), torch {start['torch']}, "
                       f"{start['torch_threads']} threads",
            "steps_s": round(sum(r[k] for r in train for k in ("time/generation", "time/reward", "time/training",
                                                                "time/sync")), 1),
            "start_avg16": start_avg16, "end_avg16": end["eval_sampled/accuracy"], "end_greedy": end["eval/accuracy"],
            "sampler_abs_diff": statistics.fmean(diffs) if diffs else None, "auto": auto}


def speeds(run_dir: Path) -> tuple[float, float]:
    """(sampled tokens per second of generation, of the update) over a run's steps."""
    run_args = json.loads((run_dir / "args.json").read_text())
    train = [r for r in read_jsonl(run_dir / "metrics.jsonl") if "time/generation" in r]
    tokens = sum(r["rollout/response_len_mean"] for r in train) * run_args["prompts_per_step"] * run_args["group_size"]
    return tokens / sum(r["time/generation"] for r in train), tokens / sum(r["time/training"] for r in train)


def start_eval(setting: str, runs: Path, report_only: bool) -> float | None:
    """The start model's avg@16 under `setting`'s generation dtype (eval.py, seed 0), sampled once and kept."""
    setting = "bf16" if SETTINGS[setting].generation == torch.bfloat16 else "fp32"  # all eval.py's generation sees
    out_dir = runs / f"start__{setting}"
    if (found := load_sampled(out_dir)) is None and not report_only:
        run_args = {"eval_dataset": None, "dataset": "arithmetic:digits=1", "eval_size": 100, "temperature": 1.0,
                    "top_p": 1.0, "top_k": 0, "max_new_tokens": 96, "template": "chat", "backend": "auto",
                    "precision": setting}  # lite_ppo.py's defaults
        cmd = sampled_eval_command(run_args, "smollm2-135m-instruct", SAMPLES, out_dir)
        print(f"[parity] start model, {setting}: {shlex.join(cmd)}", flush=True)
        subprocess.run(cmd, cwd=ROOT, check=True)
        found = load_sampled(out_dir)
    return None if found is None else found["avg"]


def compare(records: list[dict]) -> list[dict]:
    """Each setting against fp32 on the seeds both have: end avg@16's paired difference and the 8 steps' speed-up."""
    by = {}
    for r in records:
        by.setdefault(r["setting"].split()[-1], {})[r["seed"]] = r
    base = by.get("fp32", {})
    out = []
    for setting, runs in by.items():
        seeds = sorted(set(runs) & set(base))
        if setting == "fp32" or not seeds:
            continue
        diff = paired_interval([runs[s]["end_avg16"] for s in seeds], [base[s]["end_avg16"] for s in seeds])
        greedy = paired_interval([runs[s]["end_greedy"] for s in seeds], [base[s]["end_greedy"] for s in seeds])
        speedup = sum(base[s]["steps_s"] for s in seeds) / sum(runs[s]["steps_s"] for s in seeds)
        out.append({"setting": setting, "seeds": seeds, "avg16": diff, "greedy": greedy, "speedup": speedup,
                    "learns_as_fp32": len(seeds) >= 5 and diff["ci"][0] > -MARGIN and diff["ci"][0] <= 0 <= diff["ci"][1]})
    return out


def main(args: Args) -> None:
    runs = ROOT / args.runs
    unknown = [s for s in args.settings if s not in SETTINGS]
    if unknown:
        sys.exit(f"error: --settings {' '.join(unknown)}: not a setting of common/precision.py ({', '.join(SETTINGS)})")
    if not args.report_only:
        for seed in args.seeds:  # seed after seed: a stopped study has every setting at its first seeds
            for setting in args.settings:
                if record(runs / f"{setting}__{seed}", None, "") is None:
                    cmd = run_command(setting, seed, runs)
                    print(f"[parity] {shlex.join(cmd)}", flush=True)
                    subprocess.run(cmd, cwd=ROOT)
    auto = resolve_precision("auto").name
    records = []
    for run_dir in sorted(runs.glob("*__*")):
        setting = run_dir.name.rsplit("__", 1)[0]
        if setting in SETTINGS and run_dir.is_dir():
            if (r := record(run_dir, start_eval(setting, runs, args.report_only), auto)) is not None:
                records.append(r)
    records.sort(key=lambda r: (list(SETTINGS).index(r["setting"].split()[-1]), r["seed"]))
    out = ROOT / args.out
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(records, indent=1) + "\n")
    print(f"[parity] {len(records)} runs -> {out}; auto on this machine: {auto}")
    for setting in dict.fromkeys(r["setting"].split()[-1] for r in records):
        gen, upd = zip(*(speeds(runs / f"{setting}__{r['seed']}") for r in records if r["setting"].endswith(" " + setting)))
        print(f"  {setting:>15}: generation {statistics.fmean(gen):.0f} sampled tokens/s, update {statistics.fmean(upd):.0f} "
              f"tokens/s (mean over its runs)")
    for c in compare(records):
        lo, hi = c["avg16"]["ci"]
        print(f"  {c['setting']:>15} - fp32, seeds {c['seeds']}: avg@16 {c['avg16']['mean']:+.3f} [{lo:+.3f}, {hi:+.3f}], "
              f"greedy {c['greedy']['mean']:+.3f}; 8 steps {c['speedup']:.2f}x fp32's speed; "
              f"{'learns as fp32 does' if c['learns_as_fp32'] else 'not shown to learn as fp32 does'}")


if __name__ == "__main__":
    main(tyro.cli(Args))
