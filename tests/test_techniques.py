"""The paper's techniques as switches of lite_ppo.py: each value against numbers by hand, the switches set to
GRPO's and DAPO's choices against grpo.py and dapo.py, and the combinations that change a statistic's level or
the aggregation exact under micro-batching and two processes."""

import json
import math
from types import SimpleNamespace

import pytest
import torch

import dapo
import lite_ppo
from tests.step_equivalence import run_step
from tests.test_update import two_process_step

# two groups of 4: one correct of 4, two correct of 4
REWARDS = torch.tensor([1.0, 0, 0, 0, 1, 1, 0, 0])


def by_hand(mean_level: str, std_level: str) -> list[float]:
    group_mean = [0.25] * 4 + [0.5] * 4
    batch_mean = 3 / 8
    # unbiased stds: group 1: ((0.75^2 + 3 * 0.25^2) / 3)^0.5 = 0.5; group 2: (4 * 0.5^2 / 3)^0.5 = 1 / sqrt(3)
    group_std = [0.5] * 4 + [1 / math.sqrt(3)] * 4
    batch_std = math.sqrt((3 * 0.625**2 + 5 * 0.375**2) / 7)
    mean = group_mean if mean_level == "group" else [batch_mean] * 8
    scale = {"group": group_std, "batch": [batch_std] * 8, "none": [1.0] * 8}[std_level]
    return [(r - m) / s for r, m, s in zip(REWARDS.tolist(), mean, scale)]


@pytest.mark.parametrize("mean_level", ["group", "batch"])
@pytest.mark.parametrize("std_level", ["batch", "group", "none"])
def test_advantages_at_each_level_match_the_formulas_by_hand(mean_level, std_level):
    adv = lite_ppo.compute_advantages(REWARDS, 4, eps=0.0, mean_level=mean_level, std_level=std_level)
    assert adv.tolist() == pytest.approx(by_hand(mean_level, std_level), abs=1e-6)


def test_the_default_advantage_is_lite_ppos_group_mean_over_batch_std():
    assert lite_ppo.compute_advantages(REWARDS, 4, eps=0.0).tolist() == pytest.approx(by_hand("group", "batch"), abs=1e-6)
    # a uniform group gets 0 at every level that centers on the group, never NaN
    uniform = torch.tensor([1.0, 1, 1, 1, 1, 0, 0, 0])
    for std_level in ("batch", "group", "none"):
        adv = lite_ppo.compute_advantages(uniform, 4, std_level=std_level)
        assert adv[:4].tolist() == [0.0] * 4 and not adv.isnan().any()
    # the batch mean gives a uniform group a signal: all right in a batch that is mostly wrong is above average
    assert (lite_ppo.compute_advantages(uniform, 4, mean_level="batch")[:4] > 0).all()


def loss_args(**kw):
    return SimpleNamespace(**{"clip_eps": 0.2, "clip_eps_high": None, "loss_agg": "token", **kw})


def test_token_and_sequence_aggregation_by_hand():
    # two rows: 1 token and 3 tokens, advantages +1 and -1, on-policy (ratio 1): per-token loss -1 | +1 +1 +1
    mask = torch.tensor([[1.0, 0, 0], [1, 1, 1]])
    logprobs = torch.zeros(2, 3, requires_grad=True)
    adv = torch.tensor([1.0, -1.0])
    token, _ = lite_ppo.policy_loss(logprobs, logprobs.detach(), adv, mask, loss_args())
    seq, _ = lite_ppo.policy_loss(logprobs, logprobs.detach(), adv, mask, loss_args(loss_agg="seq"))
    assert token.item() == pytest.approx((-1 + 3) / 4)  # 1 / (all tokens): the long answer weighs 3x
    assert seq.item() == pytest.approx((-1 / 1 + 3 / 3) / 2, abs=1e-6)  # each sequence's mean, averaged: 0
    # the global denominators, as the loop passes them: 8 tokens, 4 sequences
    token, _ = lite_ppo.policy_loss(logprobs, logprobs.detach(), adv, mask, loss_args(), num_tokens=8)
    seq, _ = lite_ppo.policy_loss(logprobs, logprobs.detach(), adv, mask, loss_args(loss_agg="seq"), num_seqs=4)
    assert (token.item(), seq.item()) == pytest.approx((2 / 8, 0.0), abs=1e-6)


def test_clip_higher_raises_only_the_upper_bound():
    # ratio 1.25 (positive advantage: the upper bound acts) and 0.75 (negative advantage: the lower bound acts)
    old = torch.zeros(2, 1)
    logprobs = torch.log(torch.tensor([[1.25], [0.75]]))
    adv, mask = torch.tensor([1.0, -1.0]), torch.ones(2, 1)
    symmetric, s_stats = lite_ppo.policy_loss(logprobs, old, adv, mask, loss_args())
    higher, h_stats = lite_ppo.policy_loss(logprobs, old, adv, mask, loss_args(clip_eps_high=0.28))
    # by hand: max(-A r, -A clip(r)) per token, token mean; symmetric: -1.2 and +0.8; clip-higher: -1.25 and +0.8
    assert symmetric.item() == pytest.approx((-1.2 + 0.8) / 2)
    assert higher.item() == pytest.approx((-1.25 + 0.8) / 2)
    assert s_stats["losses/clipfrac"] == pytest.approx(1.0) and h_stats["losses/clipfrac"] == pytest.approx(0.5)


