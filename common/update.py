"""Building blocks of the update loop that each script writes out in its section 6: batches, their
mini- and micro-batches, gradient accumulation, the optimizer.

Batch layout: a dict of tensors, one row per sample (prompt + completion, right-padded):
    input_ids       [N, T]  prompt tokens then completion tokens then padding
    attention_mask  [N, T]  1 on prompt and completion tokens
    response_mask   [N, T]  1 on completion tokens only (the tokens whose log-probs are computed)
    loss_mask       [N, T]  the tokens the loss sees (the script sets it: the response, or less)
    prompt_lens     [N]     where each row's completion starts
    group           [N]     the row's prompt: rows i and j share their prompt iff group[i] == group[j]
    sampler_logprobs [N, T] the engine's log-probs of the completion tokens (common/mismatch.py), when given
    ...             [N, T] or [N]  what the script adds (old_logprobs, advantages, a loss mask, ...)
`logprobs[n, t]` is log p(input_ids[n, t] | input_ids[n, :t]): aligned with input_ids, so the
same mask selects tokens, log-probs and advantages. The rollout knows the group structure (P prompts
x G samples, contiguous) and `make_batch` records it; nothing re-derives it from token ids.

Exact aggregation: the loss of a micro-batch is its token (or sequence) sum divided by the token
(or sequence) count of the GLOBAL mini-batch (`global_sum`), gradients accumulate over micro-batches
and are all-reduced once (`accumulate_gradients`), and the loss is multiplied by the number of
processes because DDP averages gradients. Any micro-batch split on any number of processes then
gives the gradient of the full batch (tests/test_update.py runs each script's loop three ways).
"""

import math
from contextlib import contextmanager, nullcontext

import torch
from accelerate import PartialState
from accelerate.utils import DistributedType
from torch import nn

from common.errors import BadSpec
from common.run import all_gather, global_max, global_sum


def make_batch(prompt_ids: list[list[int]], completion_ids: list[list[int]], pad_id: int,
               completion_logprobs: list[list[float] | None] | None = None) -> dict[str, torch.Tensor]:
    """Right-padded rows (layout in the module docstring) of P prompts and their P*G completions.

    Completion i answers prompt i // G (groups contiguous, as the engines return them), G = len(completion_ids) / P.
    completion_logprobs: the sampler's log-prob of each completion token, as the engines return them; given, they
    become "sampler_logprobs" [N, T], aligned like input_ids (0 off the response).
    """
    if prompt_ids and len(completion_ids) % len(prompt_ids):
        raise ValueError(f"{len(completion_ids)} completions for {len(prompt_ids)} prompts: not a whole group each")
    group_size = len(completion_ids) // max(len(prompt_ids), 1)
    group = torch.arange(len(completion_ids)) // max(group_size, 1)  # [N]
    prompt_lens = torch.tensor([len(prompt_ids[g]) for g in group.tolist()], dtype=torch.long)
    lengths = [int(p) + len(c) for p, c in zip(prompt_lens, completion_ids)]
    input_ids = torch.full((len(lengths), max(lengths, default=0)), pad_id, dtype=torch.long)  # 0 rows: an empty batch
    attention_mask = torch.zeros_like(input_ids)
    response_mask = torch.zeros_like(input_ids)
    for i, (g, c) in enumerate(zip(group.tolist(), completion_ids)):
        p = prompt_ids[g]
        input_ids[i, : len(p) + len(c)] = torch.tensor(p + c)
        attention_mask[i, : len(p) + len(c)] = 1
        response_mask[i, len(p) : len(p) + len(c)] = 1
    batch = {"input_ids": input_ids, "attention_mask": attention_mask, "response_mask": response_mask,
             "prompt_lens": prompt_lens, "group": group}
    if completion_logprobs is not None:
        if any(lp is None or len(lp) != len(c) for lp, c in zip(completion_logprobs, completion_ids)):
            raise ValueError("the sampler's log-probs need one value per completion token (SamplingConfig(logprobs=True))")
        batch["sampler_logprobs"] = torch.zeros_like(input_ids, dtype=torch.float32)
        for i, lp in enumerate(completion_logprobs):
            start = int(prompt_lens[i])
            batch["sampler_logprobs"][i, start : start + len(lp)] = torch.tensor(lp, dtype=torch.float32)
    return batch


