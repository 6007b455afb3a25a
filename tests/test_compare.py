"""tools/compare.py end to end on the tiny model: runs, sampled evals, plot, table (checked against the metrics and
the samples), reuse, failures."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def settings(model: str, data: str) -> list[str]:
    return ["--model", model, "--dataset", data, "--eval-dataset", data, "--eval-size", "8", "--total-steps", "2",
            "--eval-every", "1", "--prompts-per-step", "2", "--group-size", "2", "--max-new-tokens", "12",
            "--learning-rate", "1e-2", "--backend", "hf"]


def compare(out: Path, *flags: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "tools" / "compare.py"), "--out", str(out), *flags], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)


def table_rows(md: str) -> dict[str, list[str]]:
    """algorithm -> its cells, from the Markdown table of compare.md."""
    rows = {}
    for line in md.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| ") and cells[0] not in ("algorithm",) and not cells[0].startswith("---"):
            rows[cells[0]] = cells
    return rows


def avg_at_n(eval_dir: Path, n: int) -> float:
    """Mean reward of an eval.py samples.jsonl, after checking it holds n samples of every problem."""
    samples = [json.loads(line) for line in (eval_dir / "samples.jsonl").read_text().splitlines()]
    per_problem = {}
    for s in samples:
        per_problem.setdefault(s["id"], []).append(s["correct"])
    assert samples and all(len(v) == n for v in per_problem.values())
    return sum(s["correct"] for s in samples) / len(samples)


def expected_row(out: Path, algo: str, seeds: list[int], n: int | None = None) -> list[str]:
    """The row computed here, independently, from the runs' metrics.jsonl, the recorded wall times and (n given)
    the samples of the sampled evals."""
    start, final, length, wall, sampled_final = [], [], [], [], []
    for seed in seeds:
        rows = [json.loads(line) for line in (out / f"runs/compare__{algo}__{seed}/metrics.jsonl").read_text().splitlines()]
        evals = [r for r in rows if "eval/accuracy" in r]
        assert [r["step"] for r in evals] == [0, 1, 2]
        start.append(evals[0]["eval/accuracy"])
        final.append(evals[-1]["eval/accuracy"])
        length.append([r for r in rows if r["step"] == 2 and "rollout/response_len_mean" in r][0]["rollout/response_len_mean"])
        wall.append(json.loads((out / f"logs/{algo}__{seed}.json").read_text())["wall_s"])
        if n:
            sampled_final.append(avg_at_n(out / f"evals/compare__{algo}__{seed}", n))
    mean = lambda xs: sum(xs) / len(xs)  # noqa: E731
    pm = lambda xs: f"{mean(xs):.3f} ± {(max(xs) - min(xs)) / 2:.3f}" if len(xs) > 1 else f"{xs[0]:.3f}"  # noqa: E731
    gain = mean([f - s for s, f in zip(start, final)])
    sampled = []
    if n:
        sampled_start = avg_at_n(out / "evals/start", n)  # one eval of the start model serves every run
        sampled = [pm([sampled_start] * len(seeds)), pm(sampled_final), f"{mean(sampled_final) - sampled_start:+.3f}"]
    return [algo, " ".join(map(str, seeds)), pm(start), pm(final), f"{gain:+.3f}", *sampled, f"{mean(wall):.1f} s",
            f"{mean(length):.1f}"]


@pytest.mark.heavy
def test_compare_two_algorithms_two_seeds_then_reuse(tiny_model_path, tiny_math_data, tmp_path):
    cmd = ["--algorithms", "lite_ppo", "grpo", "--seeds", "1", "2", "--final-samples", "3",
           *settings(tiny_model_path, tiny_math_data)]
    result = compare(tmp_path, *cmd)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]

    png = (tmp_path / "compare.png").read_bytes()
    assert png.startswith(PNG_MAGIC) and len(png) > 30_000  # three panels with curves, not an empty canvas
    md = (tmp_path / "compare.md").read_text()
    assert "| start avg@3 | final avg@3 | gain avg@3 |" in md
    rows = table_rows(md)
    assert set(rows) == {"lite_ppo", "grpo"}
    for algo in ("lite_ppo", "grpo"):
        assert rows[algo] == expected_row(tmp_path, algo, [1, 2], n=3)
        for seed in (1, 2):
            log = (tmp_path / f"logs/{algo}__{seed}.log").read_text()
            assert "held-out accuracy" in log  # the script's own output, teed
            # the sampled eval: eval.py on the last checkpoint with the run's sampling settings
            eval_cmd = json.loads((tmp_path / f"logs/{algo}__{seed}__eval.json").read_text())["command"]
            flag = dict(zip(eval_cmd[1::2], eval_cmd[2::2]))
            assert flag["--model"] == f"{{out}}/runs/compare__{algo}__{seed}/checkpoints/step-2"  # recorded under --out
            assert (flag["--n"], flag["--temperature"], flag["--max-new-tokens"], flag["--limit"]) == ("3", "1.0", "12", "8")
    start_cmd = json.loads((tmp_path / "logs/start__eval.json").read_text())["command"]
    assert start_cmd[start_cmd.index("--model") + 1] == tiny_model_path
    assert f"compare.py --out {tmp_path} --algorithms lite_ppo grpo" in md  # the command line
    assert "--learning-rate 0.01" in md  # and each script's
    assert f"python eval.py --model {tiny_model_path} " in md  # and the start model's sampled eval
    assert all(line in result.stdout for line in md.splitlines() if line.startswith("| "))  # the table is printed too

    # --skip-existing: nothing reruns (logs untouched), the same table (recorded wall times reused)
    logs = {p: p.stat().st_mtime_ns for p in (tmp_path / "logs").iterdir()}
    again = compare(tmp_path, *cmd, "--skip-existing")
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert again.stdout.count("finished run reused") == 4
    assert again.stdout.count("finished eval reused") == 5  # the start model and the 4 checkpoints
    assert {p: p.stat().st_mtime_ns for p in (tmp_path / "logs").iterdir()} == logs
    assert table_rows((tmp_path / "compare.md").read_text()) == rows

    # --plot-only redraws from the runs
    (tmp_path / "compare.png").unlink()
    redraw = compare(tmp_path, "--plot-only", "--algorithms", "lite_ppo", "grpo", "--seeds", "1", "2")
    assert redraw.returncode == 0, redraw.stdout[-3000:] + redraw.stderr[-3000:]
    assert (tmp_path / "compare.png").read_bytes().startswith(PNG_MAGIC)
    assert table_rows((tmp_path / "compare.md").read_text()) == rows

    # a run trained again (other flags) drops its checkpoint's old eval and gets a new one; the start eval is reused
    rerun = compare(tmp_path, "--algorithms", "grpo", "--seeds", "1", "--final-samples", "3", "--skip-existing",
                    *settings(tiny_model_path, tiny_math_data), "--", "--beta", "0.5")
    assert rerun.returncode == 0, rerun.stdout[-3000:] + rerun.stderr[-3000:]
    assert "the existing run had other flags" in rerun.stdout
    assert "sampled eval of start model: finished eval reused" in rerun.stdout
    assert "sampled eval of grpo seed 1: finished eval reused" not in rerun.stdout
    assert table_rows((tmp_path / "compare.md").read_text())["grpo"] == expected_row(tmp_path, "grpo", [1], n=3)


@pytest.mark.heavy
def test_failed_runs_are_reported_and_the_others_still_run(tiny_model_path, tiny_math_data, tmp_path):
    # flags after -- go to every script: lite_ppo.py has no --beta (tyro rejects it), grpo.py rejects -1 (check_args);
    # both fail before loading a model, so this costs two interpreter starts, not two trainings
    result = compare(tmp_path, "--algorithms", "lite_ppo", "grpo", "--seeds", "1",
                     *settings(tiny_model_path, tiny_math_data), "--", "--beta", "-1")
    assert result.returncode == 1
    for algo, message in (("lite_ppo", r"Unrecognized option.*--beta"), ("grpo", r"--beta -1\.0: must be >= 0")):
        log = tmp_path / "logs" / f"{algo}__1.log"
        report = result.stdout.split(f"[compare] FAILED: {algo} seed 1 (exit status ")[1]  # grpo ran after lite_ppo failed
        assert report.split("\n")[0].endswith(f"log {log}, last lines:")
        assert re.search(message, report.split("[compare]")[0])  # the log's last lines, shown
        assert re.search(message, log.read_text())
    assert "no finished run: nothing to plot" in result.stdout
    assert not (tmp_path / "compare.png").exists()


@pytest.mark.heavy
def test_table_and_plot_from_runs_on_disk(tmp_path):
    """--plot-only on hand-written runs: mean ± half range, gain, a missing seed, a missing wall time, NaN lengths,
    sampled evals for some runs only."""
    curves = {("lite_ppo", 1): ([0.10, 0.30, 0.50], [20.0, 30.0], 100.0), ("lite_ppo", 2): ([0.20, 0.20, 0.30], [24.0, 26.0], 300.0),
              ("dapo", 1): ([0.40, 0.45, 0.60], [10.0, float("nan")], None)}  # eval accs, train lengths, wall time
    for (algo, seed), (accs, lengths, wall) in curves.items():
        run = tmp_path / "runs" / f"compare__{algo}__{seed}"
        run.mkdir(parents=True)
        (run / "args.json").write_text(json.dumps({"total_steps": 2, "model": "m", "dataset": "d", "eval_dataset": None,
                                                   "eval_size": 8, "prompts_per_step": 4, "group_size": 2,
                                                   "temperature": 1.0}))
        rows = [{"step": 0, "eval/accuracy": accs[0]}]
        for step in (1, 2):
            rows += [{"step": step, "rollout/response_len_mean": lengths[step - 1]}, {"step": step, "eval/accuracy": accs[step]}]
        (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        if wall is not None:
            (tmp_path / "logs").mkdir(exist_ok=True)
            (tmp_path / "logs" / f"{algo}__{seed}.json").write_text(json.dumps({"wall_s": wall, "flags": ["--x", "1"],
                                                                               "command": "python tools/compare.py"}))
    for name, avg in (("start", 0.25), ("compare__lite_ppo__1", 0.5), ("compare__lite_ppo__2", 0.75)):  # none for dapo
        (tmp_path / "evals" / name).mkdir(parents=True)
        (tmp_path / "evals" / name / "summary.json").write_text(json.dumps({"results": {"d": {"n": 4, "metrics": {
            "accuracy": avg, "maj@4": avg}}}}))
    result = compare(tmp_path, "--plot-only", "--algorithms", "lite_ppo", "dapo", "--seeds", "1", "2")
    assert result.returncode == 1  # dapo seed 2 is missing
    assert f"dapo seed 2: no finished run in {tmp_path / 'runs' / 'compare__dapo__2'}" in result.stdout
    rows = table_rows((tmp_path / "compare.md").read_text())
    assert rows["lite_ppo"] == ["lite_ppo", "1 2", "0.150 ± 0.050", "0.400 ± 0.100", "+0.250",
                                "0.250 ± 0.000", "0.625 ± 0.125", "+0.375", "3.3 min", "28.0"]
    assert rows["dapo"] == ["dapo", "1", "0.400", "0.600", "+0.200", "—", "—", "—", "—", "—"]
    png = (tmp_path / "compare.png").read_bytes()
    assert png.startswith(PNG_MAGIC) and len(png) > 20_000


@pytest.mark.heavy
def test_unknown_algorithm_is_refused_before_anything_runs(tmp_path):
    result = compare(tmp_path, "--algorithms", "lite_ppo", "no_such_algo")
    assert result.returncode != 0
    assert "no_such_algo" in result.stderr
    assert not (tmp_path / "logs").exists()


@pytest.mark.heavy
def test_negative_final_samples_is_refused_before_anything_runs(tmp_path):
    result = compare(tmp_path, "--final-samples", "-1")
    assert result.returncode != 0
    assert "--final-samples -1: must be >= 0" in result.stderr
    assert not (tmp_path / "logs").exists()


def test_an_eval_recorded_from_another_copy_of_the_tree_is_reused(tmp_path, capsys):
    from tools.compare import sampled_eval

    eval_dir, log = tmp_path / "evals" / "start", tmp_path / "logs" / "start__eval.log"
    eval_dir.mkdir(parents=True)
    log.parent.mkdir()
    (eval_dir / "summary.json").write_text(json.dumps({"results": {"d": {"n": 4, "metrics": {"accuracy": 0.25}}}}))
    rest = ["--model", "m", "--n", "4", "--output-dir", str(eval_dir)]
    log.with_suffix(".json").write_text(json.dumps({"command": ["/elsewhere/eval.py", *rest], "returncode": 0}))
    assert sampled_eval(["python", "/here/eval.py", *rest], eval_dir, log, "start") is None  # nothing run
    assert "finished eval reused" in capsys.readouterr().out
    assert sampled_eval(["/bin/false", "/here/eval.py", *rest[:-1], "other"], eval_dir, log, "start")  # other flags: rerun


def test_an_eval_recorded_under_another_output_folder_is_reused(tmp_path, capsys):
    """A study's records committed and checked out at another path: the eval's record names the paths under <out>
    (its checkpoint, its output folder) relative to <out>, so the same eval under the moved folder is reused."""
    import shutil
    import sys

    from tools.compare import sampled_eval

    fake_eval = tmp_path / "eval.py"  # writes the summary eval.py would, to its --output-dir
    fake_eval.write_text("import json, pathlib, sys\n"
                         "out = pathlib.Path(sys.argv[sys.argv.index('--output-dir') + 1])\n"
                         "out.mkdir(parents=True, exist_ok=True)\n"
                         "(out / 'summary.json').write_text(json.dumps("
                         "{'results': {'d': {'n': 4, 'metrics': {'accuracy': 0.25}}}}))\n")

    def run(out):
        (out / "logs").mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, str(fake_eval), "--model", str(out / "runs" / "r" / "checkpoints" / "step-8"),
               "--output-dir", str(out / "evals" / "r")]
        return sampled_eval(cmd, out / "evals" / "r", out / "logs" / "r__eval.log", "r")

    assert run(tmp_path / "a") is None
    record = json.loads((tmp_path / "a" / "logs" / "r__eval.json").read_text())
    assert record["command"][1:] == ["--model", "{out}/runs/r/checkpoints/step-8", "--output-dir", "{out}/evals/r"]
    assert "finished eval reused" not in capsys.readouterr().out
    shutil.move(tmp_path / "a", tmp_path / "b")
    assert run(tmp_path / "b") is None
    assert "finished eval reused" in capsys.readouterr().out


def test_a_sampled_eval_computes_in_the_precision_its_run_did():
    from tools.compare import sampled_eval_command

    run_args = {"eval_dataset": None, "dataset": "arithmetic:digits=1", "eval_size": 8, "temperature": 1.0,
                "top_p": 1.0, "top_k": 0, "max_new_tokens": 16, "template": "chat", "backend": "auto"}
    for precision in ("fp32", "bf16", "auto"):
        cmd = sampled_eval_command(run_args | {"precision": precision}, "m", 4, Path("out"))
        assert cmd[cmd.index("--precision") + 1] == precision
    cmd = sampled_eval_command(run_args, "m", 4, Path("out"))  # a run from before --precision existed
    assert cmd[cmd.index("--precision") + 1] == "auto"
