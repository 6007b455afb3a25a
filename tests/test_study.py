"""The study's second edition: tiers by the start model's solve rate (tools/screen.py), verdicts from the per-run
records (tools/verdicts.py), the until-resolved planner (tools/ablate.py next_runs), and the committed records
agreeing with what they are derived from."""

import json
import math
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from tools import ablate, screen, verdicts
from tools.paired import paired_interval, t_pvalue

ROOT = Path(__file__).resolve().parents[1]


# ---------------------------------------------------------------- the screen
def test_bands_bin_solve_rates_at_k_8_and_16():
    assert [screen.band_of(c, 8) for c in range(9)] == [None, "hard", "medium", "medium", "easy", "easy", "easy",
                                                         "easy", None]
    # k = 16: 0.0625-0.1875 hard, 0.25-0.4375 medium, 0.5-0.875 easy; 15/16 = 0.9375 is above easy's 0.9
    assert [screen.band_of(c, 16) for c in (0, 1, 3, 4, 7, 8, 14, 15)] == [None, "hard", "hard", "medium", "medium",
                                                                           "easy", "easy", None]


def test_run_settings_are_the_cells_flags_over_lite_ppos_defaults():
    import lite_ppo

    got = screen.run_settings(ablate.MODELS["gemma3"][1] + ablate.CELL_PRECISION)
    assert got == {"model": "gemma3-270m", "template": "fewshot", "temperature": lite_ppo.Args().temperature,
                   "top_p": lite_ppo.Args().top_p, "top_k": 0, "max_new_tokens": 48, "precision": "fp32"}


def test_the_pool_is_both_splits_once_each_without_the_fewshot_problems():
    assert screen.fewshot_ids() == {"arithmetic:3+4", "arithmetic:9-5"}
    rows = screen.pool_rows(["arithmetic:digits=1", "arithmetic:digits=1,ops=+"], 0, screen.fewshot_ids())
    ids = [r["id"] for r in rows]
    assert len(ids) == len(set(ids)) == 10 * 10 * 2 - 2  # every one-digit sum and difference, the two shots out
    assert "arithmetic:3+4" not in ids and {r["source"] for r in rows} == {"arithmetic:digits=1"}  # + adds none new
    assert len(screen.pool_rows(["arithmetic:digits=1"], 50, set())) == 50


def write_screen(out: Path, counts: dict[str, int], k: int = 8) -> None:
    (out / "screen").mkdir(parents=True)
    (out / "screen" / "m.json").write_text(json.dumps({"model": "m", "settings": {}, "k": k, "seed": 1, "chunks": []}))
    (out / "screen" / "m.jsonl").write_text("".join(
        json.dumps({"id": i, "question": f"q {i}?", "answer": "1", "source": "s", "correct": c}) + "\n"
        for i, c in counts.items()))


def test_tiers_split_each_band_by_a_hash_of_the_id_and_refuse_a_short_band(tmp_path, monkeypatch):
    monkeypatch.setattr(screen, "HELD_OUT", 3)
    monkeypatch.setattr(screen, "MIN_TRAIN", 4)
    counts = {f"e{i}": 5 for i in range(8)} | {f"h{i}": 1 for i in range(5)} | {"none": 0, "all": 8}
    write_screen(tmp_path, counts)
    summary = screen.write_tiers(tmp_path, "m")
    assert summary["easy"]["enough"] and not summary["hard"]["enough"] and summary["medium"]["test"] == 0
    test = [json.loads(x)["id"] for x in (tmp_path / "m__easy" / "data" / "test.jsonl").read_text().splitlines()]
    train = [json.loads(x)["id"] for x in (tmp_path / "m__easy" / "data" / "train.jsonl").read_text().splitlines()]
    assert test == sorted((f"e{i}" for i in range(8)), key=screen.held_out_rank)[:3]  # the same on every machine
    assert not set(test) & set(train) and len(train) == 5
    tier = json.loads((tmp_path / "m__easy" / "tier.json").read_text())
    assert tier["screen_rate_test"] == 5 / 8 and tier["band"] == [0.5, 0.9]
    assert not (tmp_path / "m__hard" / "data").exists()  # 5 problems: fewer than 3 + 4, so no tier is written,
    short = json.loads((tmp_path / "m__hard" / "tier.json").read_text())  # only the record of its shortfall
    assert not short["enough"] and (short["train"], short["test"], short["screened"]) == (2, 3, 15)


