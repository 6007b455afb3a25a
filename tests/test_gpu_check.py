"""benchmarks/gpu_check.py, the check prepared for a GPU machine, in its CPU-sized mode on the tiny model."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from common.precision import resolve_precision, untimed

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.heavy
@pytest.mark.timeout(600)
def test_gpu_check_short_mode_reports_phases_and_mfu(tiny_model_path, tiny_math_data, tmp_path):
    # tiny_math_data: problems the tiny model sometimes solves, so some rows learn and the mismatch is measured
    cmd = [sys.executable, str(ROOT / "benchmarks" / "gpu_check.py"), "--short", "--model", tiny_model_path,
           "--dataset", tiny_math_data, "--steps", "2",
           "--peak-tflops", "0.1", "--out", str(tmp_path), "--", "--max-grad-norm", "0.5"]
    result = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads((tmp_path / "gpu_check.json").read_text())
    device = torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"
    assert report["device"] == device and report["peak_tflops"] == 0.1
    assert report["script_args"] == ["--max-grad-norm", "0.5"]  # what follows `--` reaches lite_ppo.py as it is
    assert json.loads((tmp_path / "hf" / "args.json").read_text())["max_grad_norm"] == 0.5
    (run,) = report["runs"]
    assert run["backend"] == "hf" and run["steps"] == 2
    for key in ("generation", "training", "tok_per_s", "update_tflops"):
        assert run[key] > 0, key
    row = next(line for line in result.stdout.splitlines() if line.startswith("| hf |"))
    assert f"{run['update_tflops'] / 0.1:.1%}" in row  # the MFU column: update FLOP/s over the peak
    # the run's own start line: the precision this machine chose, and the mismatch it measured
    expected = resolve_precision("auto")
    assert untimed(run["precision"]) == untimed(str(expected))  # the probe's figure varies from run to run
    assert run["sampler_abs_diff"] >= 0 and run["sampler_ratio_max"] >= 1
    if expected.name == "fp32":  # HF generate and the trainer are one fp32 model: the same log-probs up to round-off
        assert run["sampler_abs_diff"] < 1e-4 and run["sampler_ratio_max"] < 1.001
