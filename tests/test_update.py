"""The shared update: log-probs against a naive reference, micro-batches, exact accumulated steps."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from common.update import LogprobModel, ValueModel, backbone_hidden, build_optimizer, micro_batches, make_batch, select
from tests.step_equivalence import run, tiny_lm

ROOT = Path(__file__).resolve().parents[1]


def naive_logprobs(lm, batch, temperature):
    """The textbook way: full [B, T, V] log-softmax, then gather."""
    logits = lm(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits[:, :-1] / temperature
    logp = torch.log_softmax(logits.float(), -1)
    chosen = logp.gather(-1, batch["input_ids"][:, 1:, None]).squeeze(-1)
    entropy = -(logp.exp() * logp).sum(-1)
    mask = batch["response_mask"][:, 1:]
    return torch.nn.functional.pad(chosen * mask, (1, 0)), torch.nn.functional.pad(entropy * mask, (1, 0))


@pytest.mark.parametrize("chunk_size", [1, 5, 1024])
def test_logprobs_and_grads_match_full_log_softmax(chunk_size):
    batch = make_batch([[5, 6, 7], [8, 9]], [[10, 11, 12, 13], [14]], pad_id=0)
    lm = tiny_lm()
    model = LogprobModel(lm, chunk_size=chunk_size)
    logprobs, entropy = model(batch["input_ids"], batch["attention_mask"], batch["response_mask"], 0.7)
    ref, ref_entropy = naive_logprobs(lm, batch, 0.7)
    assert logprobs.shape == batch["input_ids"].shape
    torch.testing.assert_close(logprobs, ref, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(entropy, ref_entropy, atol=1e-5, rtol=1e-5)
    assert (logprobs[batch["response_mask"] == 0] == 0).all() and (logprobs[batch["response_mask"] == 1] < 0).all()
    weights = torch.randn(logprobs.shape, generator=torch.Generator().manual_seed(0))
    grads = torch.autograd.grad((logprobs * weights).sum(), list(lm.parameters()))
    ref_grads = torch.autograd.grad((ref * weights).sum(), list(lm.parameters()))
    for g, r in zip(grads, ref_grads):
        torch.testing.assert_close(g, r, atol=1e-5, rtol=1e-4)


# groups of samples sharing a prompt (as the scripts build them), prompts of different lengths, completions of
# different lengths, a lone prompt, a prompt that is a prefix of another
GROUPED = ([[5, 6, 7, 8]] * 3 + [[9, 10]] * 2 + [[11]] + [[5, 6, 7]] * 2,
           [[12, 13, 14, 15, 16], [17], [18, 19, 20], [21, 22], [23, 24, 25, 26, 27, 28, 29], [30, 31], [32], [33, 34]])


@pytest.mark.parametrize("masked_rows", [[], [1], list(range(8))])
def test_shared_prompt_forward_matches_the_plain_forward_and_its_gradients(masked_rows):
    batch = make_batch(*GROUPED, pad_id=0)
    batch["response_mask"][masked_rows] = 0  # as DAPO's overlong filter: rows without a loss token
    lm = tiny_lm()
    model = LogprobModel(lm, chunk_size=7)
    logprobs, entropy = model(batch["input_ids"], batch["attention_mask"], batch["response_mask"], 0.7)
    ref, ref_entropy = naive_logprobs(lm, batch, 0.7)  # one plain forward over every full row
    torch.testing.assert_close(logprobs, ref, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(entropy, ref_entropy, atol=1e-5, rtol=1e-5)
    if batch["response_mask"].any():
        weights = torch.randn(logprobs.shape, generator=torch.Generator().manual_seed(0))
        grads = torch.autograd.grad((logprobs * weights).sum(), list(lm.parameters()))
        ref_grads = torch.autograd.grad((ref * weights).sum(), list(lm.parameters()))
        for g, r in zip(grads, ref_grads):
            torch.testing.assert_close(g, r, atol=1e-5, rtol=1e-4)
    # every prompt and completion position of the hidden states, not only what the log-probs read
    hidden = backbone_hidden(lm.model, batch["input_ids"], batch["attention_mask"], batch["response_mask"])
    plain = lm.model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).last_hidden_state
    real = batch["attention_mask"].bool()
    torch.testing.assert_close(hidden[real], plain[real], atol=1e-5, rtol=1e-5)
    # the critic reads the same hidden states
    critic = ValueModel(lm)
    torch.nn.init.normal_(critic.head.weight)
    values = critic(batch["input_ids"], batch["attention_mask"], batch["response_mask"])
    ref_values = critic.head(plain[:, :-1]).squeeze(-1) * batch["response_mask"][:, 1:]
    torch.testing.assert_close(values[:, 1:], ref_values, atol=1e-5, rtol=1e-5)


def test_shared_prompt_forward_runs_each_prompt_once():
    batch = make_batch(*GROUPED, pad_id=0)
    lm = tiny_lm()
    seen = []
    lm.model.embed_tokens.register_forward_hook(lambda m, args, out: seen.append(tuple(args[0].shape)))
    LogprobModel(lm)(batch["input_ids"], batch["attention_mask"], batch["response_mask"])
    # 4 distinct prompts (longest 4 tokens), then 8 completions from the shortest prompt's end (9 - 1 columns)
    assert batch["input_ids"].shape == (8, 9) and seen == [(4, 4), (8, 8)]
    seen.clear()
    lm.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    LogprobModel(lm)(batch["input_ids"], batch["attention_mask"], batch["response_mask"])
    assert seen == [(8, 9)]  # checkpointed layers drop a KV cache: one plain pass instead


def test_micro_batches_respect_budget_and_cover_every_row_once():
    lengths = torch.tensor([5, 17, 3, 9, 9, 30, 1, 12])
    mbs = micro_batches(lengths, token_budget=32)
    assert sorted(torch.cat(mbs).tolist()) == list(range(8))
    for idx in mbs:
        assert len(idx) == 1 or len(idx) * lengths[idx].max() <= 32  # a row over budget goes alone
    assert len(micro_batches(lengths, 10**6)) == 1


def test_micro_batches_keep_a_prompts_rows_together_when_that_computes_less():
    # 3 prompts x 2 samples; long prompts (20 tokens), short completions: by length would mix the groups
    starts = torch.tensor([20, 20, 20, 20, 20, 20])
    lengths = starts + torch.tensor([9, 2, 8, 3, 7, 4])
    groups = torch.tensor([0, 0, 1, 1, 2, 2])
    # by length: [0, 2], [4, 5], [1, 3]: two prompts each, 58 + 54 + 46 = 158 tokens computed;
    # by prompt: [0, 1], [2, 3], [4, 5]: one prompt each, (20 + 2 x 9) + (20 + 2 x 8) + (20 + 2 x 7) = 108
    assert [sorted(mb.tolist()) for mb in micro_batches(lengths, 60)] == [[0, 2], [4, 5], [1, 3]]
    mbs = micro_batches(lengths, 60, starts, groups)
    assert [sorted(mb.tolist()) for mb in mbs] == [[0, 1], [2, 3], [4, 5]]
    for idx in mbs:
        assert len(idx) * lengths[idx].max() <= 60  # the budget still bounds padded rows
    # no prompt shared: the length-sorted split
    assert [mb.tolist() for mb in micro_batches(lengths, 60, starts, torch.arange(6))] == \
        [mb.tolist() for mb in micro_batches(lengths, 60)]


def test_select_trims_padding():
    batch = make_batch([[1, 2], [3]], [[4, 5, 6], [7]], pad_id=0)
    mb = select(batch, torch.tensor([1]))
    assert mb["input_ids"].tolist() == [[3, 7]] and mb["response_mask"].tolist() == [[0, 1]]


def test_warmup_then_cosine_schedule():
    model = torch.nn.Linear(2, 2)
    optimizer, scheduler = build_optimizer(model, 1.0, 0.0, warmup_steps=2, total_steps=6, schedule="cosine")
    lrs = []
    for _ in range(6):
        lrs.append(scheduler.get_last_lr()[0])
        optimizer.step()
        scheduler.step()
    assert lrs[:3] == pytest.approx([0.5, 1.0, 1.0]) and lrs[-1] == pytest.approx(0.1 + 0.9 * 0.5 * (1 + torch.cos(torch.tensor(0.75 * torch.pi)).item()))
    with pytest.raises(ValueError, match="lr-schedule"):
        build_optimizer(model, 1.0, 0.0, 0, 1, "linear")


def two_process_step(algo: str, out: Path) -> dict:
    """The same step under torchrun with 2 real (gloo) processes."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", str(29500 + os.getpid() % 1000),
           str(ROOT / "tests" / "step_equivalence.py"), algo, str(out)]
    subprocess.run(cmd, check=True, env=env, cwd=ROOT, timeout=300)
    return torch.load(out)


