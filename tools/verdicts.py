"""The study's verdicts, derived from its per-run records alone: <root>/verdicts.json, one forest plot per technique
(<root>/forest_<technique>.png) and the README's table, so that recomputing them from docs/cells gives the same files.

    python tools/verdicts.py                                    # docs/cells: the second edition, and the README
    python tools/verdicts.py --root docs/cells/first_edition --looks 1 --no-readme   # the first edition, re-judged
    python tools/verdicts.py --check                            # exit 1 if a file differs from what the records give

A cell is a folder <root>/<model>__<tier>/ of tools/ablate.py: runs/ (each run's args, metrics, held_out.jsonl),
logs/ (each run's exit status and wall time) and evals/start/ (the start model's avg@N on the cell's held-out
problems, fresh samples). Per cell:

- learning first: Lite PPO's gain on seed s is its end avg@N minus the start's; the cell learns when every seed's
  gain is > 0 and their mean is >= 3 standard errors, SE = sqrt(sd^2 / seeds + se_start^2) (se_start: the start's
  own sampling error, bounded by sqrt(a (1 - a) / (N x problems))). A cell that does not learn gives no verdicts.
- each of the paper's claims (tools/ablate.py COMPARISONS, for the cell's model type) compares two variants on the
  seeds both ran: the per-seed differences of their end avg@N, their t interval and a verdict (tools/paired.py:
  agrees, contradicts, no_effect inside +-delta, unresolved); the comparisons of all learning cells are one family
  (Benjamini-Hochberg), and each p-value is first multiplied by the looks the design allows (--looks: the
  until-resolved design looks after min_seeds..max_seeds seeds; a fixed design, 1).
"""

import json
import math
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tools.ablate import (COMPARISONS, DELTA, MAX_SEEDS, MIN_SEEDS, MODELS, TECHNIQUES, TRUNCATES, collect,  # noqa: E402
                          machine_of, mean_over_steps, run_name)
from tools.compare import ROOT, load_sampled  # noqa: E402
from tools.paired import Q, judge, paired_interval, seeds_to_resolve  # noqa: E402
from tools.screen import HELD_OUT, MIN_TRAIN  # noqa: E402

README_BEGIN, README_END = "<!-- verdicts:begin -->", "<!-- verdicts:end -->"


@dataclass
class Args:
    root: str = "docs/cells"
    """the study's folder: one sub-folder per cell (<model>__<tier>)"""
    looks: int = MAX_SEEDS - MIN_SEEDS + 1
    """looks at the data the design allows per comparison (the p-values' Bonferroni factor); a fixed design: 1"""
    delta: float = DELTA
    """the no-effect band +-delta (avg@N)"""
    readme: bool = True
    """also write the table into README.md (between its verdicts markers)"""
    judge_all: bool = False
    """judge every cell's comparisons, learning or not (writes verdicts_judge_all.json, not the README)"""
    check: bool = False
    """write nothing: exit 1 if verdicts.json or the README table differs from what the records give"""


def r4(x: float) -> float | None:
    return None if x is None or not math.isfinite(x) else round(x, 4)


def cell_folders(root: Path) -> list[Path]:
    """The cells under root, in MODELS then tier order (easy, medium, hard, then any other)."""
    order = {"easy": 0, "medium": 1, "hard": 2}
    found = [p for p in root.iterdir() if p.is_dir() and "__" in p.name and p.name.split("__")[0] in MODELS
             and (p / "runs").is_dir()]
    return sorted(found, key=lambda p: (list(MODELS).index(p.name.split("__")[0]), order.get(p.name.split("__")[1], 3),
                                        p.name))


def unformed(root: Path) -> list[str]:
    """The tiers tools/screen.py could not form (too few problems in the band), each in a few words from tier.json."""
    notes = []
    for tier_json in sorted(root.glob("*__*/tier.json")):
        info = json.loads(tier_json.read_text())
        if not info["enough"]:
            low, high = info["band"]
            notes.append(f"{info['model']}:{info['tier']} ({info['train'] + info['test']} problems solved "
                         f"{low:g}-{high:g} of the time among {info['screened']} screened)")
    return notes


