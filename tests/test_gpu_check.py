"""benchmarks/gpu_check.py, the check prepared for a GPU machine, in its CPU-sized mode on the tiny model."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.timeout(600)
def test_gpu_check_short_mode_reports_phases_and_mfu(tiny_model_path, tmp_path):
    cmd = [sys.executable, str(ROOT / "benchmarks" / "gpu_check.py"), "--short", "--model", tiny_model_path, "--steps", "2",
           "--peak-tflops", "0.1", "--out", str(tmp_path)]
    result = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads((tmp_path / "gpu_check.json").read_text())
    assert report["device"] == "cpu" and report["peak_tflops"] == 0.1
    (run,) = report["runs"]
    assert run["backend"] == "hf" and run["steps"] == 2
    for key in ("generation", "training", "tok_per_s", "update_tflops"):
        assert run[key] > 0, key
    row = next(line for line in result.stdout.splitlines() if line.startswith("| hf |"))
    assert f"{run['update_tflops'] / 0.1:.1%}" in row  # the MFU column: update FLOP/s over the peak
