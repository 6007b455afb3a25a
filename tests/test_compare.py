"""tools/compare.py end to end on the tiny model: runs, plot, table (checked against the metrics), reuse, failures."""

import json
import re
import subprocess
import sys
from pathlib import Path

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


def expected_row(out: Path, algo: str, seeds: list[int]) -> list[str]:
    """The row computed here, independently, from the runs' metrics.jsonl and the recorded wall times."""
    start, final, length, wall = [], [], [], []
    for seed in seeds:
        rows = [json.loads(line) for line in (out / f"runs/compare__{algo}__{seed}/metrics.jsonl").read_text().splitlines()]
        evals = [r for r in rows if "eval/accuracy" in r]
        assert [r["step"] for r in evals] == [0, 1, 2]
        start.append(evals[0]["eval/accuracy"])
        final.append(evals[-1]["eval/accuracy"])
        length.append([r for r in rows if r["step"] == 2 and "rollout/response_len_mean" in r][0]["rollout/response_len_mean"])
        wall.append(json.loads((out / f"logs/{algo}__{seed}.json").read_text())["wall_s"])
    mean = lambda xs: sum(xs) / len(xs)  # noqa: E731
    pm = lambda xs: f"{mean(xs):.3f} ± {(max(xs) - min(xs)) / 2:.3f}" if len(xs) > 1 else f"{xs[0]:.3f}"  # noqa: E731
    gain = mean([f - s for s, f in zip(start, final)])
    return [algo, " ".join(map(str, seeds)), pm(start), pm(final), f"{gain:+.3f}", f"{mean(wall):.1f} s", f"{mean(length):.1f}"]


def test_compare_two_algorithms_two_seeds_then_reuse(tiny_model_path, tiny_math_data, tmp_path):
    cmd = ["--algorithms", "lite_ppo", "grpo", "--seeds", "1", "2", *settings(tiny_model_path, tiny_math_data)]
    result = compare(tmp_path, *cmd)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]

    png = (tmp_path / "compare.png").read_bytes()
    assert png.startswith(PNG_MAGIC) and len(png) > 20_000  # two panels with curves, not an empty canvas
    md = (tmp_path / "compare.md").read_text()
    rows = table_rows(md)
    assert set(rows) == {"lite_ppo", "grpo"}
    for algo in ("lite_ppo", "grpo"):
        assert rows[algo] == expected_row(tmp_path, algo, [1, 2])
        for seed in (1, 2):
            log = (tmp_path / f"logs/{algo}__{seed}.log").read_text()
            assert "held-out accuracy" in log  # the script's own output, teed
    assert f"compare.py --out {tmp_path} --algorithms lite_ppo grpo" in md  # the command line
    assert "--learning-rate 0.01" in md  # and each script's
    assert all(line in result.stdout for line in md.splitlines() if line.startswith("| "))  # the table is printed too

    # --skip-existing: nothing reruns (logs untouched), the same table (recorded wall times reused)
    logs = {p: p.stat().st_mtime_ns for p in (tmp_path / "logs").iterdir()}
    again = compare(tmp_path, *cmd, "--skip-existing")
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert again.stdout.count("finished run reused") == 4
    assert {p: p.stat().st_mtime_ns for p in (tmp_path / "logs").iterdir()} == logs
    assert table_rows((tmp_path / "compare.md").read_text()) == rows

    # --plot-only redraws from the runs
    (tmp_path / "compare.png").unlink()
    redraw = compare(tmp_path, "--plot-only", "--algorithms", "lite_ppo", "grpo", "--seeds", "1", "2")
    assert redraw.returncode == 0, redraw.stdout[-3000:] + redraw.stderr[-3000:]
    assert (tmp_path / "compare.png").read_bytes().startswith(PNG_MAGIC)
    assert table_rows((tmp_path / "compare.md").read_text()) == rows


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


def test_table_and_plot_from_runs_on_disk(tmp_path):
    """--plot-only on hand-written runs: mean ± half range, gain, a missing seed, a missing wall time, NaN lengths."""
    curves = {("lite_ppo", 1): ([0.10, 0.30, 0.50], [20.0, 30.0], 100.0), ("lite_ppo", 2): ([0.20, 0.20, 0.30], [24.0, 26.0], 300.0),
              ("dapo", 1): ([0.40, 0.45, 0.60], [10.0, float("nan")], None)}  # eval accs, train lengths, wall time
    for (algo, seed), (accs, lengths, wall) in curves.items():
        run = tmp_path / "runs" / f"compare__{algo}__{seed}"
        run.mkdir(parents=True)
        (run / "args.json").write_text(json.dumps({"total_steps": 2, "model": "m", "dataset": "d", "eval_dataset": None,
                                                   "eval_size": 8, "prompts_per_step": 4, "group_size": 2}))
        rows = [{"step": 0, "eval/accuracy": accs[0]}]
        for step in (1, 2):
            rows += [{"step": step, "rollout/response_len_mean": lengths[step - 1]}, {"step": step, "eval/accuracy": accs[step]}]
        (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        if wall is not None:
            (tmp_path / "logs").mkdir(exist_ok=True)
            (tmp_path / "logs" / f"{algo}__{seed}.json").write_text(json.dumps({"wall_s": wall, "flags": ["--x", "1"],
                                                                               "command": "python tools/compare.py"}))
    result = compare(tmp_path, "--plot-only", "--algorithms", "lite_ppo", "dapo", "--seeds", "1", "2")
    assert result.returncode == 1  # dapo seed 2 is missing
    assert f"dapo seed 2: no finished run in {tmp_path / 'runs' / 'compare__dapo__2'}" in result.stdout
    rows = table_rows((tmp_path / "compare.md").read_text())
    assert rows["lite_ppo"] == ["lite_ppo", "1 2", "0.150 ± 0.050", "0.400 ± 0.100", "+0.250", "3.3 min", "28.0"]
    assert rows["dapo"] == ["dapo", "1", "0.400", "0.600", "+0.200", "—", "—"]
    png = (tmp_path / "compare.png").read_bytes()
    assert png.startswith(PNG_MAGIC) and len(png) > 20_000


def test_unknown_algorithm_is_refused_before_anything_runs(tmp_path):
    result = compare(tmp_path, "--algorithms", "lite_ppo", "no_such_algo")
    assert result.returncode != 0
    assert "no_such_algo" in result.stderr
    assert not (tmp_path / "logs").exists()
