"""lite_ppo.py end to end: smoke runs on both backends, flag errors, kill -9 and exact resume."""

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from safetensors.torch import load_file

from tests.torchrun import torchrun

ROOT = Path(__file__).resolve().parents[1]


def tiny_args(model: str, data: str, out: Path, name: str, *extra: str, script: Path = ROOT / "lite_ppo.py") -> list[str]:
    return [sys.executable, str(script), "--model", model, "--dataset", data, "--eval-dataset", data,
            "--output-dir", str(out), "--run-name", name,
            "--prompts-per-step", "4", "--group-size", "4", "--max-new-tokens", "12", "--eval-size", "8",
            "--learning-rate", "1e-3", *extra]


def run(cmd: list[str], timeout: int = 600) -> subprocess.CompletedProcess:
    result = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, result.stderr[-3000:]
    return result


def metrics(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.heavy
@pytest.mark.parametrize("backend", ["hf", "vllm"])
def test_two_step_smoke_run(backend, tiny_model_path, tiny_math_data, tmp_path):
    track = ["--track", "tensorboard"] if backend == "hf" else []
    result = run(tiny_args(tiny_model_path, tiny_math_data, tmp_path, "smoke", "--backend", backend, "--total-steps", "2", *track))
    rows = metrics(tmp_path / "smoke")
    train = [r for r in rows if "losses/policy_loss" in r]
    assert [r["step"] for r in train] == [1, 2]
    for key in ("rollout/reward_mean", "rollout/response_len_mean", "losses/entropy", "losses/clipfrac",
                "charts/tokens_per_sec", "time/generation", "time/sync"):
        assert key in train[-1], key
    assert [r["step"] for r in rows if "eval/accuracy" in r] == [0, 2]
    # where the time goes outside the steps: the start (its engine's share of it) and each held-out evaluation
    (start,) = [r for r in rows if "overhead/start" in r]
    assert start["step"] == 0 and 0 < start["overhead/engine_start"] < start["overhead/start"]
    assert all(r["eval/seconds"] > 0 for r in rows if "eval/accuracy" in r)
    assert (tmp_path / "smoke/checkpoints/step-2/model/config.json").exists()
    assert "held-out accuracy" in result.stdout
    if track:  # TensorBoard's own reader finds the documented keys, per step
        from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

        events = EventAccumulator(str(tmp_path / "smoke"))
        events.Reload()
        scalars = events.Tags()["scalars"]
        for key in ("rollout/reward_mean", "losses/policy_loss", "losses/entropy", "charts/learning_rate", "eval/accuracy"):
            assert key in scalars, (key, scalars)
        assert [e.step for e in events.Scalars("losses/policy_loss")] == [1, 2]
        assert [e.step for e in events.Scalars("eval/accuracy")] == [0, 2]
        assert events.Scalars("rollout/reward_mean")[-1].value == pytest.approx(train[-1]["rollout/reward_mean"])


@pytest.mark.heavy
@pytest.mark.parametrize("flag,value,message", [
    ("--group-size", "1", "error: --group-size 1: needs at least 2"),
    ("--prompts-per-step", "0", "error: --prompts-per-step 0: must be positive"),
    ("--model", "./no/such/model", "error: --model ./no/such/model: no such directory"),
    ("--eval-dataset", "/no/such/data.jsonl", "error: --eval-dataset /no/such/data.jsonl: /no/such/data.jsonl: no such file"),
    ("--dataset", "arithmetic:digits=0", "error: --dataset arithmetic:digits=0: 'arithmetic:digits=0': digits='0' must be an integer"),
    ("--dataset", "arithmetic:ops=+/", "ops='+/' must be distinct characters from '+-*'"),
    ("--dataset", "arithmetic:n=ten", "n='ten' must be an integer"),
    ("--clip-eps", "1.5", "error: --clip-eps 1.5: must be in (0, 1)"),
    ("--eval-size", "-1", "error: --eval-size -1: must be >= 0 (0: no held-out evaluation)"),
    ("--eval-samples", "-1", "error: --eval-samples -1: must be >= 0 (0: no sampled evaluation)"),
    # flags with a fixed set of values are refused by the parser, which names the choices
    ("--backend", "tpu", "tpu"),
    ("--template", "chatml", "chatml"),
    ("--lr-schedule", "linear", "linear"),
    ("--track", "tensorbord", "tensorbord"),
    ("--track", "wandb", "error: --track wandb: the wandb package is not installed (pip install wandb)"),
])
def test_bad_flags_fail_in_one_line_before_any_model_is_loaded(flag, value, message, tiny_model_path, tiny_math_data, tmp_path):
    cmd = tiny_args(tiny_model_path, tiny_math_data, tmp_path, "bad", flag, value)
    if flag == "--dataset":
        cmd[cmd.index("--eval-dataset") + 1] = value
    result = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode != 0
    assert message in result.stderr
    assert "Traceback" not in result.stderr
    assert "Loading weights" not in result.stderr  # failed before the model was loaded
    if message.startswith("error:"):
        assert result.stderr.strip().splitlines()[-1].startswith(message)  # the last line says it all


@pytest.mark.heavy
def test_help_lists_the_choices_of_fixed_value_flags():
    result = subprocess.run([sys.executable, str(ROOT / "lite_ppo.py"), "--help"], cwd=ROOT, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0
    text = " ".join(result.stdout.split())
    for choices in ("{none,tensorboard,wandb}", "{chat,plain,fewshot}", "{auto,vllm,hf}", "{constant,cosine}"):
        assert choices in text, choices
    assert "de-quantized" in text and "(not the original weights)" in text  # --help says the model is a copy


@pytest.mark.heavy
def test_a_finished_run_is_never_appended_to_without_resume(tiny_model_path, tiny_math_data, tmp_path):
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "metrics.jsonl").write_text('{"step": 0, "eval/accuracy": 0.5}\n')
    result = subprocess.run(tiny_args(tiny_model_path, tiny_math_data, tmp_path, "taken"), cwd=ROOT,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode != 0
    assert "--run-name 'taken'" in result.stderr and "--resume" in result.stderr
    assert (tmp_path / "taken" / "metrics.jsonl").read_text() == '{"step": 0, "eval/accuracy": 0.5}\n'


@pytest.mark.heavy
@pytest.mark.timeout(900)
def test_kill_dash_nine_then_resume_ends_with_the_same_weights(tiny_model_path, tiny_math_data, tmp_path):
    kill_and_resume(ROOT / "lite_ppo.py", tiny_model_path, tiny_math_data, tmp_path)


def kill_and_resume(script: Path, tiny_model_path: str, tiny_math_data: str, tmp_path: Path, *flags: str) -> None:
    """Run `script` straight for 8 steps, and again killed with SIGKILL after its first checkpoint, then resumed:
    the same weights, bitwise, and every step logged once (tests/test_forks.py runs it on every fork)."""
    common = ("--backend", "hf", "--total-steps", "8", "--save-every", "1", "--eval-every", "4", "--keep-checkpoints", "2",
              *flags)
    run(tiny_args(tiny_model_path, tiny_math_data, tmp_path, "straight", *common, script=script))

    proc = subprocess.Popen(tiny_args(tiny_model_path, tiny_math_data, tmp_path, "killed", *common, script=script), cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    ckpts = tmp_path / "killed" / "checkpoints"
    deadline = time.time() + 600
    while not list(ckpts.glob("step-*")):  # step-N appears by an atomic rename, complete or not at all
        assert proc.poll() is None and time.time() < deadline, "run ended or stalled before its first checkpoint"
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    assert proc.wait() == -signal.SIGKILL, "the run finished before the kill: nothing left to resume"
    last = max(int(p.name.removeprefix("step-")) for p in ckpts.glob("step-*"))
    assert last < 8
    # a save that a kill interrupted: never taken for a checkpoint
    (ckpts / f".tmp-step-{last + 1}" / "state").mkdir(parents=True, exist_ok=True)
    result = run(tiny_args(tiny_model_path, tiny_math_data, tmp_path, "killed", *common, "--resume", script=script))
    assert "resumed from" in result.stdout and f"step-{last}" in result.stdout
    # metrics.jsonl: what the killed run logged after its checkpoint was dropped, so every step appears once
    resumed_rows = metrics(tmp_path / "killed")
    assert [r["step"] for r in resumed_rows if "losses/policy_loss" in r] == list(range(1, 9))
    evals = [r["step"] for r in resumed_rows if "eval/accuracy" in r]
    assert evals[0] == 0 and evals[-1] == 8 and len(evals) == len(set(evals))
    # machine.json: one record per start, each with the precision the run computed in
    starts = json.loads((tmp_path / "killed" / "machine.json").read_text())
    assert len(starts) == 2 and starts[0]["processes"] == 1
    assert f"precision: {starts[1]['precision']} (" in result.stdout  # what the resumed start printed it chose

    straight = load_file(tmp_path / "straight/checkpoints/step-8/model/model.safetensors")
    resumed = load_file(ckpts / "step-8/model/model.safetensors")
    assert straight.keys() == resumed.keys()
    for k in straight:
        assert (straight[k] == resumed[k]).all(), k  # bitwise: same seeds, same data, same order on CPU
    # the weights moved: the check compares trained models, not two copies of the initial one
    initial = load_file(Path(tiny_model_path) / "model.safetensors")
    assert any((initial[k] != straight[k]).any() for k in initial)


@pytest.mark.heavy
@pytest.mark.timeout(300)
def test_a_checkpoint_is_moved_into_place_only_once_every_process_wrote_its_part(tiny_model_path, tmp_path):
    # the second process writes its RNG states 2 s late: the main process must wait for them before the rename
    # (without the wait it renamed the folder under the other process, which then failed: a CI run met this)
    torchrun("checkpoint_race.py", tiny_model_path, str(tmp_path / "run"), log_dir=tmp_path / "logs")
    state = tmp_path / "run" / "checkpoints" / "step-1" / "state"
    assert (state / "random_states_0.pkl").exists() and (state / "random_states_1.pkl").exists()
    assert not list((tmp_path / "run" / "checkpoints").glob(".tmp-*"))


@pytest.mark.heavy
@pytest.mark.timeout(900)
def test_two_processes_each_with_its_own_vllm_engine(tiny_model_path, tiny_math_data, tmp_path):
    """As `accelerate launch --multi_gpu --num_processes 2` runs it on a CPU machine (torchrun underneath)."""
    flags = tiny_args(tiny_model_path, tiny_math_data, tmp_path, "two")[2:] + ["--backend", "vllm", "--total-steps", "2"]
    torchrun("two_process_run.py", str(tmp_path / "record"), *flags, log_dir=tmp_path / "logs", timeout=900)
    ranks = [json.loads((tmp_path / "record" / f"rank{r}.json").read_text()) for r in range(2)]
    assert [(r["rank"], r["world_size"], r["engine"]) for r in ranks] == [(0, 2, "VLLMEngine"), (1, 2, "VLLMEngine")]
    assert [r["prompts"] for r in ranks] == [4, 4]  # 2 steps x its half of the 4 prompts per step, in its own engine
    assert ranks[0]["checksum"] == ranks[1]["checksum"]  # DDP: both processes end with the same weights
    train = [r for r in metrics(tmp_path / "two") if "losses/policy_loss" in r]
    assert [r["step"] for r in train] == [1, 2]


@pytest.mark.heavy
def test_eval_samples_is_eval_py_on_the_last_checkpoint(tiny_model_path, tiny_math_data, tmp_path):
    """--eval-samples N: avg@N after the last step, on the run's own engine, equals eval.py's on the saved checkpoint
    with the same sampling and seed (HF engine, fp32: the same weights give the same samples)."""
    result = run(tiny_args(tiny_model_path, tiny_math_data, tmp_path, "sampled", "--backend", "hf", "--total-steps", "1",
                           "--eval-samples", "3", "--seed", "5"))
    (row,) = [r for r in metrics(tmp_path / "sampled") if "eval_sampled/accuracy" in r]
    assert row["step"] == 1 and {"eval_sampled/pass@2", "eval_sampled/maj@3", "eval_sampled/truncated_frac"} <= set(row)
    assert f"held-out avg@3 at step 1: {row['eval_sampled/accuracy']:.3f} (8 problems)" in result.stdout
    run([sys.executable, str(ROOT / "eval.py"), "--model", str(tmp_path / "sampled/checkpoints/step-1"),
         "--datasets", tiny_math_data, "--split", "test", "--limit", "8", "--n", "3", "--temperature", "1.0",
         "--max-new-tokens", "12", "--template", "chat", "--backend", "hf", "--seed", "5",
         "--output-dir", str(tmp_path / "eval")])
    (summary,) = json.loads((tmp_path / "eval/summary.json").read_text())["results"].values()
    assert summary["n"] == 3 and summary["problems"] == 8
    for key, value in summary["metrics"].items():
        assert row[f"eval_sampled/{key}"] == pytest.approx(value, abs=1e-9), key
