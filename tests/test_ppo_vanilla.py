"""ppo_vanilla.py: GAE, whitening, value and policy losses by hand; a smoke run, and resume restoring the critic."""

import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from common.model import load_policy
from common.run import load_checkpoint, save_checkpoint
from common.heads import LogprobModel, ValueModel, compute_values
from common.update import build_optimizer, make_batch, policy_stats
from ppo_vanilla import Args, compute_gae, last_token_rewards, policy_loss, value_loss, whiten

ROOT = Path(__file__).resolve().parents[1]


def test_last_token_rewards():
    mask = torch.tensor([[0, 1, 1, 0], [1, 1, 1, 1]])
    assert last_token_rewards(torch.tensor([2.0, 3.0]), mask).tolist() == [[0, 0, 2, 0], [0, 0, 0, 3]]


def test_gae_by_hand():
    # row 0: 2 prompt tokens, 3 response tokens (t = 2, 3, 4), 1 padding; gamma 0.9, lambda 0.8.
    # Prompt and padding values are 9 (garbage the recursion must skip). Rewards: -0.1 at t=3 (a KL
    # penalty, say) and the math reward 1.0 at the last token t=4.
    #   delta_4 = 1.0 + 0.9 * 0 - 0.2 = 0.8                  (no bootstrap after the last token)
    #   delta_3 = -0.1 + 0.9 * 0.2 - 0.4 = -0.32
    #   delta_2 = 0.0 + 0.9 * 0.4 - 0.5 = -0.14
    #   A_4 = 0.8;  A_3 = -0.32 + 0.72 * 0.8 = 0.256;  A_2 = -0.14 + 0.72 * 0.256 = 0.04432
    #   R_t = A_t + V_t: 0.54432, 0.656, 1.0
    mask = torch.tensor([[0, 0, 1, 1, 1, 0]])
    values = torch.tensor([[9.0, 9.0, 0.5, 0.4, 0.2, 9.0]])
    rewards = torch.tensor([[0.0, 0.0, 0.0, -0.1, 1.0, 0.0]])
    advantages, returns = compute_gae(rewards, values, mask, gamma=0.9, lam=0.8)
    torch.testing.assert_close(advantages, torch.tensor([[0, 0, 0.04432, 0.256, 0.8, 0]]))
    torch.testing.assert_close(returns, torch.tensor([[0, 0, 0.54432, 0.656, 1.0, 0]]))


def test_gae_with_gamma_and_lambda_one_is_reward_minus_value():
    # ORZ's setting: A_t = sum of the rewards from t on - V_t = R - V_t; returns = R at every response token
    mask = torch.tensor([[0, 1, 1, 1, 1, 0, 0], [0, 0, 0, 1, 1, 1, 0]])
    values = torch.tensor([[5.0, 0.1, 0.3, 0.6, 0.9, 5.0, 5.0], [5.0, 5.0, 5.0, 0.2, -0.4, 0.0, 5.0]])
    token_rewards = last_token_rewards(torch.tensor([1.0, 0.0]), mask)
    advantages, returns = compute_gae(token_rewards, values, mask, gamma=1.0, lam=1.0)
    torch.testing.assert_close(advantages, torch.tensor([[0, 0.9, 0.7, 0.4, 0.1, 0, 0], [0, 0, 0, -0.2, 0.4, 0, 0]]))
    torch.testing.assert_close(returns, mask.float() * torch.tensor([[1.0], [0.0]]))


def test_whiten_uses_response_tokens_only():
    # response tokens 1, 2, 3 and 5: mean 2.75, squared deviations 3.0625 + 0.5625 + 0.0625 + 5.0625 = 8.75,
    # unbiased variance 8.75 / 3; the 100s sit on prompt/padding positions and must change nothing
    advantages = torch.tensor([[100.0, 1.0, 2.0, 3.0], [5.0, 100.0, 100.0, 100.0]])
    mask = torch.tensor([[0, 1, 1, 1], [1, 0, 0, 0]])
    std = math.sqrt(8.75 / 3)
    expected = torch.tensor([[0, -1.75 / std, -0.75 / std, 0.25 / std], [2.25 / std, 0, 0, 0]])
    torch.testing.assert_close(whiten(advantages, mask, eps=0.0), expected)