def test_a_formed_tier_is_frozen_when_the_screen_grows(tmp_path, monkeypatch):
    monkeypatch.setattr(screen, "HELD_OUT", 3)
    monkeypatch.setattr(screen, "MIN_TRAIN", 4)
    write_screen(tmp_path, {f"e{i}": 5 for i in range(8)} | {f"h{i}": 1 for i in range(5)})
    screen.write_tiers(tmp_path, "m")
    easy = {f: (tmp_path / "m__easy" / f).read_text() for f in ("tier.json", "data/train.jsonl", "data/test.jsonl")}
    # the screen grows: new easy problems (some would rank into the held-out by their hash) and enough hard ones
    shutil.rmtree(tmp_path / "screen")
    write_screen(tmp_path, {f"e{i}": 5 for i in range(30)} | {f"h{i}": 1 for i in range(9)})
    summary = screen.write_tiers(tmp_path, "m")
    assert {f: (tmp_path / "m__easy" / f).read_text() for f in easy} == easy and summary["easy"]["train"] == 5
    assert summary["hard"]["enough"] and summary["hard"]["screened"] == 39  # a short tier still forms when it can


def test_a_screen_under_other_settings_is_refused(tmp_path):
    write_screen(tmp_path, {"a": 1})
    args = screen.Args(model="m", pool=["arithmetic:digits=1"], out=str(tmp_path))
    with pytest.raises(SystemExit, match="screened with other settings"):
        screen.screen(args, {"model": "x"}, tmp_path)


# ---------------------------------------------------------------- records of a study, written by hand
def write_run(cell: Path, variant: str, seed: int, end: float, n: int = 4, truncated: float = 0.0) -> None:
    run = cell / "runs" / ablate.run_name(variant, seed)
    run.mkdir(parents=True)
    (run / "args.json").write_text(json.dumps({"total_steps": 2, "eval_samples": n, "model": "m", "dataset": "d",
                                               "eval_dataset": None, "eval_size": 100}))
    rows = [{"step": 0, "eval/accuracy": 0.1}, {"step": 1, "rollout/response_len_mean": 9.0,
                                                 "rollout/truncated_frac": truncated},
            {"step": 2, "rollout/response_len_mean": 8.0, "rollout/truncated_frac": truncated},
            {"step": 2, "eval/accuracy": end}, {"step": 2, "eval_sampled/accuracy": end}]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (cell / "logs").mkdir(exist_ok=True)
    (cell / "logs" / f"{variant}__{seed}.json").write_text(json.dumps({"variant": variant, "seed": seed, "flags": [],
                                                                         "returncode": 0, "wall_s": 60.0}))


def write_start(cell: Path, avg: float, n: int = 4, problems: int = 100) -> None:
    (cell / "evals" / "start").mkdir(parents=True)
    (cell / "evals" / "start" / "summary.json").write_text(json.dumps(
        {"results": {"d": {"problems": problems, "n": n, "metrics": {"accuracy": avg}}}}))


def test_the_learning_test_by_hand(tmp_path):
    cell = tmp_path / "smollm2__easy"
    write_start(cell, 0.2)
    for seed, end in ((1, 0.30), (2, 0.34), (3, 0.32)):
        write_run(cell, "lite_ppo", seed, end)
    start, results = verdicts.cell_results(cell)
    got = verdicts.learning(start, results["lite_ppo"])
    # gains 0.10, 0.14, 0.12: mean 0.12, sd 0.02; se_start sqrt(0.2 x 0.8 / 400) = 0.02; SE sqrt(0.02^2 / 3 + 0.02^2)
    se = math.sqrt(0.02**2 / 3 + 0.02**2)
    assert got["learns"] and got["gain_mean"] == pytest.approx(0.12, abs=1e-4)
    assert got["start_se"] == pytest.approx(0.02, abs=1e-4) and got["gain_se"] == pytest.approx(se, abs=1e-4)
    half = 4.3026527 * 0.02 / math.sqrt(3)
    assert got["gain_ci"] == pytest.approx([0.12 - half, 0.12 + half], abs=1e-4)
    # a seed below the start fails it, whatever the mean; a mean under 3 SE fails it too
    assert not verdicts.learning({"avg": 0.2, "n": 4, "problems": 100}, {1: results["lite_ppo"][1],
                                                                          2: results["lite_ppo"][2]} | {
        3: {**results["lite_ppo"][3], "final_sampled": {"n": 4, "avg": 0.19}}})["learns"]
    weak = verdicts.learning({"avg": 0.29, "n": 4, "problems": 100}, results["lite_ppo"])
    assert not weak["learns"] and weak["why"].startswith("mean gain +0.030 < 3 SE")


