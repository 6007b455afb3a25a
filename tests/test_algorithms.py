"""The algorithms' own functions against numbers computed by hand, then 2-step smoke runs of grpo.py and dapo.py.

Hand computations are in the comments next to each expected value. Ratios are set through log-probs:
logprobs = log(ratio), old_logprobs = 0.
"""

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import dapo
import grpo
import lite_ppo

ROOT = Path(__file__).resolve().parents[1]


def one_token_rows(ratios: list[float], advantages: list[float]):
    """B sequences of one response token each, with the given ratios and advantages."""
    logprobs = torch.log(torch.tensor(ratios))[:, None].requires_grad_()
    return logprobs, torch.zeros_like(logprobs), torch.tensor(advantages), torch.ones_like(logprobs)


def random_batch(seed: int = 0, rows: int = 6, width: int = 7):
    """Log-probs, old log-probs, advantages and a response mask of unequal lengths (1..width tokens)."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, width + 1, (rows,), generator=g)
    mask = (torch.arange(width)[None] < lengths[:, None]).long()
    logprobs = -torch.rand(rows, width, generator=g) * 2
    old = logprobs + 0.3 * torch.randn(rows, width, generator=g)
    return logprobs * mask, old * mask, torch.randn(rows, generator=g), mask


# ---------------------------------------------------------------------------------------------------- GRPO


def test_grpo_advantages_group_mean_and_unbiased_group_std():
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 1.0])
    # group 1: mean .5, unbiased std sqrt(4 * .25 / 3) = 0.57735 -> +-.5 / .57735 = +-0.86603
    # group 2: all equal -> 0 (not NaN)
    # group 3: mean .25, unbiased std sqrt((3 * .0625 + .5625) / 3) = .5 -> -.25 / .5 = -.5, .75 / .5 = 1.5
    expected = [0.86603, -0.86603, -0.86603, 0.86603, 0, 0, 0, 0, -0.5, -0.5, -0.5, 1.5]
    torch.testing.assert_close(grpo.compute_advantages(rewards, 4), torch.tensor(expected), atol=1e-4, rtol=0)
    assert not grpo.compute_advantages(torch.zeros(8), 4).isnan().any()


def test_grpo_k3_kl_by_hand():
    # one token, ratio 1 and advantage 0 (no policy term); logp = log .5, ref = log .25:
    # ref - logp = log .5 = -0.693147; exp(-0.693147) - (-0.693147) - 1 = 0.5 + 0.693147 - 1 = 0.193147
    logprobs, adv, mask = torch.full((1, 1), math.log(0.5)), torch.zeros(1), torch.ones(1, 1)
    loss, stats = grpo.policy_loss(logprobs, logprobs, adv, mask, grpo.Args(), ref_logprobs=torch.full((1, 1), math.log(0.25)))
    assert stats["losses/kl"] == pytest.approx(0.193147, abs=1e-6)
    assert loss.item() == pytest.approx(0.04 * 0.193147, abs=1e-7)  # beta = 0.04 (DeepSeekMath)
    # the reference itself: KL 0; no reference: no KL term, no stat
    _, stats = grpo.policy_loss(logprobs, logprobs, adv, mask, grpo.Args(), ref_logprobs=logprobs)
    assert stats["losses/kl"] == 0
    assert "losses/kl" not in grpo.policy_loss(logprobs, logprobs, adv, mask, grpo.Args())[1]


@pytest.mark.parametrize("script", [grpo, lite_ppo])
def test_symmetric_clipping_at_both_ends(script):
    # clip 0.2; per-token loss -min(r A, clip(r, .8, 1.2) A):
    #   A=+1, r=1.5: -min(1.5, 1.2)   = -1.2   clipped (no gradient)
    #   A=-1, r=0.5: -min(-.5, -.8)   =  0.8   clipped (no gradient)
    #   A=+1, r=0.5: -min(.5, .8)     = -0.5   gradient -A r = -0.5
    #   A=-1, r=1.5: -min(-1.5, -1.2) =  1.5   gradient -A r = 1.5
    # one token per sequence: both aggregations are the plain mean, (-1.2 + .8 - .5 + 1.5) / 4 = 0.15
    logprobs, old, adv, mask = one_token_rows([1.5, 0.5, 0.5, 1.5], [1.0, -1.0, 1.0, -1.0])
    loss, stats = script.policy_loss(logprobs, old, adv, mask, script.Args(clip_eps=0.2))
    assert loss.item() == pytest.approx(0.15, abs=1e-6)
    assert stats["losses/clipfrac"] == pytest.approx(0.5)
    (grad,) = torch.autograd.grad(loss, logprobs)
    torch.testing.assert_close(grad.flatten(), torch.tensor([0.0, 0.0, -0.5, 1.5]) / 4)


def test_grpo_sequence_mean_differs_from_token_mean_on_unequal_lengths():
    # ratio 1, so each token's loss is -A: a 1-token sequence with A=+1, a 3-token sequence with A=-1
    # GRPO: mean over sequences of token means = (-1 + 1) / 2 = 0; token level: (-1 + 3) / 4 = 0.5
    mask = torch.tensor([[1, 0, 0], [1, 1, 1]])
    logprobs = torch.zeros(2, 3)
    adv = torch.tensor([1.0, -1.0])
    assert grpo.policy_loss(logprobs, logprobs, adv, mask, grpo.Args())[0].item() == pytest.approx(0.0, abs=1e-6)
    assert lite_ppo.policy_loss(logprobs, logprobs, adv, mask, lite_ppo.Args())[0].item() == pytest.approx(0.5)
    assert dapo.policy_loss(logprobs, logprobs, adv, mask, dapo.Args())[0].item() == pytest.approx(0.5)


@pytest.mark.parametrize("script,count", [(grpo, "num_seqs"), (lite_ppo, "num_tokens"), (dapo, "num_tokens")])
def test_micro_batched_losses_and_stats_add_up_to_the_full_batch(script, count):
    logprobs, old, adv, mask = random_batch()
    kw = {"ref_logprobs": old - 0.2} if script is grpo else {}
    full_loss, full_stats = script.policy_loss(logprobs, old, adv, mask, script.Args(), **kw)
    total = {"num_seqs": mask.shape[0], "num_tokens": mask.sum().item()}[count]
    parts = [script.policy_loss(logprobs[i], old[i], adv[i], mask[i], script.Args(), **{k: v[i] for k, v in kw.items()},
                                **{count: total}) for i in (slice(0, 1), slice(1, 4), slice(4, 6))]
    assert sum(loss.item() for loss, _ in parts) == pytest.approx(full_loss.item(), abs=1e-6)
    for key, value in full_stats.items():
        assert sum(stats[key] for _, stats in parts) == pytest.approx(value, abs=1e-6), key


# ---------------------------------------------------------------------------------------------------- Lite PPO


def test_lite_ppo_advantages_group_mean_batch_std():
    # group means .5 and 1 -> centered [.5, -.5, -.5, .5, 0, 0, 0, 0]
    # batch: six 1s, two 0s, mean .75, unbiased var (6 * .0625 + 2 * .5625) / 7 = 1.5 / 7 -> std 0.46291
    # .5 / 0.46291 = 1.08012
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 1.0])
    expected = torch.tensor([1.08012, -1.08012, -1.08012, 1.08012, 0, 0, 0, 0])
    torch.testing.assert_close(lite_ppo.compute_advantages(rewards, 4), expected, atol=1e-4, rtol=0)
    assert not lite_ppo.compute_advantages(torch.ones(8), 4).isnan().any()


def test_lite_ppo_token_level_aggregation_by_hand():
    # ratio 1: token losses -A; row 1: 2 tokens, A=2; row 2: 1 token, A=-1 -> (-2 - 2 + 1) / 3 = -1
    mask = torch.tensor([[1, 1], [1, 0]])
    logprobs = torch.zeros(2, 2)
    loss, _ = lite_ppo.policy_loss(logprobs, logprobs, torch.tensor([2.0, -1.0]), mask, lite_ppo.Args())
    assert loss.item() == pytest.approx(-1.0)


def test_lite_ppo_token_level_loss_of_a_fully_filtered_batch_is_0_not_nan():
    # --overlong-filter can mask every response token of a batch: the loss, its stats and its gradient are 0, not NaN
    logprobs, old, adv, mask = random_batch(seed=2)
    logprobs.requires_grad_(True)
    loss, stats = lite_ppo.policy_loss(logprobs, old, adv, mask * 0, lite_ppo.Args(overlong_filter=True))
    loss.backward()
    assert loss.item() == 0 and stats["losses/clipfrac"] == 0 and not logprobs.grad.isnan().any()


# ---------------------------------------------------------------------------------------------------- DAPO


def test_dapo_clip_higher_asymmetric_bounds():
    # clip to [1 - .2, 1 + .28] = [.8, 1.28]:
    #   A=+1, r=1.5:  -min(1.5, 1.28)  = -1.28  clipped at the higher upper bound
    #   A=+1, r=1.25: -min(1.25, 1.25) = -1.25  inside [.8, 1.28] (GRPO's 1.2 would clip it)
    #   A=-1, r=0.5:  -min(-.5, -.8)   =  0.8   clipped at the unchanged lower bound
    #   A=-1, r=0.75: -min(-.75, -.8)  =  0.8   clipped too (.75 < .8)
    # token level, one token each: (-1.28 - 1.25 + .8 + .8) / 4 = -0.2325
    logprobs, old, adv, mask = one_token_rows([1.5, 1.25, 0.5, 0.75], [1.0, 1.0, -1.0, -1.0])
    loss, stats = dapo.policy_loss(logprobs, old, adv, mask, dapo.Args())
    assert (dapo.Args().clip_eps_low, dapo.Args().clip_eps_high) == (0.2, 0.28)
    assert loss.item() == pytest.approx(-0.2325, abs=1e-6)
    assert stats["losses/clipfrac"] == pytest.approx(0.75)
    (grad,) = torch.autograd.grad(loss, logprobs)
    torch.testing.assert_close(grad.flatten(), torch.tensor([0.0, -1.25, 0.0, 0.0]) / 4)


def test_dapo_overlong_penalty_at_each_boundary():
    # max_len 20, cache 4: free up to 16, then (16 - len) / 4 down to -1 at 20, -1 beyond
    lengths = torch.tensor([1, 16, 17, 18, 19, 20, 21, 50])
    expected = torch.tensor([0.0, 0.0, -0.25, -0.5, -0.75, -1.0, -1.0, -1.0])
    torch.testing.assert_close(dapo.overlong_penalty(lengths, 20, 4), expected)
    # no cache: nothing is punished inside max_len
    torch.testing.assert_close(dapo.overlong_penalty(lengths, 20, 0), torch.tensor([0.0] * 6 + [-1.0, -1.0]))


def test_dapo_keep_informative_groups():
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0])
    assert dapo.keep_informative_groups(rewards, 4).tolist() == [True, False, False, True]
    assert dapo.keep_informative_groups(torch.tensor([0.5, 0.5, -1.0, -1.0]), 2).tolist() == [False, False]


def test_dapo_overlong_filter_masks_truncated_samples():
    logprobs, old, adv, mask = random_batch(seed=1)
    truncated = torch.tensor([True, False, False, True, False, False])
    filtered = dapo.mask_truncated(mask, truncated)
    assert filtered[truncated].sum() == 0 and torch.equal(filtered[~truncated], mask[~truncated])
    # the loss over the filtered mask is the loss of the untruncated rows alone (their tokens, their count)
    loss, _ = dapo.policy_loss(logprobs, old, adv, filtered, dapo.Args())
    alone, _ = dapo.policy_loss(logprobs[~truncated], old[~truncated], adv[~truncated], mask[~truncated], dapo.Args())
    assert loss.item() == pytest.approx(alone.item(), abs=1e-6)
    # every sample truncated: loss 0, not NaN
    assert dapo.policy_loss(logprobs, old, adv, mask * 0, dapo.Args())[0].item() == 0


def stub_round(rewards_per_round: list[list[float]], group_size: int, calls: list[int]):
    """generate_round for sample_informative_groups: round r returns the rewards given for it (cycling)."""
    def generate_round(r: int):
        calls.append(r)
        rewards = torch.tensor(rewards_per_round[r % len(rewards_per_round)])
        groups = len(rewards) // group_size
        prompts = [[100 * r + g] for g in range(groups)]  # prompt ids name (round, group)
        return prompts, [f"r{r}g{i // group_size}s{i % group_size}" for i in range(len(rewards))], rewards
    return generate_round


def test_dapo_dynamic_sampling_stops_after_max_rounds_when_nothing_is_informative():
    calls = []
    prompts, completions, accuracy, stats = dapo.sample_informative_groups(
        stub_round([[0, 0, 1, 1]], 2, calls), num_groups=2, group_size=2, max_rounds=3)
    assert calls == [0, 1, 2]
    assert (prompts, completions, accuracy.tolist()) == ([], [], [])
    assert stats["rollout/gen_rounds"] == 3 and stats["rollout/groups_generated"] == 6 and stats["rollout/groups_kept"] == 0
    assert stats["rollout/solve_none_frac"] == 0.5 and stats["rollout/solve_all_frac"] == 0.5


def test_dapo_dynamic_sampling_fills_the_batch_then_stops():
    # round 0: groups [mixed, all 0]; round 1: [mixed, mixed]: 2 groups needed -> round 0's first, round 1's first
    calls = []
    prompts, completions, accuracy, stats = dapo.sample_informative_groups(
        stub_round([[1, 0, 0, 0], [0, 1, 1, 0], [0, 1, 0, 1]], 2, calls), num_groups=2, group_size=2, max_rounds=5)
    assert calls == [0, 1]
    assert prompts == [[0], [100]] and completions == ["r0g0s0", "r0g0s1", "r1g0s0", "r1g0s1"]
    assert accuracy.tolist() == [1, 0, 0, 1]
    assert stats["rollout/gen_rounds"] == 2 and stats["rollout/groups_generated"] == 4 and stats["rollout/groups_kept"] == 2
    assert stats["rollout/generated_accuracy"] == pytest.approx(3 / 8)


def test_dapo_dynamic_sampling_short_batch_divides_into_mini_batches():
    # 3 of 4 groups kept after the last round; 4 mini-batches of G=2 samples need an even number of groups -> 2
    calls = []
    prompts, completions, accuracy, stats = dapo.sample_informative_groups(
        stub_round([[1, 0, 1, 0, 1, 0, 1, 1]], 2, calls), num_groups=4, group_size=2, max_rounds=1, num_mini_batches=4)
    assert len(prompts) == 2 and len(completions) == 4 and len(accuracy) == 4 and stats["rollout/groups_kept"] == 2


def test_dapo_main_skips_the_update_when_nothing_is_kept_and_draws_extra_prompts_past_the_run(
        tiny_model_path, tmp_path, monkeypatch):
    """In process, with the reward stubbed: step 1's two rounds are all wrong (no update), step 2's first round
    has mixed groups (an update, with overlong filtering on); extra rounds draw data step `step + r * total_steps`."""
    calls, data_steps = [], []
    real_batch_indices = dapo.batch_indices

    def fake_reward(texts, answers):
        calls.append(len(texts))
        return [float(len(calls) > 2 and i % 2 == 0) for i in range(len(texts))]  # rounds 1-2 all 0, then mixed

    def recording_batch_indices(num_rows, batch_size, seed, step):
        data_steps.append(step)
        return real_batch_indices(num_rows, batch_size, seed, step)

    monkeypatch.setattr(dapo, "batch_math_reward", fake_reward)
    monkeypatch.setattr(dapo, "batch_indices", recording_batch_indices)
    args = dapo.Args(model=tiny_model_path, backend="hf", total_steps=2, prompts_per_step=2, group_size=2, max_new_tokens=6,
                     eval_size=2, max_gen_rounds=2, overlong_filter=True, output_dir=str(tmp_path), run_name="inproc")
    dapo.main(args)
    def strict(constant):
        raise ValueError(f"metrics.jsonl holds {constant}: not JSON")

    rows = [json.loads(line, parse_constant=strict) for line in (tmp_path / "inproc/metrics.jsonl").read_text().splitlines()]
    train = [r for r in rows if "rollout/gen_rounds" in r]
    assert train[0]["rollout/reward_mean"] is None  # a mean over no kept sample: null, not NaN
    assert data_steps == [0, 2, 1]  # step 0: rounds 0 and 1 (0 + 1 * 2); step 1: round 0 only
    assert train[0]["rollout/gen_rounds"] == 2 and train[0]["rollout/groups_kept"] == 0
    assert "losses/policy_loss" not in train[0] and "losses/grad_norm" not in train[0]  # no update
    assert train[1]["rollout/gen_rounds"] == 1 and train[1]["rollout/groups_kept"] == 2
    assert "losses/policy_loss" in train[1]
    assert (tmp_path / "inproc/checkpoints/step-2/model/config.json").exists()


# ---------------------------------------------------------------------------------------------------- smoke runs


@pytest.mark.heavy
@pytest.mark.parametrize("script,keys", [
    ("grpo", ["losses/kl"]),
    ("dapo", ["rollout/gen_rounds", "rollout/groups_generated", "rollout/groups_kept", "rollout/generated_accuracy"]),
])
def test_two_step_smoke_run(script, keys, tiny_model_path, tmp_path):
    cmd = [sys.executable, str(ROOT / f"{script}.py"), "--model", tiny_model_path, "--backend", "hf", "--total-steps", "2",
           "--prompts-per-step", "4", "--group-size", "4", "--max-new-tokens", "12", "--eval-size", "8",
           "--output-dir", str(tmp_path), "--run-name", "smoke"]
    result = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    rows = [json.loads(line) for line in (tmp_path / "smoke/metrics.jsonl").read_text().splitlines()]
    train = [r for r in rows if "rollout/reward_mean" in r]
    assert [r["step"] for r in train] == [1, 2]
    for key in ["rollout/reward_mean", "rollout/truncated_frac", "charts/learning_rate", "time/generation", *keys]:
        assert all(key in r for r in train), key
    if script == "grpo":  # dapo may skip an update when the tiny model's groups are all wrong
        assert all("losses/policy_loss" in r and "losses/entropy" in r for r in train)
    assert [r["step"] for r in rows if "eval/accuracy" in r] == [0, 2]
    assert (tmp_path / "smoke/checkpoints/step-2/model/config.json").exists()
    assert "held-out accuracy" in result.stdout


@pytest.mark.heavy
@pytest.mark.parametrize("script", ["lite_ppo", "grpo", "dapo", "ppo_vanilla"])
def test_eval_size_0_says_there_is_no_held_out_evaluation_and_logs_none(script, tiny_model_path, tmp_path):
    cmd = [sys.executable, str(ROOT / f"{script}.py"), "--model", tiny_model_path, "--backend", "hf", "--total-steps", "1",
           "--prompts-per-step", "2", "--group-size", "2", "--max-new-tokens", "8", "--eval-size", "0",
           "--output-dir", str(tmp_path), "--run-name", "no_eval"]
    result = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "no held-out evaluation (0 held-out problems)" in result.stdout
    assert "held-out accuracy" not in result.stdout  # no 0.000 measured on nothing
    assert f"run in {tmp_path / 'no_eval'}" in result.stdout
    rows = [json.loads(line) for line in (tmp_path / "no_eval/metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if "rollout/reward_mean" in r] == [1]
    assert not any(k.startswith("eval/") for r in rows for k in r)
