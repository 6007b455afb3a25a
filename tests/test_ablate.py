"""tools/ablate.py: variants of one lite_ppo.py base run, end to end on the tiny model, and its table and figures
from runs on disk (checked against numbers computed here)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import lite_ppo
from tests.test_compare import PNG_MAGIC, settings, table_rows

ROOT = Path(__file__).resolve().parents[1]


def ablate(out: Path, *flags: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "tools" / "ablate.py"), "--out", str(out), *flags], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)


def record(out: Path, variant: str, seed: int, returncode: int = 0) -> None:
    """What run_variant writes once a run's process has exited: until then the run does not count."""
    (out / "logs").mkdir(exist_ok=True)
    (out / "logs" / f"{variant}__{seed}.json").write_text(json.dumps({"variant": variant, "seed": seed, "flags": [],
                                                                        "returncode": returncode, "wall_s": 60.0}))


def run_args(**changes) -> dict:
    """A run's args.json, as far as collect, the tables and sampled_eval_command read it."""
    return {"total_steps": 2, "model": "m", "dataset": "d", "eval_dataset": None, "eval_size": 8, "eval_samples": 2,
            "prompts_per_step": 4, "group_size": 2, "temperature": 1.0, "top_p": 1.0, "top_k": 0, "max_new_tokens": 8,
            "template": "chat", "backend": "hf"} | changes


@pytest.mark.heavy
def test_a_technique_runs_its_variants_with_their_switches_then_reuses_them(tiny_model_path, tiny_math_data, tmp_path):
    cmd = ["--techniques", "clip_higher", "--seeds", "1", "--final-samples", "2", "--",
           *settings(tiny_model_path, tiny_math_data)]
    result = ablate(tmp_path, *cmd)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    base, high = (json.loads((tmp_path / f"runs/ablate__{v}__1/args.json").read_text())
                  for v in ("off_policy", "clip_high_off_policy"))
    assert (base["num_mini_batches"], high["num_mini_batches"]) == (4, 4)  # compared where a ratio can leave 1
    assert (base["clip_eps_high"], high["clip_eps_high"]) == (None, 0.28)  # the switch, and nothing else, differs
    assert {k for k in base if base[k] != high[k]} == {"clip_eps_high", "run_name"}
    last = tmp_path / "runs/ablate__off_policy__1/checkpoints" / f"step-{base['total_steps']}"
    assert (last / "model").is_dir() and not (last / "state").exists()  # the optimizer's state is dropped, not the model
    assert (tmp_path / "clip_higher.png").read_bytes().startswith(PNG_MAGIC)
    md = (tmp_path / "ablation.md").read_text()
    rows = table_rows(md)
    assert set(rows) - {"variant"} == {"off_policy", "clip_high_off_policy"}  # the header row, the variants
    assert rows["clip_high_off_policy"][1] == "--num-mini-batches 4 --clip-eps-high 0.28"
    for variant in ("off_policy", "clip_high_off_policy"):  # the final accuracy and the mean clip fraction, from the run's metrics
        lines = [json.loads(x) for x in (tmp_path / f"runs/ablate__{variant}__1/metrics.jsonl").read_text().splitlines()]
        final = [x["eval/accuracy"] for x in lines if "eval/accuracy" in x][-1]
        clipfrac = [x["losses/clipfrac"] for x in lines if "losses/clipfrac" in x]
        assert rows[variant][4] == f"{final:.3f}"
        assert rows[variant][7] == f"{sum(clipfrac) / len(clipfrac):.3f}"
        # the final avg@2: sampled by the run itself after its last step (--eval-samples), not by eval.py
        (sampled,) = [x["eval_sampled/accuracy"] for x in lines if "eval_sampled/accuracy" in x]
        assert rows[variant][6] == f"{sampled:.3f}"
        assert not (tmp_path / f"evals/ablate__{variant}__1").exists()
    assert "python lite_ppo.py --num-mini-batches 4 --clip-eps-high 0.28" in md
    (start,) = json.loads((tmp_path / "evals/start/summary.json").read_text())["results"].values()
    assert f"the first 8 problems (or all, if fewer: {start['problems']})" in md  # the count evaluated, not the flag
    again = ablate(tmp_path, *cmd[:4], "--skip-existing", *cmd[4:])
    assert again.returncode == 0 and again.stdout.count("finished run reused") == 2
    assert again.stdout.count("finished eval reused") == 1  # the start model's; the runs evaluated themselves