def study(root: Path) -> None:
    """Two cells: smollm2:easy learns (Lite PPO +0.1 over its start on each seed), gemma3:hard does not."""
    easy, hard = root / "smollm2__easy", root / "gemma3__hard"
    write_start(easy, 0.2)
    write_start(hard, 0.1)
    lite = {1: 0.30, 2: 0.34, 3: 0.32}
    for seed, end in lite.items():
        write_run(easy, "lite_ppo", seed, end, truncated=0.3)
        write_run(easy, "group_std", seed, end - (0.05, 0.051, 0.049)[seed - 1])
        write_run(easy, "seq_agg", seed, end + (0.01, -0.01, 0.0)[seed - 1])
        write_run(hard, "lite_ppo", seed, (0.08, 0.12, 0.11)[seed - 1])
        write_run(hard, "group_std", seed, 0.1)


def test_verdicts_from_the_records_by_hand(tmp_path):
    study(tmp_path)
    entries = verdicts.derive(tmp_path, looks=1, delta=0.03)
    by = {(e["cell"], e["variant_a"], e["variant_b"]): e for e in entries}
    # smollm2 is aligned: normalization x2, aggregation, clip-higher, overlong (its rollouts truncate 30%); no headline
    assert [(e["variant_a"], e["variant_b"]) for e in entries if e["cell"] == "smollm2:easy"] == [
        ("lite_ppo", "group_std"), ("lite_ppo", "batch_mean"), ("lite_ppo", "seq_agg"),
        ("clip_high_off_policy", "off_policy"), ("overlong_filter", "lite_ppo")]
    # gemma3 is base: no overlong comparison (nothing truncates), the headline comparisons instead
    assert ("gemma3:hard", "lite_ppo", "grpo") in by and ("gemma3:hard", "overlong_filter", "lite_ppo") not in by
    norm = by[("smollm2:easy", "lite_ppo", "group_std")]
    # differences 0.05, 0.051, 0.049: mean 0.05, sd 0.001; two judged comparisons in the family
    interval = paired_interval([0.30, 0.34, 0.32], [0.25, 0.289, 0.271])
    assert norm["paired_mean"] == pytest.approx(0.05, abs=1e-4) and norm["ci"] == pytest.approx(interval["ci"], abs=1e-4)
    p = t_pvalue(0.05, 0.001, 3)
    agg = by[("smollm2:easy", "lite_ppo", "seq_agg")]  # differences -0.01, 0.01, 0.0: mean 0, sd 0.01
    assert norm["p"] == pytest.approx(p, abs=1e-4) and norm["p_adjusted"] == pytest.approx(p * 2, abs=1e-4)
    assert norm["verdict"] == "agrees" and agg["verdict"] == "no_effect"  # CI +-0.0248, inside +-0.03
    assert agg["expected"] == "seq_agg" and norm["expected"] == "lite_ppo"
    assert by[("smollm2:easy", "lite_ppo", "batch_mean")]["seeds"] == 0  # not run: unresolved, no interval
    assert by[("smollm2:easy", "lite_ppo", "batch_mean")]["verdict"] == "unresolved"
    hard = by[("gemma3:hard", "lite_ppo", "group_std")]
    assert hard["verdict"] == "no_learning" and not hard["learns"] and hard["why"] == "lowest gain -0.020"
    assert hard["paired_mean"] == pytest.approx(statistics.fmean([-0.02, 0.02, 0.01]), abs=1e-4)  # kept, not judged
    assert norm["runs"] == sorted(f"smollm2__easy/runs/ablate__{v}__{s}" for v in ("lite_ppo", "group_std")
                                  for s in (1, 2, 3))
    fields = {"cell", "model_type", "tier", "start", "learns", "gain_mean", "gain_ci", "technique", "variant_a",
              "variant_b", "expected", "seeds", "paired_mean", "ci", "delta", "verdict", "runs"}
    assert all(fields <= set(e) for e in entries)
    # more looks: p x 8 x 2 / 2 ... BH over the two: the agreement needs p x 8 x 2 <= 0.05 to stand
    eight = {(e["cell"], e["variant_a"], e["variant_b"]): e for e in verdicts.derive(tmp_path, looks=8, delta=0.03)}
    assert eight[("smollm2:easy", "lite_ppo", "group_std")]["verdict"] == ("agrees" if p * 16 <= 0.05 else "unresolved")