def test_value_loss_clipped_and_unclipped_by_hand():
    # clip range c = 0.2 around V_old; per token 0.5 * max((V - R)^2, (clip(V) - R)^2):
    #   t1  V 0.5, V_old 0.4, R 1.0: inside the range, 0.5 * 0.25 = 0.125         (grad V - R = -0.5)
    #   t2  V 1.0, V_old 0.5, R 0.0: clip(V) = 0.7, max(1.0, 0.49) = 1.0 -> 0.5   (unclipped wins: grad 1.0)
    #   t3  V 1.0, V_old 0.5, R 2.0: clip(V) = 0.7, max(1.0, 1.69) = 1.69 -> 0.845 (clipped wins: grad 0)
    #   t0  prompt token, excluded.  loss = (0.125 + 0.5 + 0.845) / 3 = 0.49
    values = torch.tensor([[7.0, 0.5, 1.0, 1.0]], requires_grad=True)
    old_values = torch.tensor([[0.0, 0.4, 0.5, 0.5]])
    returns = torch.tensor([[0.0, 1.0, 0.0, 2.0]])
    mask = torch.tensor([[0, 1, 1, 1]])
    loss = value_loss(values, old_values, returns, mask, Args(value_clip=0.2))
    assert loss.item() == pytest.approx(0.49)
    loss.backward()
    torch.testing.assert_close(values.grad, torch.tensor([[0.0, -0.5 / 3, 1.0 / 3, 0.0]]))
    # micro-batching: the same token sums over the global batch's token count
    assert value_loss(values, old_values, returns, mask, Args(value_clip=0.2), num_tokens=6).item() == pytest.approx(1.47 / 6)


def test_policy_loss_clips_both_ends_with_per_token_advantages():
    # one row: a prompt token, then 4 response tokens with their own advantages; clip 0.2
    #   a  ratio 1.5, A +1: max(-1.5, -1.2) = -1.2   clipped (upper end), no gradient
    #   b  ratio 0.5, A -1: max( 0.5,  0.8) =  0.8   clipped (lower end), no gradient
    #   c  ratio 1.5, A -2: max( 3.0,  2.4) =  3.0   unclipped: d/dlogp = -A * ratio / 4 = 0.75
    #   d  ratio 0.5, A +2: max(-1.0, -1.6) = -1.0   unclipped: d/dlogp = -1.0 / 4 = -0.25
    #   loss = (-1.2 + 0.8 + 3.0 - 1.0) / 4 = 0.4; clipfrac 2 / 4
    old_logprobs = torch.tensor([[0.0, -1.0, -1.0, -1.0, -1.0]])
    ratios = torch.tensor([[1.0, 1.5, 0.5, 1.5, 0.5]])
    logprobs = (old_logprobs + ratios.log()).requires_grad_(True)
    advantages = torch.tensor([[9.0, 1.0, -1.0, -2.0, 2.0]])
    mask = torch.tensor([[0, 1, 1, 1, 1]])
    loss, stats = policy_loss(logprobs, old_logprobs, advantages, mask, Args(clip_eps=0.2))
    assert loss.item() == pytest.approx(0.4)
    assert stats["losses/clipfrac"] == pytest.approx(0.5)
    kl_a, kl_b = 0.5 - math.log(1.5), -0.5 - math.log(0.5)  # (ratio - 1) - log ratio
    kl = policy_stats(logprobs.detach(), old_logprobs, torch.zeros_like(mask), mask, num_tokens=4)["losses/approx_kl"]
    assert kl == pytest.approx((kl_a + kl_b) / 2)  # the loop's KL estimate of the same tokens
    loss.backward()
    torch.testing.assert_close(logprobs.grad, torch.tensor([[0.0, 0.0, 0.0, 0.75, -0.25]]))


