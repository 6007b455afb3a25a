"""The GPU path's numerics, run on CPU: bf16 autocast as the scripts use it on CUDA (fp32 master weights,
`Accelerator(mixed_precision="bf16")`), the shared-prompt forward against the plain one under eager and SDPA
attention, on-policy ratios, and a few real update steps of a script.

Tolerance. bf16 keeps 8 significant bits: each rounded value is within 2^-9 (~0.2%) of itself. A log-prob is a
logit minus a log-sum-exp over the vocabulary, each the end of a chain of rounded matmuls; two bf16 forwards that
order their sums differently (one plain pass against a prompt pass plus a completion pass on its KV cache) differ
by a few rounding steps of the largest intermediate values. Measured here (tiny Qwen3, hidden 64, |log-prob| ~5):
shared vs plain 3e-4 at most under SDPA (0 under eager), bf16 vs fp32 2e-3, old vs new log-probs 5e-4. Allowed:
0.01 on any log-prob between the two bf16 forwards (20x the measured, room for other kernels and wider models'
longer sums), 0.02 between bf16 and fp32, 0.01 on a ratio; a real error (a wrong position, a masked-out prompt
token, a wrong rotary offset) moves log-probs by O(1). fp32 passes the same checks at 1e-5 (tests/test_update.py).
"""

import json

import pytest
import torch

from common.heads import LogprobModel, compute_logprobs
from common.update import make_batch
from tests.step_equivalence import run_step
from tests.test_update import COMPLETIONS, PROMPTS, naive_logprobs

BF16 = dict(device_type="cpu", dtype=torch.bfloat16)


def tiny_lm(attn: str, seed: int = 0):
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(seed)
    config = Qwen3Config(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=1, num_key_value_heads=1, head_dim=64, max_position_embeddings=128,
                         attn_implementation=attn)
    return Qwen3ForCausalLM(config).float()  # fp32 master weights, as the scripts load them


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_shared_prompt_forward_matches_the_plain_forward_in_bf16(attn):
    batch = make_batch(PROMPTS, COMPLETIONS, pad_id=0)
    lm = tiny_lm(attn)
    assert lm.config._attn_implementation == attn
    with torch.autocast(**BF16):
        logprobs, entropy = LogprobModel(lm)(batch)
        ref, _ = naive_logprobs(lm, batch, 1.0)  # one plain forward over every full row
    assert logprobs.dtype == torch.float32  # the log-probs leave the model in fp32, whatever the autocast dtype
    with torch.no_grad():
        fp32, _ = naive_logprobs(lm, batch, 1.0)
    mask = batch["response_mask"].bool()
    shared_vs_plain = (logprobs - ref)[mask].abs()
    assert shared_vs_plain.max() < 0.01, shared_vs_plain
    assert (logprobs - fp32)[mask].abs().max() < 0.02  # bf16 against fp32
    assert (logprobs - fp32)[mask].abs().max() > 0  # and autocast really ran in bf16
    assert torch.isfinite(entropy).all()
    # gradients flow and are finite
    (grad,) = torch.autograd.grad((logprobs * mask).sum(), [lm.model.layers[0].self_attn.q_proj.weight])
    assert torch.isfinite(grad).all() and grad.abs().max() > 0


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_on_policy_ratios_are_one_in_bf16(attn):
    # old log-probs (no grad, by micro-batches) against the training forward (grad, checkpointed chunks)
    batch = make_batch(PROMPTS, COMPLETIONS, pad_id=0)
    model = LogprobModel(tiny_lm(attn))
    with torch.autocast(**BF16):
        old = compute_logprobs(model, batch, token_budget=20, temperature=1.0)  # several micro-batches
        new, _ = model(batch)
    ratio = torch.exp(new - old)[batch["response_mask"].bool()]
    assert (ratio - 1).abs().max() < 0.01, ratio


@pytest.mark.heavy
@pytest.mark.timeout(600)
@pytest.mark.parametrize("algo", ["lite_ppo", "grpo"])
def test_a_few_update_steps_in_bf16_are_finite(algo, tiny_model_path, tmp_path, monkeypatch):
    script = __import__(algo)
    dtypes, load_policy = set(), script.load_policy

    def recording_load_policy(*args, **kwargs):  # the dtype the policy's projections compute in
        path, lm, tokenizer = load_policy(*args, **kwargs)
        lm.model.layers[0].self_attn.q_proj.register_forward_hook(lambda m, i, out: dtypes.add(out.dtype))
        return path, lm, tokenizer

    monkeypatch.setattr(script, "load_policy", recording_load_policy)
    # --precision bf16: the accelerator the scripts build on CUDA (mixed_precision="bf16"), here on the CPU
    params, _ = run_step(algo, tiny_model_path, str(tmp_path), "--total-steps", "3", "--precision", "bf16")
    assert torch.bfloat16 in dtypes  # the update ran under bf16 autocast (fp32 master weights: saved as fp32)
    assert all(torch.isfinite(v).all() and v.dtype == torch.float32 for v in params.values())
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in rows if "losses/policy_loss" in r]
    assert [r["step"] for r in train] == [1, 2, 3]
    for r in train:
        for key in ("losses/policy_loss", "losses/grad_norm", "losses/approx_kl", "losses/entropy"):
            assert r[key] is not None and abs(r[key]) < 1e6, (key, r)