@pytest.mark.timeout(600)
@pytest.mark.parametrize("algo", ["lite_ppo", "grpo", "dapo"])
def test_one_step_is_the_same_whole_micro_batched_and_on_two_processes(algo, tmp_path):
    # the step is SGD with lr 1, so parameter changes are the gradients (~1e-3..1e-1 per entry);
    # fp32 sums in another order (micro-batches, all-reduce) differ by ~1e-7 relative, so 1e-6
    # absolute separates "the same update" from any real difference (a wrong normalization is >1e-3)
    whole, world = run(algo)
    assert world == 1
    micro, _ = run(algo, token_budget=24)  # ~4 micro-batches per 16 rows of <= 18 tokens
    two = two_process_step(algo, tmp_path / "two.pt")
    assert two["world_size"] == 2
    init = tiny_lm().state_dict()
    moved = max((whole["lm." + k] - v).abs().max().item() for k, v in init.items())
    assert moved > 1e-3  # the step did something
    for k in whole:
        torch.testing.assert_close(micro[k], whole[k], atol=1e-6, rtol=0)
        torch.testing.assert_close(two["params"][k], whole[k], atol=1e-6, rtol=0)


@pytest.mark.timeout(600)
def test_ppo_vanilla_policy_and_critic_steps_are_the_same_whole_micro_batched_and_on_two_processes(tmp_path):
    # as above, for the critic script: the policy step AND the value model's step, with GAE and advantage
    # whitening over the global batch's tokens (all processes) in between
    from tests.step_equivalence import run_ppo_vanilla

    whole, world = run_ppo_vanilla()
    assert world == 1
    micro, _ = run_ppo_vanilla(token_budget=24)
    two = two_process_step("ppo_vanilla", tmp_path / "two.pt")
    assert two["world_size"] == 2
    init = tiny_lm().state_dict()
    assert max((whole["policy.lm." + k] - v).abs().max().item() for k, v in init.items()) > 1e-3
    backbone = {k.removeprefix("model."): v for k, v in init.items() if k.startswith("model.")}
    assert max((whole["critic.backbone." + k] - v).abs().max().item() for k, v in backbone.items()) > 1e-3
    for k in whole:
        torch.testing.assert_close(micro[k], whole[k], atol=1e-6, rtol=0)
        torch.testing.assert_close(two["params"][k], whole[k], atol=1e-6, rtol=0)