def test_critic_checkpoint_restores_weights_optimizer_and_schedule(tiny_model_path, tmp_path):
    # The script's setup order (policy, then critic, each prepared with its optimizer, schedulers registered);
    # one critic step, save, then a fresh setup loads the checkpoint. Deterministic whatever the rewards
    # (the tiny model almost never solves a problem, so a run's critic may never move).
    from accelerate import Accelerator

    def setup():
        accelerator = Accelerator(cpu=True)
        _, lm, tokenizer = load_policy(tiny_model_path)
        model = LogprobModel(lm)
        optimizer, scheduler = build_optimizer(model, 1e-3, 0.0, 2, 10, "cosine")
        model, optimizer = accelerator.prepare(model, optimizer)
        accelerator.register_for_checkpointing(scheduler)
        critic = ValueModel(load_policy(tiny_model_path)[1])
        critic_optimizer, critic_scheduler = build_optimizer(critic, 1e-2, 0.0, 2, 10, "cosine")
        critic, critic_optimizer = accelerator.prepare(critic, critic_optimizer)
        accelerator.register_for_checkpointing(critic_scheduler)
        return accelerator, model, tokenizer, critic, critic_optimizer, critic_scheduler

    accelerator, model, tokenizer, critic, critic_optimizer, critic_scheduler = setup()
    args = Args()
    batch = make_batch([[5, 6, 7], [8, 9]], [[10, 11, 12], [13]], pad_id=0)
    batch["old_values"] = compute_values(critic, batch, 10**6)
    batch["returns"] = batch["response_mask"] * torch.tensor([[1.0], [-1.0]])

    for _ in range(2):  # two critic steps, as the script's loop takes them
        loss = value_loss(critic(batch), batch["old_values"], batch["returns"], batch["response_mask"], args)
        accelerator.backward(loss)
        critic_optimizer.step()
        critic_scheduler.step()
        critic_optimizer.zero_grad(set_to_none=True)
    trained = {k: v.clone() for k, v in accelerator.unwrap_model(critic).state_dict().items()}
    assert trained["head.weight"].abs().max() > 0  # the zero-init head moved
    ckpt = save_checkpoint(accelerator, tmp_path, 2, model, tokenizer, args, keep=1)
    assert (ckpt / "state" / "model_1.safetensors").exists() and (ckpt / "state" / "optimizer_1.bin").exists()

    accelerator, model, tokenizer, critic, critic_optimizer, critic_scheduler = setup()
    assert accelerator.unwrap_model(critic).head.weight.abs().max() == 0  # fresh
    assert load_checkpoint(accelerator, ckpt) == 2
    for k, v in accelerator.unwrap_model(critic).state_dict().items():
        assert torch.equal(v, trained[k]), k
    state = critic_optimizer.state_dict()["state"]
    assert state and all(float(s["step"]) == 2 and s["exp_avg"].abs().max() > 0 for s in state.values())
    assert critic_scheduler.last_epoch == 2 and critic_scheduler.get_last_lr()[0] == pytest.approx(1e-2)


def tiny_args(model: str, out: Path, name: str, *extra: str) -> list[str]:
    return [sys.executable, str(ROOT / "ppo_vanilla.py"), "--model", model, "--output-dir", str(out), "--run-name", name,
            "--backend", "hf", "--prompts-per-step", "4", "--group-size", "4", "--max-new-tokens", "12",
            "--eval-size", "8", "--learning-rate", "1e-3", "--critic-learning-rate", "1e-2", *extra]


