"""The precision choice and the sampler-trainer mismatch: detection by hand, the importance weights of every mode
by hand and against TRL's convention written out independently, the stats, and a real run's weights with the HF
engine in fp32 (the sampler is the trainer's own model: the weights are 1 up to fp32 round-off)."""

import json
import math
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from common import precision
from common.errors import BadSpec
from common.mismatch import MODES, mismatch_stats, sampler_weights
from common.precision import (BF16_MIN_SPEEDUP, bf16_speedup, cpu_bf16_flags, machine, native_bf16,
                              resolve_precision, untimed)
from common.update import add_stats, step_stats
from tests.torchrun import torchrun

ROOT = Path(__file__).resolve().parents[1]
ZEN3 = "processor\t: 0\nflags\t\t: fpu sse sse2 avx avx2 fma f16c\n"  # an AMD EPYC 7003 (no AVX-512)
ZEN4 = "processor\t: 0\nflags\t\t: fpu avx2 avx512f avx512bw avx512_bf16 avx512_vnni\n"
SAPPHIRE_RAPIDS = "flags\t\t: avx2 avx512f avx512_bf16 amx_bf16 amx_tile amx_int8\n"
GRAVITON3 = "processor\t: 0\nFeatures\t: fp asimd sve bf16 i8mm\n"