def cell_results(folder: Path) -> tuple[dict | None, dict[str, dict[int, dict]]]:
    """The start's avg@N (None if not measured) and every finished run: {variant: {seed: run}}."""
    seeds = sorted({int(p.name.rsplit("__", 1)[1]) for p in (folder / "runs").iterdir() if p.name.count("__") == 2})
    variants = sorted({p.name.split("__")[1] for p in (folder / "runs").iterdir() if p.name.count("__") == 2})
    results = collect(variants, seeds, folder, ["rollout/truncated_frac"])
    return load_sampled(folder / "evals" / "start"), {v: {r["seed"]: r for r in runs} for v, runs in results.items()}


def end_of(run: dict, n: int) -> float | None:
    """A run's end avg@N, if it sampled N answers per problem as the start did."""
    final = run.get("final_sampled")
    return final["avg"] if final and final["n"] == n else None


def learning(start: dict | None, runs: dict[int, dict]) -> dict:
    """The learning test of a cell from Lite PPO's runs (module docstring)."""
    if start is None:
        return {"start": None, "learns": False, "gain_mean": None, "gain_ci": None, "seeds": 0, "why": "no start"}
    ends = {s: e for s, r in sorted(runs.items()) if (e := end_of(r, start["n"])) is not None}
    gains = [e - start["avg"] for e in ends.values()]
    se_start = math.sqrt(start["avg"] * (1 - start["avg"]) / (start["n"] * (start["problems"] or 1)))
    out = {"start": r4(start["avg"]), "start_se": r4(se_start), "seeds": len(gains), "lite_ppo_ends": [r4(e) for e in ends.values()]}
    if len(gains) < 2:
        return out | {"learns": False, "gain_mean": r4(gains[0]) if gains else None, "gain_ci": None,
                      "why": f"{len(gains)} seed(s) of lite_ppo"}
    interval = paired_interval([e for e in ends.values()], [start["avg"]] * len(gains))
    se = math.sqrt(interval["sd"] ** 2 / len(gains) + se_start**2)
    learns = min(gains) > 0 and interval["mean"] >= 3 * se
    why = ("" if learns else f"lowest gain {min(gains):+.3f}" if min(gains) <= 0 else
           f"mean gain {interval['mean']:+.3f} < 3 SE = {3 * se:.3f}")
    return out | {"learns": learns, "gain_mean": r4(interval["mean"]), "gain_ci": [r4(x) for x in interval["ci"]],
                  "gain_se": r4(se), "why": why}


def truncated_share(runs: dict[int, dict]) -> float:
    """Lite PPO's share of truncated rollouts in a cell, over its seeds' steps."""
    shares = [mean_over_steps(r, "rollout/truncated_frac") for r in runs.values()]
    return statistics.fmean(shares) if shares else math.nan


def sampling_se(ends: list[float], n: int, problems: int) -> float:
    """The held-out sampling error of one run's avg@N on its fixed problems, at most sqrt(a (1 - a) / (N P))."""
    return statistics.fmean(math.sqrt(a * (1 - a) / (n * problems)) for a in ends) if ends else math.nan