def self_graded_problems(model_path: str, path: Path, n: int = 4) -> Path:
    """n arithmetic questions; gold = the tiny model's own greedy answer for the first half, a wrong one for the rest.

    The tiny model almost never solves a problem (no reward, so no gradient, in a short run). Sampled near-greedily
    (--temperature 0.05), these give mixed rewards at step 1, so the policy and the critic both learn from step 1 on.
    """
    from common.data import load_rows, tokenize_prompts
    from common.generation import HFEngine, SamplingConfig
    from common.grader import extract_answer

    _, lm, tokenizer = load_policy(model_path)
    questions = [r["question"] for r in load_rows("arithmetic")[:16]]
    completions = HFEngine(lm, tokenizer).generate(tokenize_prompts(tokenizer, questions, "chat"), 1,
                                                   SamplingConfig(max_new_tokens=12, temperature=0.0))
    graded = [(q, a) for q, c in zip(questions, completions) if (a := extract_answer(c.text)) is not None][:n]
    assert len(graded) == n
    path.write_text("".join(json.dumps({"question": q, "answer": a if i < n // 2 else "-987654321"}) + "\n"
                            for i, (q, a) in enumerate(graded)))
    return path


def run(cmd: list[str], timeout: int = 600) -> subprocess.CompletedProcess:
    result = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, result.stderr[-3000:]
    return result


@pytest.mark.heavy
@pytest.mark.timeout(900)
def test_two_step_smoke_run_then_resume_restores_the_critic(tiny_model_path, tmp_path):
    # --kl-coef > 0 also runs the frozen reference policy and the per-token KL penalty (nonzero from step 2)
    data = str(self_graded_problems(tiny_model_path, tmp_path / "problems.jsonl"))
    common = ("--total-steps", "2", "--save-every", "1", "--keep-checkpoints", "2", "--kl-coef", "0.05",
              "--dataset", data, "--temperature", "0.05")
    run(tiny_args(tiny_model_path, tmp_path, "smoke", *common))
    rows = [json.loads(line) for line in (tmp_path / "smoke/metrics.jsonl").read_text().splitlines()]
    train = [r for r in rows if "losses/policy_loss" in r]
    assert [r["step"] for r in train] == [1, 2]
    assert 0 < train[0]["rollout/reward_mean"] < 1, "the self-graded problems should give mixed rewards at step 1"
    assert train[0]["losses/grad_norm"] > 0 and train[0]["losses/value_grad_norm"] > 0  # both models learn from step 1
    for key in ("losses/value_loss", "losses/value_clipfrac", "losses/value_grad_norm", "losses/explained_variance",
                "rollout/value_mean", "losses/clipfrac", "losses/entropy", "rollout/reward_mean", "time/training"):
        assert key in train[-1], key
    ckpt = tmp_path / "smoke/checkpoints/step-2"
    # the policy in HF format, nothing of the critic in it; the critic in the accelerate state
    policy = load_file(ckpt / "model/model.safetensors")
    assert policy.keys() == load_file(Path(tiny_model_path) / "model.safetensors").keys()
    critic = load_file(ckpt / "state/model_1.safetensors")
    assert "head.weight" in critic and any(k.startswith("backbone.") for k in critic)
    for name in ("optimizer_1.bin", "custom_checkpoint_1.pkl"):
        assert (ckpt / "state" / name).exists(), name
    assert load_file(tmp_path / "smoke/checkpoints/step-1/state/model_1.safetensors")["head.weight"].abs().max() > 0

    # resume from step 1 in a copy of the run: step 2 must end bitwise where the uninterrupted run did,
    # for the critic (weights and Adam moments) as for the policy
    shutil.copytree(tmp_path / "smoke", tmp_path / "resumed")
    shutil.rmtree(tmp_path / "resumed/checkpoints/step-2")
    result = run(tiny_args(tiny_model_path, tmp_path, "resumed", *common, "--resume"))
    assert "resumed from" in result.stdout
    again = tmp_path / "resumed/checkpoints/step-2/state"
    for name in ("model.safetensors", "model_1.safetensors"):
        a, b = load_file(ckpt / "state" / name), load_file(again / name)
        assert all(torch.equal(a[k], b[k]) for k in a), name
    a = torch.load(ckpt / "state/optimizer_1.bin", weights_only=False)["state"]
    b = torch.load(again / "optimizer_1.bin", weights_only=False)["state"]
    assert a.keys() == b.keys() and all(torch.equal(a[i][k], b[i][k]) for i in a for k in a[i])


@pytest.mark.heavy
def test_bad_critic_flag_fails_before_any_model_is_loaded(tiny_model_path, tmp_path):
    result = subprocess.run(tiny_args(tiny_model_path, tmp_path, "bad", "--gamma", "1.5"), cwd=ROOT,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode != 0 and "--gamma 1.5" in result.stderr
    assert "Loading weights" not in result.stderr
