"""The screen: difficulty tiers defined by the start model's own solve rate, for any model and problem source.

Each problem of a pool is sampled k times by the start model under the runs' own sampling settings (the cell
model's lite_ppo.py flags in tools/ablate.py MODELS: template, temperature, top-p, top-k, length limit, precision),
on one engine, and binned by its solve rate c / k (BANDS). Each tier gets HELD_OUT held-out problems and the rest
of its band (>= MIN_TRAIN) for training, disjoint, drawn by a hash of the problem id:

    python tools/screen.py --model smollm2 --pool arithmetic:digits=1 arithmetic:digits=1,ops=* --per-source 300
    python tools/screen.py --model gemma3 --tiers-only          # re-bin the cached screen, sample nothing

The screen's result is cached in docs/cells/screen/<model>.jsonl (one line per problem: id, question, answer,
source, correct of k) beside <model>.json (model, settings, k, seed, machines, seconds); a rerun samples only
problems not yet screened, in chunks it appends as each ends (a stopped screen loses at most one chunk). Tiers:
docs/cells/<model>__<tier>/data/{train,test}.jsonl (lite_ppo.py --dataset <that folder>) and tier.json (band,
counts, the screen's mean rate on each split); a band too short for a tier gets its tier.json alone ("enough":
false), the record of a cell that could not be formed from the pool screened. A formed tier is frozen: a wider
screen later (for another tier) leaves its data and tier.json as they are, so its runs stay on the problems they
used. The screen's rate of a tier's problems is biased upwards or downwards by the very selection (a problem
that was lucky in its k samples sits in a higher band): each cell measures its start again on fresh samples
(tools/ablate.py, the start's avg@N) and reports both.

Bands, for groups of G = 8 samples per prompt: a group has a nonzero advantage (some right, some wrong) with
probability 1 - p^8 - (1 - p)^8, at least 1/3 inside every band (0.34 at p = 0.05, 0.57 at 0.9): every tier
trains; and they differ in what the paper's claims turn on, the share of uniform groups: hard (0.05-0.2) mostly
all wrong, easy (0.5-0.9) more and more all right, medium (0.2-0.5) the fewest uniform groups.
"""

import hashlib
import json
import random
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

BANDS = {"easy": (0.5, 0.9), "medium": (0.2, 0.5), "hard": (0.05, 0.2)}  # [low, high): easy's top bound included
HELD_OUT = 200  # held-out problems per tier: avg@N's standard error over them ~0.01 at N = 8 (docs/cells/README.md)
MIN_TRAIN = 400  # training problems per tier, at least
CHUNK = 256  # problems per appended chunk of the screen
SCREEN_SEED = 12345  # apart from every run's sampling seeds (the runs' seeds 1..M, eval.py's 0)


@dataclass
class Args:
    model: str = "smollm2"
    """the cell model (tools/ablate.py MODELS): its flags give the model, prompt and sampling settings"""
    pool: list[str] = field(default_factory=list)
    """problem sources (data specs: arithmetic:..., a .jsonl path, ...): both splits of each, deduplicated by id"""
    per_source: int = 0
    """problems drawn from each source (seeded), 0 = all"""
    k: int = 8
    """samples per problem (>= 8)"""
    out: str = "docs/cells"
    """where screen/<model>.* and the tiers' folders go"""
    tiers_only: bool = False
    """sample nothing: bin the cached screen into tiers"""


def run_settings(flags: list[str]) -> dict:
    """The model and sampling settings a cell's lite_ppo.py flags give its runs (lite_ppo.py's defaults otherwise)."""
    import lite_ppo  # the defaults of the script the cells run

    defaults = lite_ppo.Args()
    given = dict(zip(flags[::2], flags[1::2]))
    settings = {key: given.get("--" + key.replace("_", "-"), getattr(defaults, key))
                for key in ("model", "template", "temperature", "top_p", "top_k", "max_new_tokens", "precision")}
    return settings | {k: float(settings[k]) for k in ("temperature", "top_p")} | \
        {k: int(settings[k]) for k in ("top_k", "max_new_tokens")}