def select(batch: dict[str, torch.Tensor], idx: torch.Tensor) -> dict[str, torch.Tensor]:
    """Rows `idx` of every tensor in `batch`, trimmed to the longest of those rows."""
    width = int(batch["attention_mask"][idx].sum(-1).max()) if len(idx) else 0
    return {k: v[idx][:, :width] if v.dim() > 1 else v[idx] for k, v in batch.items()}


def mini_batches(batch: dict[str, torch.Tensor], num_mini_batches: int, generator: torch.Generator) -> list[dict[str, torch.Tensor]]:
    """This process's rows in `num_mini_batches` parts: a seeded shuffle of whole samples (in order when 1 part)."""
    n = batch["input_ids"].shape[0]
    if n % num_mini_batches:
        raise BadSpec(f"--num-mini-batches {num_mini_batches} must divide the {n} samples per process")
    perm = torch.randperm(n, generator=generator) if num_mini_batches > 1 else torch.arange(n)
    return [{k: v[idx] for k, v in batch.items()} for idx in perm.chunk(num_mini_batches)] if n else []


def micro_batches(batch: dict[str, torch.Tensor], token_budget: int, skip: torch.Tensor | None = None) -> list[dict[str, torch.Tensor]]:
    """The batch in micro-batches of at most `token_budget` padded tokens, each holding "rows": its row indices.

    Rows sorted by length pad to similar lengths (little waste); a single row longer than the budget still gets
    a micro-batch of its own. A second split keeps each prompt's rows together, longest group first, so that the
    shared-prompt forward (common/heads.py) runs the prompt once for all of them; the split that computes fewer
    tokens is used. What goes where never changes the update, only its speed and memory.

    skip [N] bool: rows left out, because their gradient is exactly zero (the script decides which). The loss's
    denominators are the caller's, over every row, so leaving them out changes nothing but the work. A process
    left with no row still gets one micro-batch, its shortest row with an empty "loss_mask": its backward adds
    zero and joins the gradient all-reduce, which every process must enter. DeepSpeed reduces gradients in
    every backward, not only at the step, so there every process gets as many micro-batches as the one with the
    most (padded with such empty ones).
    """
    keep = torch.arange(len(batch["input_ids"])) if skip is None else (~skip).nonzero().flatten()
    lengths = batch["attention_mask"].sum(-1)
    plan = [keep[rows] for rows in micro_batch_rows(lengths[keep], token_budget, batch["prompt_lens"][keep], batch["group"][keep])]
    count = len(plan)
    if PartialState().distributed_type == DistributedType.DEEPSPEED:
        count = int(all_gather(torch.tensor([count])).max())
    plan = [select(batch, rows) | {"rows": rows} for rows in plan]
    if len(lengths) and len(plan) < max(count, 1):  # placeholders: a zero-gradient backward, so the all-reduce meets
        empty = select(batch, lengths.argmin()[None]) | {"rows": lengths.argmin()[None]}
        empty["loss_mask"] = torch.zeros_like(empty["loss_mask"])
        plan += [empty] * (max(count, 1) - len(plan))
    return plan


def micro_batch_rows(lengths: torch.Tensor, token_budget: int, prompt_lens: torch.Tensor | None = None,
                     group: torch.Tensor | None = None) -> list[torch.Tensor]:
    """Row indices of `micro_batches`, from row lengths [N] (and, to keep prompts together, prompt_lens and group [N]).

    A plan, made on the CPU wherever the batch lies: its many scalar reads would each wait for a GPU."""
    lengths, prompt_lens, group = (None if t is None else t.cpu() for t in (lengths, prompt_lens, group))
    by_length = _fill(torch.argsort(lengths, descending=True).tolist(), lengths, token_budget)
    if group is None or not len(group):
        return by_length
    group_len = torch.zeros(int(group.max()) + 1, dtype=lengths.dtype).scatter_reduce(0, group, lengths, "amax")
    order = sorted(range(len(lengths)), key=lambda i: (-int(group_len[group[i]]), int(group[i]), -int(lengths[i])))
    by_prompt = _fill(order, lengths, token_budget)

    def computed(rows):  # tokens the shared-prompt forward runs: the distinct prompts, then each row from the shortest prompt on
        return len(set(group[rows].tolist())) * int(prompt_lens[rows].max()) + len(rows) * int(lengths[rows].max() - prompt_lens[rows].min())

    return min(by_length, by_prompt, key=lambda split: sum(computed(rows) for rows in split))