def derive(root: Path, looks: int, delta: float, judge_all: bool = False) -> list[dict]:
    """verdicts.json's entries: one per (cell, comparison), in cell then COMPARISONS order; judge_all: judge the cells
    that do not learn too (what the paired rule alone would say)."""
    entries, family = [], []
    for folder in cell_folders(root):
        model, tier = folder.name.split("__", 1)
        model_type = MODELS[model][0]
        start, results = cell_results(folder)
        learned = learning(start, results.get("lite_ppo", {}))
        screen = json.loads((folder / "tier.json").read_text()) if (folder / "tier.json").exists() else {}
        truncation = truncated_share(results.get("lite_ppo", {}))
        for technique, a, b, claims in COMPARISONS:
            if model_type not in claims:
                continue
            expected, claim = claims[model_type]
            if technique == "overlong_filter" and not truncation >= TRUNCATES:
                continue  # the limit truncates (almost) nothing here: no claim to test
            n = start["n"] if start else None
            pairs = [(s, ea, eb) for s in sorted(set(results.get(a, {})) & set(results.get(b, {})))
                     if n and (ea := end_of(results[a][s], n)) is not None and (eb := end_of(results[b][s], n)) is not None]
            entry = {"cell": f"{model}:{tier}", "model_type": model_type, "tier": tier,
                     "start": learned["start"], "start_screen": screen.get("screen_rate_test"),
                     "learns": learned["learns"], "gain_mean": learned["gain_mean"], "gain_ci": learned["gain_ci"],
                     "technique": technique, "variant_a": a, "variant_b": b, "expected": expected, "claim": claim,
                     "seeds": len(pairs), "paired_mean": None, "ci": None, "delta": delta, "verdict": "unresolved",
                     "runs": sorted(f"{folder.name}/runs/{run_name(v, s)}" for s, _, _ in pairs for v in (a, b))}
            if pairs:
                ends_a, ends_b = [x for _, x, _ in pairs], [x for _, _, x in pairs]
                entry["sampling_se"] = r4(sampling_se(ends_a + ends_b, n, start["problems"] or 1) * math.sqrt(2))
            pending = learned["seeds"] < MIN_SEEDS and not learned.get("why", "").startswith("lowest gain")
            if not learned["learns"] and not judge_all and pending:  # the learning test has not run to its seeds
                entry |= {"verdict": "unresolved", "why": f"learning test pending ({learned['seeds']} of {MIN_SEEDS} "
                                                          "seeds of lite_ppo)"}
            elif not learned["learns"] and not judge_all:
                entry |= {"verdict": "no_learning", "why": learned["why"]}
                if len(pairs) >= 2:  # on record, not judged: a technique's effect on a run that does not learn
                    interval = paired_interval(ends_a, ends_b)
                    entry |= {"paired_mean": r4(interval["mean"]), "ci": [r4(x) for x in interval["ci"]]}
            elif len(pairs) >= 2:
                family.append((entry, {"a": ends_a, "b": ends_b, "expected_sign": 1 if expected == a else -1}))
            entries.append(entry)
    for (entry, _), judged in zip(family, judge([c for _, c in family], delta, looks)):
        entry |= {"paired_mean": r4(judged["mean"]), "ci": [r4(x) for x in judged["ci"]], "sd": r4(judged["sd"]),
                  "p": r4(judged["p"]), "p_adjusted": r4(judged["p_adjusted"]), "verdict": judged["verdict"]}
        if judged["verdict"] == "unresolved":
            entry["seeds_to_resolve"] = seeds_to_resolve(judged["sd"], judged["mean"], delta)
    return entries


def cost(root: Path) -> dict[str, float]:
    """Machine-hours (wall clock of the 2-core machines) the cells' runs and start evals took, per machine and in
    all, from their records: logs/<variant>__<seed>.json (runs) and logs/start__eval.json."""
    hours: dict[str, float] = {}
    for folder in cell_folders(root):
        for log in (folder / "logs").glob("*.json"):
            record = json.loads(log.read_text())
            if record.get("returncode") != 0:
                continue
            if "variant" in record:
                where = machine_of(folder / "runs" / run_name(record["variant"], record["seed"]))
            else:  # the start's eval: its summary names the machine
                start = folder / "evals" / "start" / "summary.json"
                m = json.loads(start.read_text()).get("machine") if start.exists() else None
                where = f"{m['cpu'] or 'CPU'} (family {m['cpu_family']}, model {m['cpu_model']})" if m else "not recorded"
            hours[where] = hours.get(where, 0.0) + record["wall_s"] / 3600
    return hours


def cost_line(entries: list[dict], root: Path) -> str:
    """Machine-hours in all and per resolved verdict (agrees, contradicts, no_effect)."""
    hours = cost(root)
    resolved = sum(e["verdict"] in ("agrees", "contradicts", "no_effect") for e in entries)
    total = sum(hours.values())
    per = f"{total / resolved:.1f} per resolved verdict" if resolved else "no resolved verdict yet"
    return (f"Cost: {total:.1f} machine-hours (2 cores; " + ", ".join(f"{m}: {h:.1f}" for m, h in sorted(hours.items()))
            + f"), {per}.") if hours else "Cost: no run on record."