def test_set_to_dapos_loss_the_loss_and_gradient_are_dapos():
    g = torch.Generator().manual_seed(0)
    logprobs = (torch.randn(6, 7, generator=g) * 0.3).requires_grad_()
    old = logprobs.detach() + torch.randn(6, 7, generator=g) * 0.3  # ratios across both clip bounds
    adv = torch.randn(6, generator=g)
    response = (torch.arange(7) < torch.tensor([7, 3, 5, 7, 1, 4])[:, None]).float()
    truncated = torch.tensor([True, False, False, True, False, False])
    mask = dapo.mask_truncated(response, truncated)
    assert torch.equal(mask, response * ~truncated[:, None])  # lite_ppo's --overlong-filter mask, written out
    ours, _ = lite_ppo.policy_loss(logprobs, old, adv, mask, loss_args(clip_eps_high=0.28), num_tokens=40)
    (ours_grad,) = torch.autograd.grad(ours, logprobs)
    theirs, _ = dapo.policy_loss(logprobs, old, adv, mask, SimpleNamespace(clip_eps_low=0.2, clip_eps_high=0.28),
                                 num_tokens=40)
    (theirs_grad,) = torch.autograd.grad(theirs, logprobs)
    assert ours.item() == pytest.approx(theirs.item(), rel=1e-6)
    torch.testing.assert_close(ours_grad, theirs_grad, rtol=1e-6, atol=1e-8)


@pytest.mark.heavy
@pytest.mark.timeout(600)
def test_set_to_grpos_choices_the_update_is_grpo_without_kl(tiny_model_path, tmp_path):
    # the same fixed rollout through both scripts' main(): group std, sequence-level aggregation, no KL
    ours, _ = run_step("lite_ppo", tiny_model_path, str(tmp_path / "lite"), "--adv-std-level", "group", "--loss-agg", "seq")
    grpo, _ = run_step("grpo", tiny_model_path, str(tmp_path / "grpo"), "--beta", "0")
    lite_default, _ = run_step("lite_ppo", tiny_model_path, str(tmp_path / "default"))
    assert set(ours) == set(grpo)
    for k in ours:
        torch.testing.assert_close(ours[k], grpo[k], atol=1e-6, rtol=0)
    assert max((lite_default[k] - grpo[k]).abs().max().item() for k in grpo) > 1e-3  # the defaults are not GRPO's


COMBINATIONS = {
    # batch-level mean (gathered over processes), group std, sequence-level aggregation
    "batch-mean-group-std-seq": ["--adv-mean-level", "batch", "--adv-std-level", "group", "--loss-agg", "seq"],
    # no std, -1/1 rewards, clip-higher, the overlong filter (token counts without the filtered rows); these mostly
    # rescale the gradient, which clipping to --max-grad-norm would undo: unclipped here (and in its baseline)
    "no-std-minus-one-clip-high-filter": ["--adv-std-level", "none", "--wrong-reward", "-1", "--clip-eps-high", "0.28",
                                          "--overlong-filter", "--max-grad-norm", "1e6"],
}


@pytest.mark.heavy
@pytest.mark.timeout(900)
@pytest.mark.parametrize("name", list(COMBINATIONS))
def test_switch_combinations_are_the_same_whole_micro_batched_and_on_two_processes(name, tiny_model_path, tmp_path):
    flags = COMBINATIONS[name]
    whole, _ = run_step("lite_ppo", tiny_model_path, str(tmp_path / "whole"), *flags)
    micro, _ = run_step("lite_ppo", tiny_model_path, str(tmp_path / "micro"), *flags, "--micro-batch-tokens", "40")
    two, world, _ = two_process_step("lite_ppo", tiny_model_path, tmp_path / "two", *flags)
    default, _ = run_step("lite_ppo", tiny_model_path, str(tmp_path / "default"), *flags[flags.index("--max-grad-norm"):]
                          if "--max-grad-norm" in flags else [])
    assert world == 2
    assert max((whole[k] - default[k]).abs().max().item() for k in whole) > 1e-3  # the switches changed the update
    for k in whole:
        torch.testing.assert_close(micro[k], whole[k], atol=1e-5, rtol=0)
        torch.testing.assert_close(two[k], whole[k], atol=1e-5, rtol=0)


@pytest.mark.heavy
@pytest.mark.timeout(600)
def test_wrong_reward_sets_the_reward_of_a_wrong_answer(tiny_model_path, tmp_path):
    run_step("lite_ppo", tiny_model_path, str(tmp_path / "run"), "--wrong-reward", "-1")
    record = json.loads((tmp_path / "run" / "rank0.json").read_text())  # the 0/1 correctness the grader gave
    correct = torch.tensor(record["rewards"])
    metrics = [json.loads(line) for line in (tmp_path / "run" / "run" / "metrics.jsonl").read_text().splitlines()]
    train = next(m for m in metrics if "rollout/reward_mean" in m)
    assert 0 < correct.mean() < 1
    assert train["rollout/reward_mean"] == pytest.approx((2 * correct - 1).mean().item())  # -1 wrong, 1 right
    grouped = correct.view(-1, 4)
    assert train["rollout/solve_none_frac"] == pytest.approx((grouped.max(1).values == 0).float().mean().item())