def test_native_bf16_is_read_from_the_cpu_flags(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert cpu_bf16_flags(ZEN3) == [] and cpu_bf16_flags(ZEN4) == ["avx512_bf16"]
    assert cpu_bf16_flags(SAPPHIRE_RAPIDS) == ["avx512_bf16", "amx_bf16"] and cpu_bf16_flags(GRAVITON3) == ["bf16"]
    assert cpu_bf16_flags("model name\t: bf16 in a name\n") == []  # only the flags lines count
    assert native_bf16(ZEN3)[0] is False and native_bf16(ZEN4)[0] is True


def test_a_run_records_the_cpu_as_cpuinfo_names_it_with_its_generation_and_bf16_flags(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    # two processors, as /proc/cpuinfo lists them: the first one's fields are the record's
    two = ("processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\nmodel\t\t: 17\nmodel name\t: AMD EPYC\n"
           "flags\t\t: fpu avx2 avx512f avx512_bf16\n\nprocessor\t: 1\ncpu family\t: 26\nmodel\t\t: 2\n"
           "model name\t: other\nflags\t\t: fpu\n")
    facts = machine(two)
    assert (facts["cpu"], facts["cpu_family"], facts["cpu_model"], facts["cpu_bf16_flags"]) == \
        ("AMD EPYC", "25", "17", ["avx512_bf16"])
    assert facts["gpu"] is None and facts["torch"] == torch.__version__ and facts["torch_threads"] >= 1
    assert machine(GRAVITON3)["cpu_bf16_flags"] == ["bf16"] and machine(GRAVITON3)["cpu"] == ""  # ARM names no model


RETURNED = """import sys, torch
from common.precision import keep_freed_memory, machine
print(keep_freed_memory() if sys.argv[1] == "keep" else "as started", machine()["malloc"], sep="|")
def resident(): return int(open("/proc/self/statm").read().split()[1])
x = torch.empty(64 * 2**20); x.fill_(1.0)  # 256 MiB, every page written
before = resident(); del x
print(before - resident())  # the pages freeing it handed back to the kernel
"""


def test_freed_memory_is_kept_for_the_next_step_unless_the_user_chose_malloc_settings():
    def run(mode, **env):
        inherited = {k: v for k, v in os.environ.items() if k not in ("GLIBC_TUNABLES", "LD_PRELOAD")}
        out = subprocess.run([sys.executable, "-c", RETURNED, mode], cwd=ROOT, capture_output=True, text=True,
                             timeout=120, env={**inherited, "CUDA_VISIBLE_DEVICES": "", **env})  # a CPU run's malloc
        said, returned = out.stdout.strip().splitlines()
        return said.split("|"), int(returned)
    pages = 64 * 2**20 * 4 // resource.getpagesize()
    (said, recorded), returned = run("default")
    assert (said, recorded) == ("as started", "glibc defaults") and returned >= 0.9 * pages  # unmapped on free
    (said, recorded), returned = run("keep")
    assert said == recorded == "glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=2147483647"
    assert returned < 0.01 * pages  # kept in the process, for the next step's blocks
    (said, recorded), returned = run("keep", GLIBC_TUNABLES="glibc.malloc.mmap_max=65536")  # the user's own
    assert said == recorded == "GLIBC_TUNABLES=glibc.malloc.mmap_max=65536" and returned >= 0.9 * pages
    (said, _), _ = run("keep", LD_PRELOAD="libgomp.so.1")  # vLLM's CPU platform preloads OpenMP, no allocator
    assert said == "glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=2147483647"


def test_auto_is_bf16_only_where_native_and_faster_and_every_choice_says_why(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    shown = {"learns_as_fp32": ("bf16",)}  # were bf16 shown to learn as fp32 does (tests/test_precision.py: auto's evidence)
    auto_old = resolve_precision("auto", ZEN3, speedup=5.0, **shown)  # no flag: fp32 whatever a probe would say
    auto_fast = resolve_precision("auto", ZEN4, speedup=2.5, **shown)
    auto_slow = resolve_precision("auto", ZEN4, speedup=0.61, **shown)
    assert (auto_old.name, auto_fast.name, auto_slow.name) == ("fp32", "bf16", "fp32")
    assert resolve_precision("auto", ZEN4, speedup=BF16_MIN_SPEEDUP, **shown).name == "bf16"  # the bar itself passes
    assert str(auto_old).startswith("precision: fp32 (auto: this CPU has no native bf16")
    assert "avx512_bf16 in /proc/cpuinfo, and a bf16 layer's forward+backward runs 2.50x the speed of fp32" in str(auto_fast)
    assert str(auto_slow).endswith("runs 0.61x the speed of fp32 here (bf16 needs 1.2x))")
    assert untimed(str(auto_slow)) == untimed(str(resolve_precision("auto", ZEN4, speedup=0.5, **shown))) != \
        untimed(str(auto_fast))
    forced = resolve_precision("bf16", ZEN3)  # runs, and says once that it will be slow
    assert forced.name == "bf16" and "slower" in str(forced)
    assert resolve_precision("fp32", ZEN4).name == "fp32" and "slower" not in str(resolve_precision("bf16", ZEN4))
    assert (forced.torch_dtype, forced.vllm_dtype, auto_old.torch_dtype) == (torch.bfloat16, "bfloat16", torch.float32)
    with pytest.raises(BadSpec, match="--precision 'fp16'"):
        resolve_precision("fp16")


def test_the_probe_runs_only_for_auto_on_a_flagged_cpu_and_decides_it(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    calls = []
    monkeypatch.setattr(precision, "bf16_speedup", lambda: calls.append(1) or 0.5)
    assert [resolve_precision(f, cpu).name for f, cpu in [("auto", ZEN3), ("fp32", ZEN4), ("bf16", ZEN4)]] == \
        ["fp32", "fp32", "bf16"] and calls == []
    assert resolve_precision("auto", ZEN4).name == "fp32" and calls == [1]
    monkeypatch.undo()
    speedup = bf16_speedup(rows=64, reps=2)  # the real probe: a ratio of two positive timings
    assert math.isfinite(speedup) and speedup > 0


@pytest.mark.heavy
def test_processes_that_chose_differently_are_refused(tmp_path):
    torchrun("precision_agreement.py", "fp32", "fp32", str(tmp_path), log_dir=tmp_path / "same")
    printed = "".join(log.read_text() for log in (tmp_path / "same").rglob("stdout.log"))
    assert printed.count("precision: fp32 (given by the test)") == 1  # agreed, and printed by the main process
    with pytest.raises(AssertionError, match=r"--precision auto: the processes chose fp32, bf16 \(process order\); "
                                             "pass --precision fp32 or bf16"):
        torchrun("precision_agreement.py", "fp32", "bf16", str(tmp_path), log_dir=tmp_path / "differ")


@pytest.mark.heavy
def test_the_start_prints_the_precision_and_a_bad_value_is_refused():
    out = subprocess.run([sys.executable, "lite_ppo.py", "--precision", "fp16"], cwd=ROOT, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode != 0 and "--precision" in out.stderr and "fp16" in out.stderr


# Two rows of 4 tokens; row 1 has 3 response tokens, row 2 has 2 (masked tokens carry junk that must not count).
OLD = torch.tensor([[0.0, -1.0, -2.0, -0.5], [0.0, -0.3, -3.0, 9.0]])
SAMPLER = torch.tensor([[0.0, -1.5, -1.0, -0.5], [0.0, -0.1, -4.5, -9.0]])
MASK = torch.tensor([[0, 1, 1, 1], [0, 1, 1, 0]])


def test_importance_weights_of_every_mode_by_hand():
    # log(pi_old / q) on the response: row 1: 0.5, -1, 0; row 2: -0.2, 1.5
    e = math.exp
    tok = [[1, e(0.5), e(-1), 1], [1, e(-0.2), e(1.5), 1]]  # off the response: log-ratio 0, weight 1 (never used)
    w = sampler_weights(OLD, SAMPLER, MASK, "token_truncate", cap=3.0)
    torch.testing.assert_close(w, torch.tensor(tok).clamp(max=3.0))  # e^1.5 = 4.48 -> 3
    w = sampler_weights(OLD, SAMPLER, MASK, "token_mask", cap=3.0)
    torch.testing.assert_close(w, torch.tensor([[1, e(0.5), e(-1), 1], [1, e(-0.2), 0.0, 1]]))
    # sequence: exp(sum of the row's log-ratios): row 1 e^-0.5, row 2 e^1.3 = 3.67
    w = sampler_weights(OLD, SAMPLER, MASK, "sequence_truncate", cap=3.0)
    torch.testing.assert_close(w, torch.tensor([[e(-0.5)], [3.0]]))
    w = sampler_weights(OLD, SAMPLER, MASK, "sequence_mask", cap=3.0)
    torch.testing.assert_close(w, torch.tensor([[e(-0.5)], [0.0]]))
    w = sampler_weights(OLD, SAMPLER, MASK, "sequence_mask", cap=4.0)
    torch.testing.assert_close(w, torch.tensor([[e(-0.5)], [e(1.3)]]))
    assert sampler_weights(OLD, SAMPLER, MASK, "none", cap=3.0) is None


def trl_importance_sampling_ratio(old, sampler, mask, mode, cap):
    """TRL 1.16 GRPOTrainer's `vllm_importance_sampling_ratio`, written out from its documented behaviour: the
    per-token log-ratio under the completion mask; for sequence modes its row sum (kept as [B, 1]); exp; truncate =
    clamp(max=cap), mask = 0 where the ratio exceeds cap. Its loss multiplies the per-token surrogate by it, before
    adding beta * KL."""
    diff = (old - sampler) * mask
    if mode in ("sequence_mask", "sequence_truncate"):
        diff = diff.sum(dim=-1, keepdim=True)
    ratio = torch.exp(diff)
    if mode in ("sequence_truncate", "token_truncate"):
        return torch.clamp(ratio, max=cap)
    return ratio.masked_fill(ratio > cap, value=0.0)


@pytest.mark.parametrize("mode", MODES[1:])
def test_the_weights_follow_trls_convention(mode):
    g = torch.Generator().manual_seed(0)
    old, sampler = -5 * torch.rand(6, 9, generator=g), -5 * torch.rand(6, 9, generator=g)
    mask = (torch.rand(6, 9, generator=g) > 0.3).long()
    for cap in (1.5, 3.0, 100.0):
        torch.testing.assert_close(sampler_weights(old, sampler, mask, mode, cap),
                                   trl_importance_sampling_ratio(old, sampler, mask.float(), mode, cap))


@pytest.mark.parametrize("script", ["lite_ppo", "grpo", "dapo", "ppo_vanilla"])
def test_the_weights_multiply_the_surrogate_of_each_script_and_not_the_kl(script):
    module = __import__(script)
    args = module.Args()
    logprobs = (OLD + 0.1 * torch.arange(4.0)).requires_grad_()
    adv = torch.tensor([1.0, -2.0]) if script != "ppo_vanilla" else torch.tensor([[1.0] * 4, [-2.0] * 4])
    w = sampler_weights(OLD, SAMPLER, MASK, "token_truncate", 3.0)
    plain, _ = module.policy_loss(logprobs, OLD, adv, MASK, args)
    weighted, _ = module.policy_loss(logprobs, OLD, adv, MASK, args, sampler_weights=w)
    # the same loss with every per-token surrogate term multiplied by its weight: check through the gradient
    (g_plain,) = torch.autograd.grad(plain, logprobs)
    (g_weighted,) = torch.autograd.grad(weighted, logprobs)
    torch.testing.assert_close(g_weighted, g_plain * w)
    if script == "grpo":  # the KL term is not weighted: its gradient is the same with and without weights
        ref = OLD - 0.3
        kl_only = lambda weights: torch.autograd.grad(  # noqa: E731
            module.policy_loss(logprobs, OLD, 0 * adv, MASK, args, ref_logprobs=ref, sampler_weights=weights)[0], logprobs)[0]
        torch.testing.assert_close(kl_only(w), kl_only(None))
        assert kl_only(None).abs().sum() > 0


def test_mismatch_stats_by_hand():
    w = sampler_weights(OLD, SAMPLER, MASK, "token_truncate", cap=3.0)
    stats = mismatch_stats(OLD, SAMPLER, w, MASK, num_tokens=10)  # this micro-batch's share of a 10-token mean
    log_ratios = [0.5, -1.0, 0.0, -0.2, 1.5]
    assert stats["rollout/sampler_abs_diff"] == pytest.approx(sum(map(abs, log_ratios)) / 10)
    assert stats["rollout/sampler_kl"] == pytest.approx(sum(math.exp(x) - 1 - x for x in log_ratios) / 10)
    assert stats["rollout/sampler_is_weight"] == pytest.approx((math.exp(0.5) + math.exp(-1) + 1 + math.exp(-0.2) + 3) / 10)
    assert stats["rollout/sampler_ratio_max"] == pytest.approx(math.exp(1.5))
    assert stats["rollout/sampler_inv_ratio_max"] == pytest.approx(math.exp(1.0))
    assert mismatch_stats(OLD, SAMPLER, None, MASK, 10)["rollout/sampler_is_weight"] == pytest.approx(5 / 10)
    empty = mismatch_stats(OLD, SAMPLER, w, torch.zeros_like(MASK), num_tokens=0)  # a placeholder row, nothing computed
    assert empty["rollout/sampler_ratio_max"] == float("-inf") and empty["rollout/sampler_kl"] != empty["rollout/sampler_kl"]


def test_step_stats_add_means_and_keep_maxima():
    totals = {}
    add_stats(totals, {"losses/entropy": 0.25, "rollout/sampler_ratio_max": 2.0})
    add_stats(totals, {"losses/entropy": 0.5, "rollout/sampler_ratio_max": 1.5})
    add_stats(totals, {"losses/entropy": 0.75, "rollout/sampler_ratio_max": float("-inf")})
    assert step_stats(totals, num_steps=2) == {"losses/entropy": 0.75, "rollout/sampler_ratio_max": 2.0}
    assert math.isnan(step_stats({"rollout/sampler_ratio_max": float("-inf")}, 1)["rollout/sampler_ratio_max"])


@pytest.mark.heavy
@pytest.mark.timeout(600)
def test_with_the_hf_engine_in_fp32_the_sampler_is_the_trainer_and_the_weights_are_one(tiny_model_path, tiny_math_data,
                                                                                     tmp_path):
    # the sampler's log-probs come from generate's scores on the very model the trainer scores with: the same
    # numbers up to the order of fp32 sums (a KV cache, left padding): measured |diff| <= ~1e-6 per token here
    out = subprocess.run([sys.executable, "lite_ppo.py", "--model", tiny_model_path, "--dataset", tiny_math_data,
                          "--backend", "hf", "--precision", "fp32", "--total-steps", "2", "--prompts-per-step", "4",
                          "--group-size", "4", "--max-new-tokens", "12", "--eval-size", "2", "--output-dir",
                          str(tmp_path), "--run-name", "run"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "precision: fp32 (--precision fp32" in out.stdout
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in rows if "rollout/sampler_kl" in r and r["rollout/sampler_kl"] is not None]
    assert train, rows
    for r in train:
        assert r["rollout/sampler_abs_diff"] < 1e-5 and r["rollout/sampler_kl"] < 1e-9
        assert abs(r["rollout/sampler_ratio_max"] - 1) < 1e-4 and abs(r["rollout/sampler_inv_ratio_max"] - 1) < 1e-4
        assert r["rollout/sampler_is_weight"] == pytest.approx(1.0, abs=1e-5)
