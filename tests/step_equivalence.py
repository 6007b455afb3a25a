"""One optimizer step of an algorithm on a fixed batch; run alone or under `torchrun --nproc_per_node 2`.

    python tests/step_equivalence.py ALGO OUT.pt [TOKEN_BUDGET]
    torchrun --nproc_per_node 2 tests/step_equivalence.py ALGO OUT.pt

Each process takes a contiguous half of the groups (as the scripts do) and computes advantages
itself, so the test covers cross-process statistics (Lite PPO's batch std) as well as the loss
normalization. The main process saves the updated parameters and the world size to OUT.pt.
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
    # old log-probs slightly off the current policy, so ratios move and both clip ends are reached
    g = torch.Generator().manual_seed(7)
    noise = 0.5 * torch.randn(len(rewards), 64, generator=g)[share, : batch["input_ids"].shape[1]]  # fixed per (row, t)
    batch["old_logprobs"] = compute_logprobs(model, batch, 10**6, 1.0) + noise * batch["response_mask"]
    if algo == "grpo":
        batch["ref_logprobs"] = batch["old_logprobs"] - 0.1 * noise * batch["response_mask"]

    def loss_fn(mb, num_tokens, num_seqs):
        logprobs, _ = model(mb["input_ids"], mb["attention_mask"], mb["response_mask"])
        kw = {"num_seqs": num_seqs, "ref_logprobs": mb["ref_logprobs"]} if algo == "grpo" else {"num_tokens": num_tokens}
        return script.policy_loss(logprobs, mb["old_logprobs"], mb["advantages"], mb["response_mask"], args, **kw)

    ppo_update(accelerator, model, optimizer, scheduler, batch, loss_fn, epochs=1, num_mini_batches=1,
               token_budget=token_budget, max_grad_norm=1e9, seed=0)
    params = {k: v.detach().clone() for k, v in accelerator.unwrap_model(model).state_dict().items()}
    return params, world


if __name__ == "__main__":
    params, world = run(sys.argv[1], int(sys.argv[3]) if len(sys.argv) > 3 else 10**6)
    if Accelerator(cpu=True).is_main_process:
        torch.save({"params": params, "world_size": world}, sys.argv[2])