def test_the_tool_writes_what_check_then_finds_up_to_date(tmp_path):
    study(tmp_path)
    tool = [sys.executable, str(ROOT / "tools" / "verdicts.py"), "--root", str(tmp_path), "--no-readme"]
    assert subprocess.run(tool + ["--check"], cwd=ROOT, capture_output=True).returncode == 1  # nothing written yet
    made = subprocess.run(tool, cwd=ROOT, capture_output=True, text=True)
    assert made.returncode == 0, made.stderr
    assert "| loss aggregation: lite_ppo − seq_agg" in made.stdout
    assert (tmp_path / "forest_normalization.png").read_bytes().startswith(b"\x89PNG")
    assert subprocess.run(tool + ["--check"], cwd=ROOT, capture_output=True).returncode == 0
    write_run(tmp_path / "smollm2__easy", "batch_mean", 1, 0.3)  # a new record: the file is stale
    assert subprocess.run(tool + ["--check"], cwd=ROOT, capture_output=True).returncode == 1


def test_a_tier_the_screen_could_not_form_is_named_under_the_table(tmp_path, monkeypatch):
    monkeypatch.setattr(screen, "HELD_OUT", 3)
    monkeypatch.setattr(screen, "MIN_TRAIN", 4)
    write_screen(tmp_path, {f"e{i}": 5 for i in range(8)} | {f"h{i}": 1 for i in range(5)} | {"none": 0})
    screen.write_tiers(tmp_path, "m")  # easy formed; hard 5 of 7 needed; medium none
    study(tmp_path)
    notes = verdicts.unformed(tmp_path)
    assert notes == ["m:hard (5 problems solved 0.05-0.2 of the time among 14 screened)",
                     "m:medium (0 problems solved 0.2-0.5 of the time among 14 screened)"]
    assert verdicts.table(verdicts.derive(tmp_path, looks=1, delta=0.03), tmp_path).endswith(
        "Not formed (a tier needs 200 held-out + 400 training problems): " + "; ".join(notes) + ".")


def test_the_planner_tests_learning_first_then_adds_seeds_only_where_unresolved(tmp_path):
    args = ablate.Args(min_seeds=3, max_seeds=5)
    empty = ablate.next_runs(tmp_path, ["gemma3__easy"], args, set())
    assert empty == [("gemma3__easy", "lite_ppo", s) for s in (1, 2, 3)]  # learning first: nothing else yet
    study(tmp_path)
    todo = ablate.next_runs(tmp_path, ["smollm2__easy", "gemma3__hard"], args, set())
    assert not [t for t in todo if t[0] == "gemma3__hard"]  # does not learn: no comparison is run there
    # smollm2: normalization vs group_std agrees and aggregation has no effect: no more seeds; the comparisons never
    # run get their first 3 seeds of each variant not on disk (lite_ppo is)
    assert set(todo) == {("smollm2__easy", v, s) for v in ("batch_mean", "clip_high_off_policy", "off_policy",
                                                          "overlong_filter") for s in (1, 2, 3)}
    assert ("smollm2__easy", "batch_mean", 1) not in ablate.next_runs(tmp_path, ["smollm2__easy"], args,
                                                                      {("smollm2__easy", "batch_mean", 1)})
    # an unresolved comparison with 3 seeds gets a 4th of both its variants
    for seed, end in ((1, 0.33), (2, 0.30), (3, 0.36)):
        write_run(tmp_path / "smollm2__easy", "batch_mean", seed, end)
    todo = ablate.next_runs(tmp_path, ["smollm2__easy"], args, set())
    assert ("smollm2__easy", "batch_mean", 4) in todo and ("smollm2__easy", "lite_ppo", 4) in todo