def test_each_run_is_evaluated_as_it_ends(monkeypatch, tmp_path):
    """A stopped ablation (hours on a CPU, across sessions whose checkpoints do not outlive them) keeps every run it
    finished with its sampled eval; a failed run is not evaluated."""
    from tools import ablate as tool

    calls, collected = [], []
    monkeypatch.setattr(tool, "run_variant", lambda variant, seed, *a: calls.append(("run", variant, seed)) or (
        "exit status 1" if (variant, seed) == ("overlong_filter", 2) else None))
    monkeypatch.setattr(tool, "collect", lambda variants, seeds, *a: collected.append((variants, seeds)) or
                        {v: [] for v in variants})
    monkeypatch.setattr(tool, "sampled_evals", lambda *a, start: calls.append(("eval", *collected[-1], start)) or [])
    assert tool.main(tool.Args(techniques=["overlong_filter"], seeds=[1, 2], out=str(tmp_path)), []) == 1  # nothing ran
    # collect finds no run (none ran here), so each eval still asks for the start model's
    assert calls == [("run", "lite_ppo", 1), ("eval", ["lite_ppo"], [1], True),
                     ("run", "overlong_filter", 1), ("eval", ["overlong_filter"], [1], True),
                     ("run", "lite_ppo", 2), ("eval", ["lite_ppo"], [2], True), ("run", "overlong_filter", 2)]


