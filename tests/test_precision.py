"""The precision settings (common/precision.py): what each computes in, auto's choice by the evidence, the fp32 LM head
in the trainer (numbers and gradients against a reference) and in both generation engines, and the record it rests on."""

import json
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from common import precision
from common.generation import HFEngine, SamplingConfig, VLLMEngine
from common.heads import LogprobModel, backbone_hidden
from common.precision import LEARNS_AS_FP32, SETTINGS, resolve_precision
from common.update import make_batch
from tests.test_generation import model, prompts, tokenizer  # noqa: F401 (fixtures)
from tests.test_mismatch import ZEN3, ZEN4
from tests.test_update import COMPLETIONS, PROMPTS, tiny_lm
from tools.parity import MARGIN, compare

ROOT = Path(__file__).resolve().parents[1]
BF16 = dict(device_type="cpu", dtype=torch.bfloat16)


def test_what_each_setting_computes_in():
    table = {name: (p.update_bf16, p.fp32_head, p.vllm_dtype, p.torch_dtype)
             for name in SETTINGS for p in [resolve_precision(name, ZEN4)]}
    assert table == {"bf16": (True, False, "bfloat16", torch.bfloat16),
                     "bf16-fp32-head": (True, True, "bfloat16", torch.bfloat16),
                     "bf16-gen": (False, False, "bfloat16", torch.bfloat16),
                     "fp32": (False, False, "float32", torch.float32)}
    assert "emulated" in str(resolve_precision("bf16-gen", ZEN3)) and "emulated" not in str(resolve_precision("fp32", ZEN3))


def test_auto_picks_the_fastest_setting_shown_to_learn_as_fp32_where_bf16_is_faster(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    fast, slow = dict(cpuinfo=ZEN4, speedup=2.5), dict(cpuinfo=ZEN4, speedup=0.6)
    none_shown = resolve_precision("auto", **fast, learns_as_fp32=())
    assert none_shown.name == "fp32" and "no bf16 setting has been shown to learn as fp32 does" in str(none_shown)
    assert "runs 2.50x the speed of fp32" in str(none_shown)  # why, with the probe's figure
    assert resolve_precision("auto", **fast, learns_as_fp32=("bf16-gen",)).name == "bf16-gen"
    both = resolve_precision("auto", **fast, learns_as_fp32=("bf16-gen", "bf16-fp32-head"))
    assert both.name == "bf16-fp32-head" and "the fastest setting shown to learn as fp32 does" in str(both)
    assert resolve_precision("auto", **fast, learns_as_fp32=tuple(SETTINGS)).name == "bf16"
    # slower, or not native: fp32 whatever the evidence
    assert resolve_precision("auto", **slow, learns_as_fp32=("bf16",)).name == "fp32"
    assert resolve_precision("auto", ZEN3, speedup=5.0, learns_as_fp32=("bf16",)).name == "fp32"
    assert resolve_precision("auto", **fast).name == (next((s for s in SETTINGS if s in LEARNS_AS_FP32), "fp32"))


def test_auto_on_cuda(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "NVIDIA H100")
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a: True)
    assert resolve_precision("auto", learns_as_fp32=()).name == "bf16"  # what GPU recipes train in
    assert resolve_precision("auto", learns_as_fp32=("bf16-fp32-head",)).name == "bf16-fp32-head"
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a: False)
    assert resolve_precision("auto", learns_as_fp32=("bf16",)).name == "fp32"


def test_learns_as_fp32_is_what_the_parity_record_shows():
    records = json.loads((ROOT / "docs/precision/parity.json").read_text())
    shown = {c["setting"] for c in compare(records) if c["learns_as_fp32"]}
    assert set(LEARNS_AS_FP32) == shown
    for r in records:  # the record's fields, as the issue of record asks
        assert set(r) == {"setting", "seed", "machine", "steps_s", "start_avg16", "end_avg16", "end_greedy",
                          "sampler_abs_diff", "auto"}
        assert r["setting"].split()[-1] in SETTINGS and 0 <= r["end_avg16"] <= 1 and r["steps_s"] > 0


def test_the_parity_bar():
    def runs(setting, values):
        return [{"setting": f"--precision {setting}", "seed": s, "steps_s": 100.0, "end_avg16": v, "end_greedy": v}
                for s, v in enumerate(values, 1)]
    base = runs("fp32", [0.30, 0.25, 0.40, 0.35, 0.28])
    same = runs("bf16-gen", [0.31, 0.24, 0.41, 0.34, 0.29])  # differences +-0.01: interval inside the margin
    worse = runs("bf16", [0.25, 0.20, 0.35, 0.30, 0.23])  # 0.05 below on every seed
    few = runs("bf16-fp32-head", [0.30, 0.25, 0.40])  # 3 seeds: not enough, whatever they say
    verdicts = {c["setting"]: c["learns_as_fp32"] for c in compare(base + same + worse + few)}
    assert verdicts == {"bf16-gen": True, "bf16": False, "bf16-fp32-head": False}
    assert MARGIN == 0.03


