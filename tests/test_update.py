"""The update's building blocks against naive references, and each script's own update loop: exact whole,
micro-batched and on 2 processes."""

import json
import math
from pathlib import Path

import pytest
import torch

from common.heads import LogprobModel, ValueModel, backbone_hidden
from common.update import build_optimizer, make_batch, micro_batch_rows, micro_batches, mini_batches, select
from tests.step_equivalence import ATOL, run_step
from tests.torchrun import torchrun


def tiny_lm(seed: int = 0):
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(seed)
    config = Qwen3Config(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=1, num_key_value_heads=1, head_dim=64, max_position_embeddings=128)
    return Qwen3ForCausalLM(config).float()


def naive_logprobs(lm, batch, temperature):
    """The textbook way: full [B, T, V] log-softmax, then gather."""
    logits = lm(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits[:, :-1] / temperature
    logp = torch.log_softmax(logits.float(), -1)
    chosen = logp.gather(-1, batch["input_ids"][:, 1:, None]).squeeze(-1)
    entropy = -(logp.exp() * logp).sum(-1)
    mask = batch["response_mask"][:, 1:]
    return torch.nn.functional.pad(chosen * mask, (1, 0)), torch.nn.functional.pad(entropy * mask, (1, 0))


def grads_of(output, params):
    return torch.autograd.grad(output, params, retain_graph=True, allow_unused=True)


@pytest.mark.parametrize("chunk_size", [1, 5, 1024])
def test_logprobs_entropy_and_their_grads_match_full_log_softmax(chunk_size):
    batch = make_batch([[5, 6, 7], [8, 9]], [[10, 11, 12, 13], [14]], pad_id=0)
    lm = tiny_lm()
    model = LogprobModel(lm, chunk_size=chunk_size)
    logprobs, entropy = model(batch, 0.7)
    ref, ref_entropy = naive_logprobs(lm, batch, 0.7)
    assert logprobs.shape == batch["input_ids"].shape
    torch.testing.assert_close(logprobs, ref, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(entropy, ref_entropy, atol=1e-5, rtol=1e-5)
    assert (logprobs[batch["response_mask"] == 0] == 0).all() and (logprobs[batch["response_mask"] == 1] < 0).all()
    weights = torch.randn(logprobs.shape, generator=torch.Generator().manual_seed(0))
    params = list(lm.parameters())
    # the policy gradient, and an entropy bonus: both train (the entropy is not detached)
    for ours, theirs in ((logprobs, ref), (entropy, ref_entropy)):
        for g, r in zip(grads_of((ours * weights).sum(), params), grads_of((theirs * weights).sum(), params)):
            torch.testing.assert_close(g, r, atol=1e-5, rtol=1e-4)
    assert max(g.abs().max().item() for g in grads_of((entropy * weights).sum(), params)) > 1e-3


# 4 prompts x 2 samples, as the scripts build them: prompts of different lengths (one a prefix of another),
# completions of different lengths
PROMPTS = [[5, 6, 7, 8], [9, 10], [11], [5, 6, 7]]
COMPLETIONS = [[12, 13, 14, 15, 16], [17], [18, 19, 20], [21, 22], [23, 24, 25, 26, 27, 28, 29], [30, 31], [32], [33, 34]]


def test_make_batch_records_prompt_lengths_and_groups():
    batch = make_batch(PROMPTS, COMPLETIONS, pad_id=0)
    assert batch["prompt_lens"].tolist() == [4, 4, 2, 2, 1, 1, 3, 3]
    assert batch["group"].tolist() == [0, 0, 1, 1, 2, 2, 3, 3]
    assert batch["input_ids"][2].tolist() == [9, 10, 18, 19, 20, 0, 0, 0, 0]
    assert batch["response_mask"][2].tolist() == [0, 0, 1, 1, 1, 0, 0, 0, 0]
    with pytest.raises(ValueError, match="8 completions for 3 prompts"):
        make_batch(PROMPTS[:3], COMPLETIONS, pad_id=0)
    assert make_batch([], [], pad_id=0)["input_ids"].shape == (0, 0)


@pytest.mark.parametrize("shared", [True, False])
def test_shared_prompt_forward_matches_the_plain_forward_and_its_gradients(shared):
    batch = make_batch(PROMPTS, COMPLETIONS, pad_id=0)
    if not shared:  # every row its own group: the plain forward
        batch["group"] = torch.arange(8)
    lm = tiny_lm()
    model = LogprobModel(lm, chunk_size=7)
    logprobs, entropy = model(batch, 0.7)
    ref, ref_entropy = naive_logprobs(lm, batch, 0.7)  # one plain forward over every full row
    torch.testing.assert_close(logprobs, ref, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(entropy, ref_entropy, atol=1e-5, rtol=1e-5)
    weights = torch.randn(logprobs.shape, generator=torch.Generator().manual_seed(0))
    params = list(lm.parameters())
    for g, r in zip(grads_of((logprobs * weights).sum(), params), grads_of((ref * weights).sum(), params)):
        torch.testing.assert_close(g, r, atol=1e-5, rtol=1e-4)
    # every prompt and completion position of the hidden states, not only what the log-probs read
    hidden = backbone_hidden(lm.model, batch)
    plain = lm.model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).last_hidden_state
    real = batch["attention_mask"].bool()
    torch.testing.assert_close(hidden[real], plain[real], atol=1e-5, rtol=1e-5)
    # the critic reads the same hidden states
    critic = ValueModel(lm)
    torch.nn.init.normal_(critic.head.weight)
    values = critic(batch)
    ref_values = critic.head(plain[:, :-1]).squeeze(-1) * batch["response_mask"][:, 1:]
    torch.testing.assert_close(values[:, 1:], ref_values, atol=1e-5, rtol=1e-5)


def test_shared_prompt_forward_runs_each_prompt_once():
    batch = make_batch(PROMPTS, COMPLETIONS, pad_id=0)
    lm = tiny_lm()
    seen = []
    lm.model.embed_tokens.register_forward_hook(lambda m, args, out: seen.append(tuple(args[0].shape)))
    LogprobModel(lm)(batch)
    # 4 distinct prompts (longest 4 tokens), then 8 completions from the shortest prompt's end (9 - 1 columns)
    assert batch["input_ids"].shape == (8, 9) and seen == [(4, 4), (8, 8)]
    seen.clear()
    lm.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    LogprobModel(lm)(batch)
    assert seen == [(8, 9)]  # checkpointed layers drop a KV cache: one plain pass instead


def test_micro_batches_respect_budget_and_cover_every_row_once():
    lengths = torch.tensor([5, 17, 3, 9, 9, 30, 1, 12])
    mbs = micro_batch_rows(lengths, token_budget=32)
    assert sorted(torch.cat(mbs).tolist()) == list(range(8))
    for idx in mbs:
        assert len(idx) == 1 or len(idx) * lengths[idx].max() <= 32  # a row over budget goes alone
    assert len(micro_batch_rows(lengths, 10**6)) == 1
    batch = make_batch(PROMPTS, COMPLETIONS, pad_id=0)
    mbs = micro_batches(batch, token_budget=20)
    assert sorted(torch.cat([mb["rows"] for mb in mbs]).tolist()) == list(range(8))
    for mb in mbs:  # each micro-batch holds its rows, trimmed to the longest
        assert torch.equal(mb["input_ids"], batch["input_ids"][mb["rows"], : mb["input_ids"].shape[1]])
        assert mb["input_ids"].shape[1] == batch["attention_mask"][mb["rows"]].sum(-1).max()


def test_micro_batches_leave_skipped_rows_out_and_a_process_with_none_left_still_runs_one(monkeypatch):
    from accelerate.utils import DistributedType

    import common.update

    batch = make_batch(PROMPTS, COMPLETIONS, pad_id=0)
    batch["loss_mask"] = batch["response_mask"].clone()
    skip = torch.tensor([True, False, True, True, False, False, True, True])
    mbs = micro_batches(batch, token_budget=20, skip=skip)
    assert sorted(torch.cat([mb["rows"] for mb in mbs]).tolist()) == [1, 4, 5]
    assert all(torch.equal(mb["loss_mask"], batch["loss_mask"][mb["rows"], : mb["loss_mask"].shape[1]]) for mb in mbs)
    # nothing left: the shortest row, its loss mask emptied (a zero-gradient backward that enters the all-reduce)
    (empty,) = micro_batches(batch, token_budget=20, skip=torch.ones(8, dtype=torch.bool))
    shortest = int(batch["attention_mask"].sum(-1).argmin())
    assert empty["rows"].tolist() == [shortest] and empty["loss_mask"].sum() == 0 and empty["response_mask"].sum() > 0
    # DeepSpeed reduces in every backward: as many micro-batches as the process with the most (here, another has 5)
    monkeypatch.setattr(common.update, "PartialState", lambda: type("S", (), {"distributed_type": DistributedType.DEEPSPEED}))
    monkeypatch.setattr(common.update, "all_gather", lambda x: torch.cat([x, torch.tensor([5])]))
    padded = micro_batches(batch, token_budget=20, skip=skip)
    assert len(padded) == 5 and [mb["rows"].tolist() for mb in padded[: len(mbs)]] == [mb["rows"].tolist() for mb in mbs]
    assert all(mb["loss_mask"].sum() == 0 for mb in padded[len(mbs):])


def test_micro_batches_keep_a_prompts_rows_together_when_that_computes_less():
    # 3 prompts x 2 samples; long prompts (20 tokens), short completions: by length would mix the groups
    starts = torch.tensor([20, 20, 20, 20, 20, 20])
    lengths = starts + torch.tensor([9, 2, 8, 3, 7, 4])
    groups = torch.tensor([0, 0, 1, 1, 2, 2])
    # by length: [0, 2], [4, 5], [1, 3]: two prompts each, 58 + 54 + 46 = 158 tokens computed;
    # by prompt: [0, 1], [2, 3], [4, 5]: one prompt each, (20 + 2 x 9) + (20 + 2 x 8) + (20 + 2 x 7) = 108
    assert [sorted(mb.tolist()) for mb in micro_batch_rows(lengths, 60)] == [[0, 2], [4, 5], [1, 3]]
    mbs = micro_batch_rows(lengths, 60, starts, groups)
    assert [sorted(mb.tolist()) for mb in mbs] == [[0, 1], [2, 3], [4, 5]]
    for idx in mbs:
        assert len(idx) * lengths[idx].max() <= 60  # the budget still bounds padded rows
    # no prompt shared: the length-sorted split
    assert [mb.tolist() for mb in micro_batch_rows(lengths, 60, starts, torch.arange(6))] == \
        [mb.tolist() for mb in micro_batch_rows(lengths, 60)]


def test_mini_batches_are_a_seeded_partition():
    batch = make_batch(PROMPTS, COMPLETIONS, pad_id=0)
    minis = mini_batches(batch, 4, torch.Generator().manual_seed(0))
    rows = [m["group"].tolist() for m in minis]
    assert len(minis) == 4 and sorted(sum(rows, [])) == batch["group"].tolist()
    again = mini_batches(batch, 4, torch.Generator().manual_seed(0))
    assert [m["group"].tolist() for m in again] == rows
    assert torch.equal(mini_batches(batch, 1, torch.Generator())[0]["input_ids"], batch["input_ids"])  # in order
    with pytest.raises(ValueError, match="num-mini-batches 3 must divide the 8 samples"):
        mini_batches(batch, 3, torch.Generator())
    assert mini_batches(make_batch([], [], 0), 2, torch.Generator()) == []


def test_select_trims_padding():
    batch = make_batch([[1, 2], [3]], [[4, 5, 6], [7]], pad_id=0)
    mb = select(batch, torch.tensor([1]))
    assert mb["input_ids"].tolist() == [[3, 7]] and mb["response_mask"].tolist() == [[0, 1]]
    assert mb["prompt_lens"].tolist() == [1] and mb["group"].tolist() == [1]


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


def two_process_step(algo: str, model_dir: str, out: Path, *flags: str) -> tuple[dict, int, list[dict]]:
    """The same step under torchrun with 2 real (gloo) processes."""
    from safetensors.torch import load_file

    torchrun("step_equivalence.py", algo, model_dir, str(out), *flags, log_dir=out / "logs")
    state = out / "run" / "checkpoints" / "step-1" / "state"
    params = {f"{f.stem}.{k}": v for f in sorted(state.glob("model*.safetensors")) for k, v in load_file(f).items()}
    ranks = [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]
    return params, ranks[0]["world_size"], ranks


@pytest.mark.heavy
@pytest.mark.timeout(900)
@pytest.mark.parametrize("precision", ["fp32", "bf16", "bf16-fp32-head", "bf16-gen"])
@pytest.mark.parametrize("algo", ["lite_ppo", "grpo", "dapo", "ppo_vanilla"])
def test_each_scripts_update_is_the_same_whole_micro_batched_and_on_two_processes(algo, precision, tiny_model_path,
                                                                                  tmp_path):
    # The script's own main(): rollout, advantages (Lite PPO's batch std gathered over processes), old and reference
    # log-probs, the sampler correction (its default, on random sampler log-probs), and its update loop, two epochs
    # of SGD with lr 1 (tests/step_equivalence.py); ATOL says how close "the same" is in each precision (a wrong
    # normalization moves parameters by >1e-2).
    init = {k: v.clone() for k, v in tiny_lm_state(tiny_model_path).items()}
    whole, world = run_step(algo, tiny_model_path, str(tmp_path / "whole"), "--precision", precision)
    assert world == 1
    micro, _ = run_step(algo, tiny_model_path, str(tmp_path / "micro"), "--micro-batch-tokens", "40", "--precision", precision)
    two, world, ranks = two_process_step(algo, tiny_model_path, tmp_path / "two", "--precision", precision)
    assert world == 2 and [r["prompts"] for r in ranks] == [2, 2]  # each process generated its own half
    moved = max((whole["model.lm." + k] - v).abs().max().item() for k, v in init.items())
    assert moved > 1e-3  # the step did something
    if algo == "ppo_vanilla":  # the critic's backbone learned too
        assert max((whole["model_1.backbone." + k.removeprefix("model.")] - v).abs().max().item()
                   for k, v in init.items() if k.startswith("model.")) > 1e-4
    assert set(micro) == set(whole) == set(two)
    for k in whole:
        torch.testing.assert_close(micro[k], whole[k], atol=ATOL[precision], rtol=0)
        torch.testing.assert_close(two[k], whole[k], atol=ATOL[precision], rtol=0)


# relative tolerance of a logged step statistic between two runs of the same update: fp32 round-off (measured up to
# 1.3e-6), or bf16's rounding of the log-probs the statistics are made of (measured up to 5e-3, the policy loss, with
# emulated bf16 on AVX2, and 1.2e-2 with native avx512_bf16 kernels, which block by batch shape; the entropy 3e-4).
# ENTROPY_REL tells apart an entropy over other rows (0.5% off here) from the same rows' in bf16.
STATS_REL = {"fp32": 1e-5, "bf16": 3e-2}
ENTROPY_REL = {"fp32": 1e-5, "bf16": 1e-3}


def learning_rows(record: dict, algo: str, group_size: int = 4) -> int:
    """Rows of a recorded rollout whose gradient is not zero, counted from the rewards themselves: a group with
    mixed rewards (a uniform group's advantages are all 0), and for DAPO's overlong filter a finished sample."""
    rewards = torch.tensor(record["rewards"]).view(-1, group_size)
    mixed = (rewards != rewards[:, :1]).any(1).repeat_interleave(group_size)
    if algo == "dapo":
        mixed &= ~torch.tensor(record["truncated"])
    return int(mixed.sum())


@pytest.mark.heavy
@pytest.mark.timeout(900)
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
@pytest.mark.parametrize("algo, flags", [("lite_ppo", []), ("grpo", ["--beta", "0"]), ("dapo", [])])
def test_zero_gradient_rows_are_not_computed_and_the_update_is_unchanged(algo, flags, precision, tiny_model_path, tmp_path):
    # the same step computing every row (--no-skip), skipping the rows of zero gradient, and skipping micro-batched:
    # the same weights, while the training forwards saw only the rows with signal, in each of the two epochs
    flags = [*flags, "--precision", precision]
    full, _ = run_step(algo, tiny_model_path, str(tmp_path / "full"), *flags, "--no-skip")
    skipped, _ = run_step(algo, tiny_model_path, str(tmp_path / "skip"), *flags)
    micro, _ = run_step(algo, tiny_model_path, str(tmp_path / "micro"), *flags, "--micro-batch-tokens", "40")
    records = {name: json.loads((tmp_path / name / "rank0.json").read_text()) for name in ("full", "skip", "micro")}
    learning = learning_rows(records["skip"], algo)
    assert 0 < learning < len(records["skip"]["rewards"])  # something to skip, something to learn
    assert records["full"]["rows_trained"] == [len(records["full"]["rewards"])] * 2
    assert records["skip"]["rows_trained"] == [learning] * 2
    assert sum(records["micro"]["rows_trained"]) == 2 * learning and len(records["micro"]["rows_trained"]) > 2
    for k in full:
        # skipping rows changes the batch's shape; native bf16 kernels (avx512_bf16) block by shape: 1.8e-3 measured
        torch.testing.assert_close(skipped[k], full[k], atol=ATOL[precision] / (10 if precision == "fp32" else 2), rtol=0)
        torch.testing.assert_close(micro[k], full[k], atol=ATOL[precision], rtol=0)
    # the loss's stats are over every row (a zero-advantage token adds 0 and is never clipped): unchanged; the
    # policy's entropy and KL are over the rows computed: the same with and without micro-batches (bf16: up to
    # its rounding of the log-probs, STATS_REL)
    rel = STATS_REL[precision]
    logged = {name: train_metrics(tmp_path / name) for name in ("full", "skip", "micro")}
    for k in ("losses/policy_loss", "losses/clipfrac", "losses/grad_norm"):
        assert logged["skip"][k] == pytest.approx(logged["full"][k], rel=rel, abs=1e-7), k
    for k in ("losses/entropy", "losses/approx_kl", "rollout/sampler_abs_diff", "rollout/sampler_kl",
              "rollout/sampler_is_weight", "rollout/sampler_ratio_max"):
        assert logged["micro"][k] == pytest.approx(logged["skip"][k], rel=rel, abs=1e-7), k
    # DAPO skips the overlong-filtered rows only, which have no token in the loss: the same tokens either way
    same = pytest.approx(logged["full"]["losses/entropy"], rel=ENTROPY_REL[precision])
    assert (logged["skip"]["losses/entropy"] == same) == (algo == "dapo")


def train_metrics(out: Path) -> dict:
    """The training step's line of a run's metrics.jsonl (the one with losses)."""
    lines = [json.loads(line) for line in (out / "run" / "metrics.jsonl").read_text().splitlines()]
    return next(line for line in lines if "losses/policy_loss" in line)


def test_policy_stats_are_token_means_over_the_tokens_computed():
    from common.update import policy_stats

    logprobs = torch.log(torch.tensor([[0.5, 0.25, 0.1]]))
    old = torch.log(torch.tensor([[0.5, 0.5, 0.1]]))
    entropy, mask = torch.tensor([[1.0, 2.0, 7.0]]), torch.tensor([[1, 1, 0]])
    # by hand: ratio 1 and 0.5 on the two masked-in tokens; k3 = (r - 1) - log r = 0 and -0.5 + log 2
    stats = policy_stats(logprobs, old, entropy, mask, num_tokens=4)
    assert stats["losses/entropy"] == pytest.approx((1.0 + 2.0) / 4)
    assert stats["losses/approx_kl"] == pytest.approx((-0.5 + math.log(2)) / 4)
    assert all(v != v for v in policy_stats(logprobs, old, entropy, mask, num_tokens=0).values())  # nothing computed: nan


@pytest.mark.heavy
@pytest.mark.timeout(900)
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
@pytest.mark.parametrize("algo, flags", [("lite_ppo", []), ("grpo", ["--beta", "0"])])
def test_a_process_with_no_row_to_learn_still_joins_the_all_reduce(algo, flags, precision, tiny_model_path, tmp_path):
    # every prompt of the second process has an all-wrong group: it computes one placeholder row with an empty loss
    # mask per optimizer step, enters the all-reduce with zero gradient, and the step equals one process computing all
    flags = [*flags, "--precision", precision]
    whole, _ = run_step(algo, tiny_model_path, str(tmp_path / "whole"), *flags, "--rewards", "last", "--no-skip")
    two, world, ranks = two_process_step(algo, tiny_model_path, tmp_path / "two", *flags, "--rewards", "last")
    assert world == 2 and learning_rows(ranks[1], algo) == 0 < learning_rows(ranks[0], algo)
    assert ranks[1]["rows_trained"] == [1, 1]  # the placeholder, once per epoch
    assert ranks[0]["rows_trained"] == [learning_rows(ranks[0], algo)] * 2
    for k in whole:
        torch.testing.assert_close(two[k], whole[k], atol=ATOL[precision], rtol=0)


def tiny_lm_state(path: str) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(str(Path(path) / "model.safetensors"))
