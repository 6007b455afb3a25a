"""The update's building blocks against naive references, and each script's own update loop: exact whole,
micro-batched and on 2 processes."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from common.heads import LogprobModel, ValueModel, backbone_hidden
from common.update import build_optimizer, make_batch, micro_batch_rows, micro_batches, mini_batches, select
from tests.step_equivalence import run_step

ROOT = Path(__file__).resolve().parents[1]


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


def two_process_step(algo: str, model_dir: str, out: Path) -> tuple[dict, int, list[dict]]:
    """The same step under torchrun with 2 real (gloo) processes."""
    from safetensors.torch import load_file

    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", str(29500 + os.getpid() % 1000),
           str(ROOT / "tests" / "step_equivalence.py"), algo, model_dir, str(out)]
    subprocess.run(cmd, check=True, env=env, cwd=ROOT, timeout=300)
    state = out / "run" / "checkpoints" / "step-1" / "state"
    params = {f"{f.stem}.{k}": v for f in sorted(state.glob("model*.safetensors")) for k, v in load_file(f).items()}
    ranks = [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]
    return params, ranks[0]["world_size"], ranks


@pytest.mark.timeout(900)
@pytest.mark.parametrize("algo", ["lite_ppo", "grpo", "dapo", "ppo_vanilla"])
def test_each_scripts_update_is_the_same_whole_micro_batched_and_on_two_processes(algo, tiny_model_path, tmp_path):
    # The script's own main(): rollout, advantages (Lite PPO's batch std gathered over processes), old and reference
    # log-probs, and its update loop, two epochs of SGD with lr 1 (tests/step_equivalence.py). fp32 sums in another
    # order (micro-batches, all-reduce) differ by ~1e-7 relative, so 1e-5 absolute separates "the same update" from
    # any real difference (a wrong normalization moves parameters by >1e-3).
    init = {k: v.clone() for k, v in tiny_lm_state(tiny_model_path).items()}
    whole, world = run_step(algo, tiny_model_path, str(tmp_path / "whole"))
    assert world == 1
    micro, _ = run_step(algo, tiny_model_path, str(tmp_path / "micro"), "--micro-batch-tokens", "40")
    two, world, ranks = two_process_step(algo, tiny_model_path, tmp_path / "two")
    assert world == 2 and [r["prompts"] for r in ranks] == [2, 2]  # each process generated its own half
    moved = max((whole["model.lm." + k] - v).abs().max().item() for k, v in init.items())
    assert moved > 1e-3  # the step did something
    if algo == "ppo_vanilla":  # the critic's backbone learned too
        assert max((whole["model_1.backbone." + k.removeprefix("model.")] - v).abs().max().item()
                   for k, v in init.items() if k.startswith("model.")) > 1e-4
    assert set(micro) == set(whole) == set(two)
    for k in whole:
        torch.testing.assert_close(micro[k], whole[k], atol=1e-5, rtol=0)
        torch.testing.assert_close(two[k], whole[k], atol=1e-5, rtol=0)


def tiny_lm_state(path: str) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(str(Path(path) / "model.safetensors"))