def counts(entries: list[dict]) -> str:
    """How many comparisons, cells and verdicts of each kind."""
    tally = {v: sum(e["verdict"] == v for e in entries) for v in ("agrees", "contradicts", "no_effect", "unresolved",
                                                                   "no_learning")}
    return (f"{len(entries)} comparisons in {len({e['cell'] for e in entries})} cells: "
            + ", ".join(f"{v.replace('_', ' ')} {c}" for v, c in tally.items()))


def summary(entries: list[dict], looks: int) -> str:
    """counts, with the sign verdicts' expected false share beside them."""
    judged = sum(e["verdict"] != "no_learning" and e["ci"] is not None for e in entries)
    signs = sum(e["verdict"] in ("agrees", "contradicts") for e in entries)
    return (counts(entries) + f". Of the {signs} sign verdicts at most {Q * signs:.2f} are expected false (Benjamini-Hochberg, q = {Q}, "
              f"over the {judged} judged, p-values x {looks} looks); by chance alone, {0.05 * judged:.1f} of {judged} "
              f"uncorrected 95% intervals would miss 0.")


def label(entry: dict) -> str:
    return f"{entry['variant_a']} − {entry['variant_b']}"


def short(entry: dict) -> str:
    """A table entry: the verdict, then the paired difference and its interval."""
    if entry["verdict"] == "no_learning":
        return "no learning" + (f" ({entry['paired_mean']:+.3f})" if entry["paired_mean"] is not None else "")
    if entry.get("why", "").startswith("learning test pending"):
        return entry["why"]
    if entry["ci"] is None:
        return f"unresolved ({entry['seeds']} seed{'s' * (entry['seeds'] != 1)})"
    low, high = entry["ci"]
    return f"{entry['verdict'].replace('_', ' ')} {entry['paired_mean']:+.3f} [{low:+.3f}, {high:+.3f}]"


def table(entries: list[dict], folder: Path) -> str:
    """Markdown: the paper's claims as rows, cells as columns, then the counts and the cost."""
    cells, root = list(dict.fromkeys(e["cell"] for e in entries)), readme_root(folder)
    if not cells:
        return f"No cell on record yet in {root}/."
    learned = {e["cell"]: e for e in entries}
    head = ["claim (a − b, paired over seeds)"] + [
        f"{c} ({learned[c]['model_type']}; start {learned[c]['start']:.3f})" if learned[c]["start"] is not None
        else c for c in cells]
    lines = ["| " + " | ".join(head) + " |", "|---|" + "---|" * len(cells)]
    for technique, a, b, claims in COMPARISONS:
        row = [f"{TECHNIQUES[technique][0]}: {a} − {b} (paper: " +
               "; ".join(f"{best} on {t}" for t, (best, _) in claims.items()) + ")"]
        cellwise = {e["cell"]: e for e in entries if (e["technique"], e["variant_a"], e["variant_b"]) == (technique, a, b)}
        if not cellwise:
            continue
        row += [short(cellwise[c]) if c in cellwise else "—" for c in cells]
        lines.append("| " + " | ".join(row) + " |")
    gains = ["Lite PPO's gain over the start (learns?)"] + [
        (f"{learned[c]['gain_mean']:+.3f} [{learned[c]['gain_ci'][0]:+.3f}, {learned[c]['gain_ci'][1]:+.3f}] "
         f"({'yes' if learned[c]['learns'] else 'no'})") if learned[c]["gain_ci"] else
        f"{learned[c]['gain_mean']:+.3f} (one seed)" if learned[c]["gain_mean"] is not None else "—" for c in cells]
    lines.append("| " + " | ".join(gains) + " |")
    not_formed = unformed(folder)
    return "\n".join(lines + ["", counts(entries) + f". {cost_line(entries, folder)} Detail: [{root}/verdicts.json]"
                              f"({root}/verdicts.json); figures: {root}/forest_*.png."]
                      + ([f"Not formed (a tier needs {HELD_OUT} held-out + {MIN_TRAIN} training problems): "
                          + "; ".join(not_formed) + "."] if not_formed else []))