def test_the_first_edition_re_judged_and_the_readme_table_match_the_records():
    """The committed verdicts (both editions) and the README's table are what tools/verdicts.py derives now."""
    first = subprocess.run([sys.executable, str(ROOT / "tools" / "verdicts.py"), "--root", "docs/cells/first_edition",
                            "--looks", "1", "--no-readme", "--check"], cwd=ROOT, capture_output=True, text=True)
    assert first.returncode == 0, first.stdout + first.stderr
    second = subprocess.run([sys.executable, str(ROOT / "tools" / "verdicts.py"), "--check"], cwd=ROOT,
                            capture_output=True, text=True)
    assert second.returncode == 0, second.stdout + second.stderr


def test_the_readmes_first_edition_sentence_is_its_records():
    """The README's numbers on the first edition, read back from its re-judged records."""
    import re

    readme = " ".join((ROOT / "README.md").read_text().split())  # as read, whatever the line breaks
    first = ROOT / "docs" / "cells" / "first_edition"
    entries = json.loads((first / "verdicts.json").read_text())
    judged = json.loads((first / "verdicts_judge_all.json").read_text())
    gains = [e["gain_mean"] for e in {e["cell"]: e for e in entries}.values()]
    assert f"mean gain over the start {min(gains):+.3f} to {max(gains):+.3f}" in readme
    assert f"all {len(entries)} of its comparisons are `no_learning`" in readme
    assert all(e["verdict"] == "no_learning" for e in entries) and not any(e["learns"] for e in entries)
    assert not [e for e in judged if e["verdict"] in ("agrees", "contradicts")]  # "none parts from 0"
    assert f"the {sum(e['verdict'] == 'no_effect' for e in judged)} \"no effect\" intervals" in readme
    (medium,) = [e for e in judged if e["cell"] == "smollm2:medium" and e["variant_b"] == "group_std"]
    low, high = medium["ci"]
    assert f"{medium['paired_mean']:+.3f} [{low:+.3f}, {high:+.3f}] paired" in readme
    assert re.search(r"no cell learned \(Lite PPO's mean gain over the start -0\.021 to \+0\.028", readme)


def test_until_resolved_runs_the_plan_round_by_round_and_stops_when_nothing_is_asked(monkeypatch, tmp_path):
    """The loop over next_runs with the runs faked: a cell that learns and whose comparisons all part from 0 at
    once stops at 3 seeds; the start is evaluated once; verdicts.json is written."""
    tier = tmp_path / "gemma3__hard" / "data"
    tier.mkdir(parents=True)
    for split in ("train", "test"):
        (tier / f"{split}.jsonl").write_text('{"id": "p1", "question": "What is 1 + 1?", "answer": "2"}\n')
    gain = {"lite_ppo": 0.2, "group_std": 0.1, "batch_mean": 0.1, "seq_agg": 0.1, "off_policy": 0.2,
            "clip_high_off_policy": 0.1, "grpo": 0.1, "dapo": 0.1}
    ran, starts = [], []

    def run_variant(variant, seed, flags, out, skip_existing, eval_samples):
        ran.append((variant, seed))
        write_run(out, variant, seed, 0.1 + gain[variant] + 0.001 * seed, n=eval_samples)

    def sampled_evals(results, out, n, start=True):
        starts.append(out.name)
        write_start(out, 0.1, n=n)
        return []

    monkeypatch.setattr(ablate, "run_variant", run_variant)
    monkeypatch.setattr(ablate, "sampled_evals", sampled_evals)
    args = ablate.Args(cells=["gemma3:hard"], out=str(tmp_path), until_resolved=True, final_samples=4, max_seeds=4)
    assert ablate.until_resolved(args, []) == 0
    assert ran[:3] == [("lite_ppo", 1), ("lite_ppo", 2), ("lite_ppo", 3)] and starts == ["gemma3__hard"]
    # every comparison of the base cell (no overlong: nothing truncates) got seeds 1-3 and no more: each differs
    # from the other by 0.1 (or 0) on every seed, so every one is resolved at the first look
    assert sorted(set(ran)) == sorted({(v, s) for v in gain for s in (1, 2, 3)})
    entries = json.loads((tmp_path / "verdicts.json").read_text())
    assert {e["verdict"] for e in entries} <= {"agrees", "contradicts", "no_effect"}
    (clip,) = [e for e in entries if e["technique"] == "clip_higher"]
    assert clip["verdict"] == "agrees" and clip["paired_mean"] == pytest.approx(-0.1)  # base: off_policy expected

    monkeypatch.setattr(ablate, "next_runs", lambda *a: [("gemma3__hard", "lite_ppo", 9)])
    ran.clear()
    assert ablate.until_resolved(ablate.Args(**{**vars(args), "budget_hours": 0.0}), []) == 0
    assert ran == []  # no budget: nothing started