def held_out_rank(problem_id: str) -> int:
    """A problem's place in its tier's draw of held-out problems: a hash of its id, the same on every machine."""
    return int.from_bytes(hashlib.blake2b(problem_id.encode(), digest_size=8).digest(), "big")


def band_of(correct: int, k: int) -> str | None:
    rate = correct / k
    for tier, (low, high) in BANDS.items():
        if low <= rate < high or (tier == "easy" and rate == high):
            return tier
    return None


def pool_rows(sources: list[str], per_source: int, exclude: set[str]) -> list[dict]:
    """The pool: each source's train and test problems (per_source of them, seeded), once per id; `exclude` out."""
    from common.data import load_rows

    rows, seen = [], set(exclude)
    for source in sources:
        drawn = [r for split in ("train", "test") for r in load_rows(source, split=split, flag="--pool")]
        random.Random(f"screen:{source}").shuffle(drawn)
        for row in drawn[:per_source or None]:
            if row["id"] not in seen:
                seen.add(row["id"])
                rows.append({**row, "source": source})
    return rows


def read_screen(out: Path, model: str) -> tuple[dict, dict[str, dict]]:
    """The cached screen of `model`: its header and {id: row}; ({}, {}) if none."""
    header, lines = out / "screen" / f"{model}.json", out / "screen" / f"{model}.jsonl"
    if not header.exists():
        return {}, {}
    rows = {}
    if lines.exists():
        for n, line in enumerate(lines.read_text().splitlines(), 1):
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                raise SystemExit(f"{lines}: row {n}: not JSON (a chunk cut off? delete the row)") from None
            rows[row["id"]] = row
    return json.loads(header.read_text()), rows


def fewshot_ids() -> set[str]:
    """The problems the fewshot prompt shows worked: never in a tier."""
    import re

    from common.data import FEWSHOT

    return {"arithmetic:" + q.replace(" ", "") for q in re.findall(r"Question: What is ([^?]+)\?", FEWSHOT)}


def screen(args: Args, settings: dict, out: Path) -> None:
    """Sample every pool problem not yet screened, k times, appending each chunk to the cache as it ends."""
    from common.evaluation import evaluate
    from common.generation import SamplingConfig
    from common.precision import machine, resolve_precision
    from eval import open_engine

    header, done = read_screen(out, args.model)
    wanted = {"model": args.model, "settings": settings, "k": args.k, "seed": SCREEN_SEED}
    if header and {key: header[key] for key in wanted} != wanted:
        raise SystemExit(f"{out / 'screen' / (args.model + '.json')}: screened with other settings "
                         f"({ {key: header[key] for key in wanted} }); move it away to screen anew")
    todo = [r for r in pool_rows(args.pool, args.per_source, fewshot_ids()) if r["id"] not in done]
    print(f"[screen] {args.model}: {len(done)} problems screened, {len(todo)} to go, k={args.k}, {settings}",
          flush=True)
    if not todo:
        return
    precision = resolve_precision(settings["precision"])
    engine, tokenizer, _, _ = open_engine(settings["model"], "auto", precision, settings["template"],
                                          settings["max_new_tokens"], [r["question"] for r in todo], SCREEN_SEED)
    header = header or wanted | {"chunks": []}
    (out / "screen").mkdir(parents=True, exist_ok=True)
    for start in range(0, len(todo), CHUNK):
        chunk, t0 = todo[start:start + CHUNK], time.perf_counter()
        sampling = SamplingConfig(max_new_tokens=settings["max_new_tokens"], temperature=settings["temperature"],
                                  top_p=settings["top_p"], top_k=settings["top_k"],
                                  seed=SCREEN_SEED + len(done) + start)  # no two chunks share sampling seeds
        metrics, records = evaluate(engine, tokenizer, chunk, template=settings["template"], sampling=sampling,
                                    n=args.k, desc=f"screen {start // CHUNK + 1}/{-(-len(todo) // CHUNK)}")
        correct = {r["id"]: 0 for r in chunk}
        for rec in records:
            correct[rec["id"]] += rec["correct"] == 1.0
        with open(out / "screen" / f"{args.model}.jsonl", "a") as f:
            for r in chunk:
                f.write(json.dumps({"id": r["id"], "question": r["question"], "answer": r["answer"],
                                    "source": r["source"], "correct": correct[r["id"]]}) + "\n")
        header["chunks"].append({"problems": len(chunk), "seconds": round(time.perf_counter() - t0, 1),
                                 "machine": machine(), "response_len_mean": round(metrics["response_len_mean"], 1),
                                 "truncated_frac": round(metrics["truncated_frac"], 3)})
        (out / "screen" / f"{args.model}.json").write_text(json.dumps(header, indent=1) + "\n")
    engine.close()