@pytest.mark.heavy
def test_tables_and_figures_from_runs_on_disk(tmp_path):
    """--plot-only on hand-written runs: one figure per technique with its variants, mean ± half range over seeds."""
    for variant, seed, accs, trunc in (("lite_ppo", 1, [0.1, 0.3], [0.5, 0.3]), ("lite_ppo", 2, [0.1, 0.5], [0.5, 0.1]),
                                       ("overlong_filter", 1, [0.1, 0.2], [0.4, 0.2])):
        run = tmp_path / "runs" / f"ablate__{variant}__{seed}"
        run.mkdir(parents=True)
        (run / "args.json").write_text(json.dumps({"total_steps": 2, "model": "m", "dataset": "d", "eval_dataset": None,
                                                   "eval_size": 8, "prompts_per_step": 4, "group_size": 2}))
        rows = [{"step": 0, "eval/accuracy": accs[0]}]
        rows += [{"step": s, "rollout/response_len_mean": 10.0, "rollout/truncated_frac": trunc[s - 1]} for s in (1, 2)]
        rows += [{"step": 2, "eval/accuracy": accs[1]}]
        (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        record(tmp_path, variant, seed)
    result = ablate(tmp_path, "--plot-only", "--techniques", "overlong_filter", "--seeds", "1", "2")
    assert result.returncode == 0, result.stdout + result.stderr
    rows = table_rows((tmp_path / "ablation.md").read_text())
    assert rows["lite_ppo"][:5] == ["lite_ppo", "(base)", "1 2", "0.100 ± 0.000", "0.400 ± 0.100"]
    assert rows["lite_ppo"][5] == "0.350 ± 0.050"  # mean truncated fraction over steps: 0.4 and 0.3
    assert rows["overlong_filter"][:6] == ["overlong_filter", "--overlong-filter", "1", "0.100", "0.200", "0.300"]
    png = (tmp_path / "overlong_filter.png").read_bytes()
    assert png.startswith(PNG_MAGIC) and len(png) > 20_000
    assert not (tmp_path / "clip_higher.png").exists()


@pytest.mark.heavy
def test_unknown_technique_is_refused_before_anything_runs(tmp_path):
    result = ablate(tmp_path, "--techniques", "no_such_trick")
    assert result.returncode != 0 and "no_such_trick" in result.stderr
    assert not (tmp_path / "logs").exists()


def test_advantage_curves_are_what_compute_advantages_gives_each_group():
    from tools.advantage_figure import advantage_curves

    g = torch.Generator().manual_seed(0)
    group_size = 8
    solved = torch.tensor([0, 1, 2, 4, 7, 8, 1, 3])  # correct samples per group
    rewards = torch.cat([(torch.randperm(group_size, generator=g) < k).float() for k in solved])
    curves = advantage_curves(rewards, group_size)
    for level in ("group", "batch", "none"):
        adv = lite_ppo.compute_advantages(rewards, group_size, std_level=level).view(-1, group_size)
        for group, k in enumerate(solved.tolist()):
            row, right = adv[group], rewards.view(-1, group_size)[group] == 1
            if k > 0:
                assert row[right].tolist() == [pytest.approx(curves[f"{level}/correct"][k].item(), abs=1e-5)] * k
            if k < group_size:
                assert row[~right].tolist() == [pytest.approx(curves[f"{level}/wrong"][k].item(), abs=1e-5)] * (group_size - k)
    assert curves["group/correct"][0].isnan() and curves["group/wrong"][group_size].isnan()


@pytest.mark.heavy
def test_the_advantage_figure_from_one_rollout(tiny_model_path, tmp_path):
    out = tmp_path / "advantages.png"
    result = subprocess.run([sys.executable, str(ROOT / "tools" / "advantage_figure.py"), "--model", tiny_model_path,
                             "--backend", "hf", "--prompts-per-step", "2", "--group-size", "4", "--max-new-tokens", "8",
                             "--out", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert out.read_bytes().startswith(PNG_MAGIC)
    assert "| 0.500 |" in result.stdout  # the table's k/G = 2/4 row


def test_cells_run_each_setup_as_a_whole_ablation_and_tabulate_a_column_per_cell(monkeypatch, tmp_path):
    from tools import ablate as tool

    ran = []
    monkeypatch.setattr(tool, "main", lambda args, extra: ran.append((Path(args.out).name, args.cells, extra)) or 0)
    bonus = {"smollm2": {"lite_ppo": 0.3, "group_std": 0.0, "batch_mean": 0.05},
             "gemma3": {"lite_ppo": 0.1, "group_std": 0.0, "batch_mean": 0.05}}

    def collect(variants, seeds, out, keys):  # two seeds of each variant; cell gemma3 has no sampled eval
        model = out.name.partition("__")[0]
        runs = lambda v: [{"final_acc": 0.3 + 0.2 * s + bonus[model][v], "wall_s": 60.0 * s, "steps_s": 40.0 * s,
                           "machine": f"cpu {s}",
                           "rollout/adv_abs_mean": [(1, 0.5 * s), (2, 0.5 * s)],
                           **({"sampled": [(0, 0.0), (8, 0.1 + 0.1 * s + bonus[model][v])]} if model == "smollm2" else {})}
                          for s in seeds]
        return {v: runs(v) for v in variants}

    monkeypatch.setattr(tool, "collect", collect)
    tier = tmp_path / "gemma3__hard" / "data"  # a tier as tools/screen.py writes it
    tier.mkdir(parents=True)
    for split in ("train", "test"):
        (tier / f"{split}.jsonl").write_text('{"id": "p1", "question": "What is 1 + 1?", "answer": "2"}\n')
    cells = ["smollm2:arithmetic:digits=1,operands=3", "gemma3:hard"]
    args = tool.Args(techniques=["normalization"], seeds=[1, 2], out=str(tmp_path), cells=cells, cell_eval_size=50)
    assert tool.run_cells(args, ["--total-steps", "4"]) == 0
    assert ran == [
        ("smollm2__digits=1,operands=3", [], ["--model", "smollm2-135m-instruct", "--template", "chat", "--dataset",
         "arithmetic:digits=1,operands=3", "--eval-dataset", "arithmetic:digits=1,operands=3", "--eval-size", "50",
         "--precision", "fp32", "--total-steps", "4"]),
        ("gemma3__hard", [], tool.MODELS["gemma3"][1] + ["--dataset", str(tier.resolve()), "--eval-dataset", str(tier.resolve()),
         "--eval-size", "50", "--precision", "fp32", "--total-steps", "4"])]  # the flags after -- come last
    rows = table_rows((tmp_path / "cells.md").read_text())
    # smollm2: avg@N of seeds 1, 2 = 0.5, 0.6 (lite_ppo), 0.2, 0.3 (group_std), 0.25, 0.35 (batch_mean);
    # gemma3 (no sampled eval): greedy 0.6, 0.8 / 0.5, 0.7 / 0.55, 0.75; adv_abs_mean 0.5, 1.0 everywhere
    # then the greedy finals: 0.8, 1.0 (lite_ppo), 0.55, 0.75 (batch_mean)
    assert rows["lite_ppo"][1:] == ["0.550 ± 0.050; greedy 0.900 ± 0.100 (rollout/adv_abs_mean 0.750 ± 0.250)",
                                    "0.700 ± 0.100; greedy 0.700 ± 0.100 (rollout/adv_abs_mean 0.750 ± 0.250)"]
    assert rows["batch_mean"][1] == "0.300 ± 0.050; greedy 0.650 ± 0.100 (rollout/adv_abs_mean 0.750 ± 0.250)"
    # the cost per machine: 3 variants of seed 1 on "cpu 1" at 60 s, of seed 2 on "cpu 2" at 120 s
    cost = [[c.strip() for c in line.strip("|").split("|")] for line in (tmp_path / "cells.md").read_text().splitlines()
            if line.startswith("| gemma3:hard |")]
    assert cost == [["gemma3:hard", "cpu 1", "3", "60.0 s", "40.0 s", "3.0 min"],
                    ["gemma3:hard", "cpu 2", "3", "2.0 min", "80.0 s", "6.0 min"]]
    assert "## the paper's claims, paired over seeds" in (tmp_path / "cells.md").read_text()


def test_an_unscreened_tier_is_refused_with_the_screen_to_run(tmp_path):
    from tools import ablate as tool

    with pytest.raises(SystemExit, match="holds no screened tier; run python tools/screen.py --model smollm2"):
        tool.cell_flags("smollm2:easy", 200, tmp_path)


def test_a_runs_machine_is_named_from_its_record_and_a_move_shows_both(tmp_path):
    from tools.ablate import machine_of

    zen4 = {"cpu": "AMD EPYC", "cpu_family": "25", "cpu_model": "17", "gpu": None}
    (tmp_path / "machine.json").write_text(json.dumps([zen4, zen4]))  # resumed on the same machine: named once
    assert machine_of(tmp_path) == "AMD EPYC (family 25, model 17)"
    xeon = {"cpu": "Intel(R) Xeon(R) Processor", "cpu_family": "6", "cpu_model": "143", "gpu": None}
    (tmp_path / "machine.json").write_text(json.dumps([zen4, xeon, {**xeon, "gpu": "NVIDIA H200"}]))
    assert machine_of(tmp_path) == "AMD EPYC (family 25, model 17) + Intel(R) Xeon(R) Processor (family 6, model 143) + NVIDIA H200"
    (tmp_path / "machine.json").unlink()
    assert machine_of(tmp_path) == "not recorded"  # runs from before machine.json


def test_a_runs_time_in_its_steps_is_the_sum_of_its_time_metrics(tmp_path):
    from tools.ablate import steps_seconds

    rows = [{"step": 0, "eval/accuracy": 0.1},  # the start's eval is no step
            {"step": 1, "time/generation": 2.5, "time/reward": 0.25, "time/training": 4.0, "time/sync": 0.25},
            {"step": 2, "time/generation": 1.5, "time/reward": 0.5, "time/training": 3.0, "time/sync": 0.5}]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert steps_seconds(tmp_path) == 12.5


def test_a_bad_cell_is_refused_before_anything_runs(tmp_path):
    for cell, message in (("llama:arithmetic:digits=1", "MODEL one of smollm2, gemma3"), ("gemma3:trivial", "TIER one of easy"),
                          ("gemma3:arithmetic:digits=0", "digits='0' must be an integer")):
        result = ablate(tmp_path, "--cells", cell)
        assert result.returncode != 0 and message in result.stderr, result.stderr[-2000:]
    assert not (tmp_path / "logs").exists()


def test_a_run_that_sampled_its_own_avg_is_not_evaluated_again_and_one_without_is(monkeypatch, tmp_path):
    """Runs made with --eval-samples carry their final avg@N; a run made before (none in its metrics) is evaluated by
    eval.py on its checkpoint, as is the start model; the table uses whichever the run has."""
    from tools import ablate as tool

    for seed, in_run in ((1, 0.25), (2, None)):
        run = tmp_path / "runs" / f"ablate__lite_ppo__{seed}"
        run.mkdir(parents=True)
        (run / "args.json").write_text(json.dumps(run_args(eval_samples=2 if in_run else 0)))
        rows = [{"step": 0, "eval/accuracy": 0.1}, {"step": 2, "rollout/response_len_mean": 5.0},
                {"step": 2, "eval/accuracy": 0.2}] + ([{"step": 2, "eval_sampled/accuracy": in_run}] if in_run else [])
        (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        record(tmp_path, "lite_ppo", seed)
    jobs = []

    def fake_eval(cmd, eval_dir, log, what):  # what eval.py would write: avg 0.5 for the checkpoint, 0.125 the start
        jobs.append(what)
        eval_dir.mkdir(parents=True)
        avg = 0.125 if eval_dir.name == "start" else 0.5
        (eval_dir / "summary.json").write_text(json.dumps({"results": {"d": {"n": 2, "metrics": {"accuracy": avg}}}}))

    monkeypatch.setattr(tool, "sampled_eval", fake_eval)
    results = tool.collect(["lite_ppo"], [1, 2], tmp_path, [])
    assert tool.sampled_evals(results, tmp_path, 2) == []
    assert jobs == ["sampled eval of start model", "sampled eval of lite_ppo seed 2"]
    results = tool.collect(["lite_ppo"], [1, 2], tmp_path, [])
    assert [r["sampled"] for r in results["lite_ppo"]] == [[(0, 0.125), (2, 0.25)], [(0, 0.125), (2, 0.5)]]


def test_equal_seeds_draw_an_error_bar_of_zero_not_a_negative_one(tmp_path):
    from tools.ablate import plot_technique
    from tools.compare import curve

    # three seeds that start at the same avg@2: the float mean of 3 x 0.045 is 0.045000000000000005, above the max
    runs = [{"args": {"model": "m", "dataset": "d", "prompts_per_step": 4, "group_size": 2}, "acc": [(0, 0.1), (8, a)],
             "rollout/adv_abs_mean": [(1, 0.5)], "sampled": [(0, 0.045), (8, a)], "sampled_n": 2} for a in (0.2, 0.3, 0.4)]
    steps, mean, lo, hi = curve(runs, "sampled")
    assert steps == [0, 8] and lo[0] <= mean[0] <= hi[0] == 0.045 and mean[1] == pytest.approx(0.3)
    plot_technique("normalization", {"lite_ppo": runs}, tmp_path / "n.png")  # raised ValueError: negative yerr
    assert (tmp_path / "n.png").read_bytes().startswith(PNG_MAGIC)


def test_a_run_counts_only_once_its_process_has_exited_with_status_zero(tmp_path):
    """A run still going has its final greedy eval but not yet the avg@2 sampled after it: tabulated then, it would
    stand at its greedy accuracy in the avg@N column. It counts once its record says it exited with status 0."""
    from tools import ablate as tool

    run = tmp_path / "runs" / "ablate__lite_ppo__1"
    run.mkdir(parents=True)
    (run / "args.json").write_text(json.dumps({"total_steps": 2, "eval_samples": 2}))
    rows = [{"step": 0, "eval/accuracy": 0.1}, {"step": 2, "rollout/response_len_mean": 5.0},
            {"step": 2, "eval/accuracy": 0.4}]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert tool.collect(["lite_ppo"], [1], tmp_path, []) == {"lite_ppo": []}  # sampling its avg@2: no record yet
    with open(run / "metrics.jsonl", "a") as f:
        f.write(json.dumps({"step": 2, "eval_sampled/accuracy": 0.25}) + "\n")
    record(tmp_path, "lite_ppo", 1, returncode=1)  # it then failed (e.g. saving its checkpoint)
    assert tool.collect(["lite_ppo"], [1], tmp_path, []) == {"lite_ppo": []}
    record(tmp_path, "lite_ppo", 1)
    [counted] = tool.collect(["lite_ppo"], [1], tmp_path, [])["lite_ppo"]
    assert (counted["final_acc"], counted["final_sampled"]["avg"], counted["wall_s"]) == (0.4, 0.25, 60.0)


def test_no_keep_models_deletes_a_runs_checkpoints_once_its_final_avg_is_on_record(monkeypatch, tmp_path):
    """A study's runs keep ~1 GB of checkpoint each (Gemma 3 270M) that nothing reads once the avg@N is written:
    --no-keep-models deletes them then; a run whose avg@N is not on record (its eval failed) keeps its model, and by
    default every run keeps it for eval.py's benchmarks."""
    from tools import ablate as tool

    def fake_run(variant, seed, flags, out, skip_existing, eval_samples):  # lite_ppo.py's run dir, then its record
        run = out / "runs" / tool.run_name(variant, seed)
        (run / "checkpoints" / "step-2" / "model").mkdir(parents=True)
        (run / "args.json").write_text(json.dumps(run_args(eval_samples=eval_samples)))
        rows = [{"step": 0, "eval/accuracy": 0.1}, {"step": 2, "rollout/response_len_mean": 5.0},
                {"step": 2, "eval/accuracy": 0.2}]
        rows += [{"step": 2, "eval_sampled/accuracy": 0.25}] if variant == "lite_ppo" else []  # the other sampled none
        (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        record(out, variant, seed)

    monkeypatch.setattr(tool, "run_variant", fake_run)
    monkeypatch.setattr(tool, "sampled_eval", lambda cmd, eval_dir, log, what: "exit status 1")  # eval.py fails
    for keep, out in ((False, tmp_path / "dropped"), (True, tmp_path / "kept")):
        tool.main(tool.Args(techniques=["overlong_filter"], seeds=[1], out=str(out), final_samples=2,
                            keep_models=keep), [])
        assert (out / "runs/ablate__lite_ppo__1/checkpoints").exists() == keep  # its avg@2 sampled in the run
        assert (out / "runs/ablate__overlong_filter__1/checkpoints/step-2/model").is_dir()  # eval.py's failed: kept
        assert (out / "runs/ablate__lite_ppo__1/metrics.jsonl").exists()  # the run's record stays whole