@pytest.mark.heavy
def test_the_screen_samples_k_answers_per_problem_on_the_engine_and_resumes(tiny_model_path, tmp_path, monkeypatch):
    """tools/screen.py for real, on the tiny model through vLLM (as the study's screens run): k answers per problem
    under the given settings, counted per problem, appended chunk by chunk; a rerun samples only new problems.

    Greedy settings make the count knowable beforehand: each of the k answers is the model's greedy answer, which
    HF computes here independently of vLLM (the backends agree greedily: test_generation.py). A problem whose gold
    is that answer is solved k times of k, one whose gold the model never says 0 times."""
    from common.data import make_arithmetic, tokenize_prompts
    from common.generation import HFEngine, SamplingConfig
    from common.grader import extract_answer
    from common.model import load_policy

    monkeypatch.setattr(screen, "CHUNK", 10)  # 16 problems: two chunks
    settings = {"model": tiny_model_path, "template": "chat", "temperature": 0.0, "top_p": 1.0, "top_k": 0,
                "max_new_tokens": 12, "precision": "fp32"}
    _, lm, tokenizer = load_policy(tiny_model_path)
    problems = make_arithmetic(16, split="train", seed=0)
    greedy = HFEngine(lm, tokenizer).generate(tokenize_prompts(tokenizer, [p["question"] for p in problems], "chat"),
                                              1, SamplingConfig(max_new_tokens=12, temperature=0))
    said = [extract_answer(c.text) for c in greedy]
    never = "123456789"  # a number the model never says
    gold = [a if i % 2 == 0 and a is not None else never for i, a in enumerate(said)]
    pool = tmp_path / "pool.jsonl"
    pool.write_text("".join(json.dumps({"question": p["question"], "answer": g}) + "\n"
                            for p, g in zip(problems, gold)))
    assert sum(g != never for g in gold) >= 4  # the test has problems of both kinds

    args = screen.Args(model="tiny", pool=[str(pool)], k=8, out=str(tmp_path))
    screen.screen(args, settings, tmp_path)
    header, rows = screen.read_screen(tmp_path, "tiny")
    assert len(rows) == 16 and [c["problems"] for c in header["chunks"]] == [10, 6]
    by_question = {r["question"]: r["correct"] for r in rows.values()}
    assert [by_question[p["question"]] for p in problems] == [8 * (g != never) for g in gold]
    assert header["settings"] == settings and header["k"] == 8 and header["chunks"][0]["machine"]["cpu_family"]
    lines = (tmp_path / "screen" / "tiny.jsonl").read_text()
    screen.screen(args, settings, tmp_path)  # nothing new to screen: no engine, no line added
    assert (tmp_path / "screen" / "tiny.jsonl").read_text() == lines


def test_a_cell_short_of_its_learning_seeds_is_pending_not_failed(tmp_path):
    cell = tmp_path / "gemma3__hard"
    write_start(cell, 0.1)
    write_run(cell, "lite_ppo", 1, 0.2)
    entries = verdicts.derive(tmp_path, looks=8, delta=0.03)
    assert {e["verdict"] for e in entries} == {"unresolved"}
    assert entries[0]["why"] == "learning test pending (1 of 3 seeds of lite_ppo)" and entries[0]["gain_mean"] == 0.1
    write_run(cell, "lite_ppo", 2, 0.05)  # a seed below the start: the test has failed, whatever the third says
    assert {e["verdict"] for e in verdicts.derive(tmp_path, looks=8, delta=0.03)} == {"no_learning"}
