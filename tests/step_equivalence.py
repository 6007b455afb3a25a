"""One optimizer step of an algorithm on a fixed batch; run alone or under `torchrun --nproc_per_node 2`.

    python tests/step_equivalence.py ALGO OUT.pt [TOKEN_BUDGET]
    torchrun --nproc_per_node 2 tests/step_equivalence.py ALGO OUT.pt

Each process takes a contiguous half of the groups (as the scripts do) and computes advantages
itself, so the test covers cross-process statistics (Lite PPO's batch std) as well as the loss
normalization: per token (Lite PPO, DAPO with overlong filtering on), per sequence (GRPO, with its
KL term). The main process saves the updated parameters and the world size to OUT.pt.
"""

import importlib
import sys
from pathlib import Path

import torch
from accelerate import Accelerator
from transformers import Qwen3Config, Qwen3ForCausalLM

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from common.update import LogprobModel, compute_logprobs, make_batch, ppo_update  # noqa: E402

PROMPTS, GROUP, VOCAB = 4, 4, 128


def tiny_lm(seed: int = 0) -> Qwen3ForCausalLM:
    torch.manual_seed(seed)
    config = Qwen3Config(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=1, num_key_value_heads=1, head_dim=64, max_position_embeddings=128)
    return Qwen3ForCausalLM(config).float()


def fixed_rollout() -> tuple[list[list[int]], list[list[int]], torch.Tensor]:
    """PROMPTS x GROUP samples of varied lengths and 0/1 rewards, the same on every process."""
    g = torch.Generator().manual_seed(123)
    prompts, completions = [], []
    for p in range(PROMPTS):
        prompt = torch.randint(1, VOCAB, (int(torch.randint(3, 8, (1,), generator=g)),), generator=g).tolist()
        for _ in range(GROUP):
            prompts.append(prompt)
            completions.append(torch.randint(1, VOCAB, (int(torch.randint(2, 12, (1,), generator=g)),), generator=g).tolist())
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0])
    return prompts, completions, rewards


def run(algo: str, token_budget: int = 10**6) -> tuple[dict[str, torch.Tensor], int]:
    script = importlib.import_module(algo)
    accelerator = Accelerator(cpu=True)
    rank, world = accelerator.process_index, accelerator.num_processes
    prompts, completions, rewards = fixed_rollout()
    share = slice(rank * len(rewards) // world, (rank + 1) * len(rewards) // world)
    args = script.Args(group_size=GROUP, clip_eps=0.2) if hasattr(script.Args, "clip_eps") else script.Args(group_size=GROUP)
    model = LogprobModel(tiny_lm())
    # SGD with lr 1: the update IS the gradient. (Adam's first step, g / (|g| + eps), would amplify
    # float round-off in near-zero gradient entries into lr-sized differences.)
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda _: 1.0)
    model, optimizer = accelerator.prepare(model, optimizer)
    batch = make_batch(prompts[share], completions[share], pad_id=0)
    batch["advantages"] = script.compute_advantages(rewards[share], GROUP)
    if algo == "dapo":  # as dapo.main with --overlong-filter: the longest completions count as truncated, so
        # rows without a loss token, and micro-batches of only such rows, occur (their forward must still count)
        truncated = torch.tensor([len(c) >= 9 for c in completions])[share]
        batch["generated_mask"] = batch["response_mask"]
        batch["response_mask"] = script.mask_truncated(batch["response_mask"], truncated)
    # old log-probs slightly off the current policy, so ratios move and both clip ends are reached
    g = torch.Generator().manual_seed(7)
    noise = 0.5 * torch.randn(len(rewards), 64, generator=g)[share, : batch["input_ids"].shape[1]]  # fixed per (row, t)
    batch["old_logprobs"] = compute_logprobs(model, batch, 10**6, 1.0) + noise * batch["response_mask"]
    if algo == "grpo":  # a reference a little off the old policy, so the KL term (beta 0.04) has a gradient
        batch["ref_logprobs"] = batch["old_logprobs"] - 0.1 * noise * batch["response_mask"]

    def loss_fn(mb, num_tokens, num_seqs):
        logprobs, _ = model(mb["input_ids"], mb["attention_mask"], mb.get("generated_mask", mb["response_mask"]))
        kw = {"num_seqs": num_seqs, "ref_logprobs": mb["ref_logprobs"]} if algo == "grpo" else {"num_tokens": num_tokens}
        return script.policy_loss(logprobs, mb["old_logprobs"], mb["advantages"], mb["response_mask"], args, **kw)

    ppo_update(accelerator, model, optimizer, scheduler, batch, loss_fn, epochs=1, num_mini_batches=1,
               token_budget=token_budget, max_grad_norm=1e9, seed=0)
    params = {k: v.detach().clone() for k, v in accelerator.unwrap_model(model).state_dict().items()}
    return params, world