def _fill(order: list[int], lengths: torch.Tensor, token_budget: int) -> list[torch.Tensor]:
    """Greedy: rows in `order` into micro-batches while (rows x longest row) <= token_budget."""
    batches, current, width = [], [], 0
    for i in order:
        new_width = max(width, int(lengths[i]))
        if current and new_width * (len(current) + 1) > token_budget:
            batches.append(torch.tensor(current))
            current, new_width = [], int(lengths[i])
        current.append(i)
        width = new_width
    if current:
        batches.append(torch.tensor(current))
    return batches


@contextmanager
def accumulate_gradients(accelerator, model: nn.Module, sync: bool):
    """Backward passes inside add to the gradients; they are all-reduced over processes only where `sync` is
    True (the last micro-batch of an optimizer step): DDP's no_sync elsewhere, DeepSpeed's accumulation boundary."""
    if accelerator.distributed_type == DistributedType.DEEPSPEED:
        accelerator.sync_gradients = sync  # DeepSpeed reduces (and steps) inside backward, at the boundary only
    with nullcontext() if sync else accelerator.no_sync(model):
        yield


@torch.no_grad()
def policy_stats(logprobs: torch.Tensor, old_logprobs: torch.Tensor, entropy: torch.Tensor, mask: torch.Tensor,
                 num_tokens: float) -> dict[str, float]:
    """This micro-batch's share of two token means over the tokens the update computes (`num_tokens`: their global
    count): the policy's entropy, and the k3 estimate of KL(old policy || new policy). Rows the loop skips are not
    in them (nan when every row was skipped); the loss's own stats (policy_loss, clipfrac) cover every row."""
    mask = mask.float()
    log_ratio = logprobs - old_logprobs
    kl = (torch.exp(log_ratio) - 1) - log_ratio
    if not num_tokens:
        return {"losses/entropy": float("nan"), "losses/approx_kl": float("nan")}
    return {"losses/entropy": (entropy * mask).sum().item() / num_tokens, "losses/approx_kl": (kl * mask).sum().item() / num_tokens}


def add_stats(totals: dict[str, float], stats: dict[str, float]) -> None:
    """Add a micro-batch's stats to the step's `totals`: shares of a global mean add up, a `_max` key keeps the
    largest (every process adds the same keys in the same order: `step_stats` reduces them collectively)."""
    for k, v in stats.items():
        totals[k] = max(totals.get(k, float("-inf")), v) if k.endswith("_max") else totals.get(k, 0.0) + v


def step_stats(totals: dict[str, float], num_steps: int) -> dict[str, float]:
    """The step's stats over all processes: each mean summed over processes and averaged over the `num_steps`
    optimizer steps, each `_max` the largest anywhere (nan where nothing was computed)."""
    stats = {k: global_max(v) if k.endswith("_max") else global_sum(v) / num_steps for k, v in totals.items()}
    return {k: float("nan") if v == float("-inf") else v for k, v in stats.items()}


def build_optimizer(model: nn.Module, lr: float, weight_decay: float, warmup_steps: int, total_steps: int, schedule: str):
    """AdamW with linear warmup, then constant or cosine decay to 10% of `lr`."""
    if schedule not in ("constant", "cosine"):
        raise BadSpec(f"--lr-schedule must be 'constant' or 'cosine', got {schedule!r}")
    params = [p for p in model.parameters() if p.requires_grad]
    # fused: one kernel over all parameters instead of a loop of small ops (measured 9x faster per step than
    # the default for SmolLM2-135M on a 2-core CPU); plain tensors on CPU/CUDA only (not DTensor shards)
    fused = all(type(p.data) is torch.Tensor and p.device.type in ("cpu", "cuda") for p in params)
    optimizer = torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay, fused=fused)

    def factor(step: int) -> float:
        if step < warmup_steps:
            return (step + 1) / warmup_steps
        if schedule == "constant":
            return 1.0
        progress = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
        return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress))

    return optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