def forest(entries: list[dict], technique: str, path: Path) -> None:
    """Cells as rows, each comparison's paired difference and 95% interval as a bar; the +-delta band shaded, the
    paper's side of 0 marked per row (the arrow), the verdict in the label."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [e for e in entries if e["technique"] == technique]
    fig, ax = plt.subplots(figsize=(11, 0.45 * len(rows) + 1.6))
    colors = {"agrees": "tab:green", "contradicts": "tab:red", "no_effect": "tab:blue", "unresolved": "tab:gray",
              "no_learning": "lightgray"}
    delta = rows[0]["delta"] if rows else DELTA
    ax.axvspan(-delta, delta, color="tab:blue", alpha=0.08, label=f"no effect band ±{delta}")
    ax.axvline(0, color="black", linewidth=0.8)
    for y, e in enumerate(reversed(rows)):
        if e["ci"] is not None:
            low, high = e["ci"]
            ax.plot([max(low, -0.5), min(high, 0.5)], [y, y], color=colors[e["verdict"]], linewidth=3)
            ax.plot([e["paired_mean"]], [y], "o", color=colors[e["verdict"]])
        right = e["expected"] == e["variant_a"]  # the paper expects a - b > 0
        ax.text(0.148 if right else -0.148, y, "paper ▶" if right else "◀ paper", ha="right" if right else "left",
                va="center", fontsize=7, color="tab:green")
    ax.set_yticks(range(len(rows)), [f"{e['cell']}: {label(e)} ({e['verdict']}, {e['seeds']} seeds)"
                                     for e in reversed(rows)], fontsize=8)
    ax.set_xlim(-0.15, 0.15)
    ax.set_xlabel("a − b: paired difference of the end avg@N, 95% t interval over seeds")
    ax.set_title(f"{TECHNIQUES[technique][0]} (the arrow: the side the paper expects)", fontsize=10)
    ax.legend(fontsize=7, loc="lower right")
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def render(entries: list[dict]) -> str:
    return json.dumps(entries, indent=1) + "\n"


def readme_with(readme: str, block: str) -> str:
    """The README with its verdicts block replaced by `block` (SystemExit if it has no markers)."""
    if README_BEGIN not in readme or README_END not in readme:
        raise SystemExit(f"README.md: no {README_BEGIN} ... {README_END} markers for the verdicts table")
    head, rest = readme.split(README_BEGIN, 1)
    return head + README_BEGIN + "\n" + block + "\n" + README_END + rest.split(README_END, 1)[1]


def write(root: Path, looks: int, delta: float, readme: bool) -> list[dict]:
    """verdicts.json, the forest plots and (readme) the README's table from the records under root; the entries."""
    entries = derive(root, looks, delta)
    (root / "verdicts.json").write_text(render(entries))
    for technique in dict.fromkeys(e["technique"] for e in entries):
        forest(entries, technique, root / f"forest_{technique}.png")
    if readme:
        path = ROOT / "README.md"
        path.write_text(readme_with(path.read_text(), table(entries, root)))
    print(f"[verdicts] {summary(entries, looks)}\n[verdicts] wrote {root / 'verdicts.json'}", flush=True)
    return entries


def readme_root(root: Path) -> str:
    """root as the README links it: relative to the repository."""
    root = root.resolve()
    return str(root.relative_to(ROOT)) if root.is_relative_to(ROOT) else str(root)


def main(args: Args) -> int:
    root = Path(args.root)
    if args.judge_all:
        entries = derive(root, args.looks, args.delta, judge_all=True)
        (root / "verdicts_judge_all.json").write_text(render(entries))
        print(table(entries, root) + f"\n[verdicts] {summary(entries, args.looks)}")
        return 0
    if args.check:
        entries = derive(root, args.looks, args.delta)
        stale = [] if (root / "verdicts.json").exists() and (root / "verdicts.json").read_text() == render(entries) \
            else [str(root / "verdicts.json")]
        readme = (ROOT / "README.md").read_text()
        if args.readme and readme != readme_with(readme, table(entries, root)):
            stale.append("README.md")
        print(f"[verdicts] {'stale: ' + ', '.join(stale) if stale else 'up to date'}")
        return 1 if stale else 0
    print(table(write(root, args.looks, args.delta, args.readme), root))
    return 0


if __name__ == "__main__":
    import tyro

    sys.exit(main(tyro.cli(Args, description=__doc__)))