def run_ppo_vanilla(algo: str = "ppo_vanilla", token_budget: int = 10**6) -> tuple[dict[str, torch.Tensor], int]:
    """One policy step and one critic step of a critic script; returns both models' parameters ("policy.", "critic.").

    Covers the critic's exactness too: GAE, whitening over the global batch's tokens (gathered over processes),
    the token-level value loss. Old log-probs AND old values are moved off the current ones, so that both clip
    ends of the policy loss and both branches of the clipped value loss are reached.
    """
    from common.update import ValueModel, compute_values

    script = importlib.import_module(algo)
    accelerator = Accelerator(cpu=True)
    rank, world = accelerator.process_index, accelerator.num_processes
    prompts, completions, rewards = fixed_rollout()
    share = slice(rank * len(rewards) // world, (rank + 1) * len(rewards) // world)
    args = script.Args(group_size=GROUP, clip_eps=0.2, value_clip=0.2, gamma=0.9, lam=0.8)
    model, critic = LogprobModel(tiny_lm()), ValueModel(tiny_lm())  # the critic starts from the policy's weights
    with torch.no_grad():  # a random head (the script's starts at 0, which leaves the backbone's first gradient 0)
        critic.head.weight.copy_(0.1 * torch.randn(critic.head.weight.shape, generator=torch.Generator().manual_seed(3)))
    optimizer, critic_optimizer = torch.optim.SGD(model.parameters(), lr=1.0), torch.optim.SGD(critic.parameters(), lr=1.0)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda _: 1.0)
    critic_scheduler = torch.optim.lr_scheduler.LambdaLR(critic_optimizer, lambda _: 1.0)
    model, optimizer = accelerator.prepare(model, optimizer)
    critic, critic_optimizer = accelerator.prepare(critic, critic_optimizer)
    batch = make_batch(prompts[share], completions[share], pad_id=0)
    mask = batch["response_mask"]
    g = torch.Generator().manual_seed(7)
    noise = 0.5 * torch.randn(2, len(rewards), 64, generator=g)[:, share, : mask.shape[1]]  # fixed per (row, t)
    batch["old_logprobs"] = compute_logprobs(model, batch, 10**6, 1.0) + noise[0] * mask
    batch["old_values"] = compute_values(critic, batch, 10**6) + noise[1] * mask
    token_rewards = script.last_token_rewards(rewards[share], mask)
    advantages, batch["returns"] = script.compute_gae(token_rewards, batch["old_values"], mask, args.gamma, args.lam)
    batch["advantages"] = script.whiten(advantages, mask)

    def loss_fn(mb, num_tokens, num_seqs):
        logprobs, _ = model(mb["input_ids"], mb["attention_mask"], mb["response_mask"])
        return script.policy_loss(logprobs, mb["old_logprobs"], mb["advantages"], mb["response_mask"], args, num_tokens=num_tokens)

    def critic_loss_fn(mb, num_tokens, num_seqs):
        values = critic(mb["input_ids"], mb["attention_mask"], mb["response_mask"])
        return script.value_loss(values, mb["old_values"], mb["returns"], mb["response_mask"], args, num_tokens=num_tokens), {}

    for m, opt, sched, fn in ((model, optimizer, scheduler, loss_fn), (critic, critic_optimizer, critic_scheduler, critic_loss_fn)):
        ppo_update(accelerator, m, opt, sched, batch, fn, epochs=1, num_mini_batches=1, token_budget=token_budget,
                   max_grad_norm=1e9, seed=0)
    params = {f"{name}.{k}": v.detach().clone() for name, m in (("policy", model), ("critic", critic))
              for k, v in accelerator.unwrap_model(m).state_dict().items()}
    return params, world


if __name__ == "__main__":
    step = run_ppo_vanilla if sys.argv[1] == "ppo_vanilla" else run  # the critic script updates two models
    params, world = step(sys.argv[1], int(sys.argv[3]) if len(sys.argv) > 3 else 10**6)
    if Accelerator(cpu=True).is_main_process:
        torch.save({"params": params, "world_size": world}, sys.argv[2])
    # Leave together and shut gloo down before interpreter exit: a rank that exited with gloo's threads alive
    # aborted once ("terminate called without an active exception"), failing the test.
    if torch.distributed.is_initialized():
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()