def write_tiers(out: Path, model: str) -> dict[str, dict]:
    """Bin the cached screen into BANDS and write each tier's data folder and tier.json; each tier's summary."""
    header, rows = read_screen(out, model)
    if not rows:
        raise SystemExit(f"no screen of {model} in {out / 'screen'}: run tools/screen.py --model {model} --pool ...")
    k, summary = header["k"], {}
    for tier in BANDS:
        members = sorted((r for r in rows.values() if band_of(r["correct"], k) == tier),
                         key=lambda r: held_out_rank(r["id"]))
        folder = out / f"{model}__{tier}"
        if (folder / "tier.json").exists() and (formed := json.loads((folder / "tier.json").read_text()))["enough"]:
            summary[tier] = formed  # a formed tier is frozen: its runs were trained and judged on these problems
            print(f"[screen] {model}:{tier}: formed earlier, kept as it is ({formed['train']} train, {formed['test']} "
                  f"held-out); {len(members) - formed['train'] - formed['test']} problems screened since into its "
                  "band are left out", flush=True)  # the cache only grows, and a problem's count never changes
            continue
        test, train = members[:HELD_OUT], members[HELD_OUT:]
        rate = lambda rs: round(sum(r["correct"] for r in rs) / (k * len(rs)), 4) if rs else None  # noqa: E731
        info = {"model": model, "tier": tier, "band": list(BANDS[tier]), "k": k, "train": len(train),
                "test": len(test), "screen_rate_train": rate(train), "screen_rate_test": rate(test),
                "enough": len(test) == HELD_OUT and len(train) >= MIN_TRAIN, "screened": len(rows),
                "sources": sorted({r["source"] for r in members})}
        folder.mkdir(parents=True, exist_ok=True)  # a short tier's tier.json is its record: the cell not formed
        (folder / "tier.json").write_text(json.dumps(info, indent=1) + "\n")
        if info["enough"]:
            (folder / "data").mkdir(parents=True, exist_ok=True)
            for split, part in (("train", train), ("test", test)):
                (folder / "data" / f"{split}.jsonl").write_text(
                    "".join(json.dumps({"id": r["id"], "question": r["question"], "answer": r["answer"]}) + "\n"
                            for r in part))
        summary[tier] = info
        print(f"[screen] {model}:{tier} {BANDS[tier]}: {len(train)} train, {len(test)} held-out, screen rate "
              f"{info['screen_rate_test']} held-out" + ("" if info["enough"] else
                                                        f": too few (need {HELD_OUT} + {MIN_TRAIN}): tier.json only"),
              flush=True)
    return summary


def main(args: Args) -> int:
    from tools.ablate import CELL_PRECISION, MODELS

    if args.model not in MODELS:
        raise SystemExit(f"--model {args.model!r}: one of {', '.join(MODELS)} (tools/ablate.py MODELS)")
    if args.k < 8:
        raise SystemExit(f"--k {args.k}: a solve rate needs k >= 8 samples")
    out = Path(args.out)
    if not args.tiers_only:
        if not args.pool:
            raise SystemExit("--pool: give the problem sources to screen (or --tiers-only)")
        screen(args, run_settings(MODELS[args.model][1] + CELL_PRECISION), out)
    write_tiers(out, args.model)
    return 0


if __name__ == "__main__":
    import tyro

    sys.exit(main(tyro.cli(Args, description=__doc__)))