def _body_then_fp32_head(lm, batch):
    """Reference: the body under bf16 autocast, then logits and log-softmax in fp32, by plain autograd."""
    with torch.autocast(**BF16):
        hidden = backbone_hidden(lm.base_model, batch)
    logits = F.linear(hidden[:, :-1].float(), lm.lm_head.weight.float())
    logp = logits.log_softmax(-1).gather(-1, batch["input_ids"][:, 1:, None]).squeeze(-1)
    return F.pad(logp * batch["response_mask"][:, 1:], (1, 0))


def test_the_fp32_head_under_bf16_autocast_equals_an_fp32_head_by_autograd():
    batch = make_batch(PROMPTS, COMPLETIONS, pad_id=0)
    lm = tiny_lm()
    model = LogprobModel(lm, chunk_size=5, fp32_head=True)
    with torch.autocast(**BF16):
        logprobs, _ = model(batch)
    ref = _body_then_fp32_head(lm, batch)
    mask = batch["response_mask"].bool()
    torch.testing.assert_close(logprobs[mask], ref[mask], atol=1e-5, rtol=1e-5)
    weights = torch.randn(logprobs.shape, generator=torch.Generator().manual_seed(0)) * mask
    params = [lm.lm_head.weight, lm.model.layers[0].mlp.up_proj.weight]
    ours = torch.autograd.grad((logprobs * weights).sum(), params)
    theirs = torch.autograd.grad((ref * weights).sum(), params)
    for g, r in zip(ours, theirs):
        torch.testing.assert_close(g, r, atol=1e-5, rtol=1e-4)
    # the bf16 head is another computation: its logits rounded to bf16
    with torch.autocast(**BF16):
        rounded, _ = LogprobModel(lm, chunk_size=5, fp32_head=False)(batch)
    assert (rounded - ref)[mask].abs().max() > 10 * (logprobs - ref)[mask].abs().max()


def test_hf_generate_computes_its_head_in_fp32_when_asked(model, tokenizer, prompts):
    seen = []
    head = model.get_output_embeddings()
    hook = head.register_forward_hook(lambda m, i, out: seen.append(out.dtype))
    sampling = SamplingConfig(max_new_tokens=4, temperature=1.0, seed=0, logprobs=True)
    try:
        for fp32_head in (False, True):
            seen.clear()
            HFEngine(model, tokenizer, dtype=torch.bfloat16, fp32_head=fp32_head).generate(prompts[:2], 2, sampling)
            assert set(seen) == {torch.float32 if fp32_head else torch.bfloat16}
    finally:
        hook.remove()
    assert "forward" not in vars(head)  # the layer's own forward again


@pytest.mark.heavy
@pytest.mark.timeout(600)
def test_vllm_computes_its_head_in_fp32_when_asked(tiny_model_path, prompts):
    engine = VLLMEngine(tiny_model_path, seed=0, max_model_len=512, kv_cache_gib=1 / 16, dtype="bfloat16",
                        fp32_head=True)
    try:
        assert engine.llm.llm_engine.model_config.head_dtype == torch.float32
        out = engine.generate(prompts[:2], 2, SamplingConfig(max_new_tokens=8, temperature=1.0, seed=0, logprobs=True))
        assert len(out) == 4 and all(c.logprobs and all(lp <= 0 for lp in c.logprobs) for c in out)
    finally:
        engine.close()


@pytest.mark.heavy
@pytest.mark.timeout(600)
def test_bf16_gen_updates_as_fp32_does_and_bf16_fp32_head_as_bf16_nearly_does(tiny_model_path, tmp_path):
    # the script's own step on a fixed rollout (tests/step_equivalence.py): bf16-gen changes generation only, so its
    # update is fp32's to round-off; bf16-fp32-head computes the same update as bf16 but for the head's rounding
    from tests.step_equivalence import run_step

    steps = {p: run_step("lite_ppo", tiny_model_path, str(tmp_path / p), "--precision", p)[0]
             for p in ("fp32", "bf16-gen", "bf16", "bf16-fp32-head")}
    for k in steps["fp32"]:
        torch.testing.assert_close(steps["bf16-gen"][k], steps["fp32"][k], atol=1e-6, rtol=0)
        torch.testing.assert_close(steps["bf16-fp32-head"][k], steps["bf16"][k], atol=1e-2, rtol=0)
    head = "model.lm.lm_head.weight"
    assert (steps["bf16-fp32-head"][head] - steps["bf16"][head]).abs().max() > 0  # and they are two computations
