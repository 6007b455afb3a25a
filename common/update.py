"""The PPO update machinery every script shares: log-probs, micro-batches, the exact optimizer step.

Batch layout: a dict of tensors, one row per sample (prompt + completion, right-padded):
    input_ids       [N, T]  prompt tokens then completion tokens then padding
    attention_mask  [N, T]  1 on prompt and completion tokens
    response_mask   [N, T]  1 on completion tokens only (the tokens the loss sees)
    ...             [N, T] or [N]  per-token or per-sample tensors the script adds
                            (old_logprobs, advantages, ...)
`logprobs[n, t]` is log p(input_ids[n, t] | input_ids[n, :t]): aligned with input_ids, so the
same response_mask selects tokens, log-probs and advantages.

Shared prompts: the G samples of a group repeat their prompt. `backbone_hidden` runs each distinct
prompt of a micro-batch once and the completions on top of its KV cache, and `micro_batches` keeps a
prompt's rows together when that computes fewer tokens. The results are those of one plain forward
per row (tested), so this is a speed-up, not an approximation.

Exact aggregation (DESIGN.md): the loss of a micro-batch is its token (or sequence) sum divided by
the token (or sequence) count of the global batch, summed over micro-batches by gradient
accumulation, and multiplied by the number of processes because DDP averages gradients. Any
micro-batch split on any number of processes then gives the gradient of the full batch.
"""

import math
from collections.abc import Callable
from contextlib import nullcontext

import torch
import torch.nn.functional as F
from accelerate.utils import DistributedType
from torch import nn
from torch.utils.checkpoint import checkpoint
from transformers import DynamicCache


class LogprobModel(nn.Module):
    """A causal LM whose forward returns per-token log-probs (and entropy), never full logits.

    A wrapper, not a function, because DDP and FSDP only synchronize gradients of work done inside
    the forward of the module they wrap: `accelerator.prepare` wraps this module.
    """

    def __init__(self, lm: nn.Module, chunk_size: int | None = None):
        super().__init__()
        self.lm = lm
        # response tokens whose logits exist at once; default: 2^24 logits (64 MiB in fp32) per chunk
        self.chunk_size = chunk_size or max(1, 2**24 // lm.get_output_embeddings().weight.shape[0])

    def forward(self, input_ids, attention_mask, response_mask, temperature: float = 1.0):
        backbone = getattr(self.lm, self.lm.base_model_prefix)
        hidden = backbone_hidden(backbone, input_ids, attention_mask, response_mask)  # [B, T, H]
        # the hidden state at t-1 predicts token t; only response tokens need a distribution
        targets_mask = response_mask[:, 1:].bool()  # [B, T-1]
        h = hidden[:, :-1][targets_mask]  # [M, H]
        targets = input_ids[:, 1:][targets_mask]  # [M]
        lm_head = self.lm.get_output_embeddings()
        logps, entropies = [], []
        for i in range(0, h.shape[0], self.chunk_size):
            args = (h[i : i + self.chunk_size], targets[i : i + self.chunk_size], lm_head.weight, lm_head.bias, temperature)
            if torch.is_grad_enabled():  # recompute the chunk's logits in backward instead of keeping them
                lp, ent = checkpoint(_chunk_logprobs, *args, use_reentrant=False)
            else:
                lp, ent = _chunk_logprobs(*args)
            logps.append(lp)
            entropies.append(ent)
        logprobs = hidden.new_zeros(input_ids.shape)  # [B, T]
        entropy = hidden.new_zeros(input_ids.shape)
        logprobs[:, 1:][targets_mask] = torch.cat(logps) if logps else h.new_zeros(0)
        entropy[:, 1:][targets_mask] = torch.cat(entropies).detach() if entropies else h.new_zeros(0)
        return logprobs, entropy


def _chunk_logprobs(h, targets, weight, bias, temperature: float):
    logits = F.linear(h, weight, bias).float() / temperature  # [c, V]
    lse = torch.logsumexp(logits, dim=-1)  # [c]
    logp = logits.gather(-1, targets[:, None]).squeeze(-1) - lse
    with torch.no_grad():  # entropy is a metric: keep it out of the graph
        entropy = lse - (torch.softmax(logits, dim=-1) * logits).sum(-1)
    return logp, entropy


def backbone_hidden(backbone: nn.Module, input_ids, attention_mask, response_mask) -> torch.Tensor:
    """Last hidden states [B, T, H] of right-padded prompt + completion rows, each distinct prompt computed once.

    The G samples of a group share their prompt, often the longer part of a row (a math question with a
    chat template, against a short completion). The prompts run once, keeping their KV cache; the cache is
    indexed out to each row, and the completions run on top of it, at their own positions. Gradients flow
    back through the cache into the one prompt pass. Equal to `backbone(input_ids, attention_mask)` on
    every prompt and completion position (up to float rounding; tested); what padding gets is unspecified.
    Falls back to the plain forward where a cache cannot be threaded through: gradient checkpointing
    (transformers drops the cache in checkpointed layers) and sharded parameters (FSDP, ZeRO-3: a second
    pass through each layer per forward is not something we can test here).
    """
    plain = lambda: backbone(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state  # noqa: E731
    if (backbone.training and getattr(backbone, "is_gradient_checkpointing", False)) or _sharded(backbone):
        return plain()
    starts = prompt_lengths(attention_mask, response_mask)  # [B]
    owner, first = prompt_groups(input_ids, starts)  # row -> its prompt; prompt -> a row holding it
    B, T = input_ids.shape
    if len(first) == B or int(starts.min()) == T:  # no prompt shared, or no completion at all
        return plain()
    arange = torch.arange(T, device=input_ids.device)
    # 1. the U distinct prompts, right-padded to the longest
    p_len = int(starts.max())
    p_mask = (arange[:p_len] < starts[first, None]).long()  # [U, Lp]
    cache = DynamicCache(config=backbone.config)
    h_prompt = backbone(input_ids=input_ids[first, :p_len], attention_mask=p_mask, past_key_values=cache,
                        use_cache=True).last_hidden_state  # [U, Lp, H]
    cache.batch_select_indices(owner)  # every row gets its prompt's keys and values
    # 2. the completions, on top of the cache: row b's token t >= starts[b] goes to column t - starts[b]
    c_len = T - int(starts.min())
    pos = starts[:, None] + arange[:c_len]  # [B, Lc] positions in the row (rotary positions too)
    c_ids = input_ids.gather(1, pos.clamp(max=T - 1))
    c_mask = attention_mask.gather(1, pos.clamp(max=T - 1)) * (pos < T)
    h_completion = backbone(input_ids=c_ids, attention_mask=torch.cat([p_mask[owner], c_mask], 1), position_ids=pos,
                            past_key_values=cache, use_cache=True).last_hidden_state  # [B, Lc, H]
    # 3. back to the rows' layout: position t < starts[b] from the prompt pass, the rest from the completion pass
    both = torch.cat([h_prompt[owner], h_completion], 1)  # [B, Lp + Lc, H]
    src = torch.where(arange < starts[:, None], arange, p_len + arange - starts[:, None])  # [B, T]
    return both.gather(1, src[..., None].expand(-1, -1, both.shape[-1]))


def prompt_lengths(attention_mask: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """[B] where each row's completion starts; a row with no response token (e.g. DAPO's masked overlong
    samples) counts as all prompt."""
    has_response = response_mask.bool().any(-1)
    return torch.where(has_response, response_mask.int().argmax(-1), attention_mask.sum(-1))


def prompt_groups(input_ids: torch.Tensor, starts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows with the same prompt (input_ids[b, :starts[b]]): (owner [B]: each row's prompt index in order of
    first appearance, first [U]: the first row holding each prompt)."""
    index: dict[tuple, int] = {}
    owner = [index.setdefault(tuple(row[:s]), len(index)) for row, s in zip(input_ids.tolist(), starts.tolist())]
    first = [owner.index(u) for u in range(len(index))]
    return torch.tensor(owner, device=input_ids.device), torch.tensor(first, device=input_ids.device)


def _sharded(module: nn.Module) -> bool:
    """Parameters sharded over processes: FSDP1 (wrapper modules), FSDP2 (DTensor), DeepSpeed ZeRO-3 (ds_id)."""
    return any(type(m).__name__ == "FullyShardedDataParallel" for m in module.modules()) or \
        any(type(p).__name__ == "DTensor" or hasattr(p, "ds_id") for p in module.parameters())


class ValueModel(nn.Module):
    """A causal LM's backbone with a scalar head (a critic); forward returns per-token values [B, T].

    `values[n, t]` is the value of the state before token t (the prefix input_ids[n, :t]), read from the
    hidden state at t-1: aligned with input_ids like LogprobModel's log-probs, 0 off the response.
    The LM head is dropped. The value head starts at zero, so every value starts at 0 ("The N
    Implementation Details of RLHF with PPO": value head zero-init). A module for LogprobModel's reason.
    """

    def __init__(self, lm: nn.Module):
        super().__init__()
        self.backbone = getattr(lm, lm.base_model_prefix)
        self.head = nn.Linear(lm.config.hidden_size, 1)
        nn.init.zeros_(self.head.weight)
        nn.init.zeros_(self.head.bias)

    def forward(self, input_ids, attention_mask, response_mask):
        hidden = backbone_hidden(self.backbone, input_ids, attention_mask, response_mask)  # [B, T, H]
        values = self.head(hidden[:, :-1]).squeeze(-1).float() * response_mask[:, 1:]  # [B, T-1]
        return F.pad(values, (1, 0))  # [B, T]


def micro_batches(lengths: torch.Tensor, token_budget: int, starts: torch.Tensor | None = None,
                  groups: torch.Tensor | None = None) -> list[torch.Tensor]:
    """Split row indices into micro-batches of at most `token_budget` padded tokens.

    Rows sorted by length pad to similar lengths (little waste); a single row longer than the budget
    still gets a micro-batch of its own. Given `starts` (prompt lengths) and `groups` (row -> prompt),
    a second split keeps each prompt's rows together, longest group first, so that backbone_hidden runs
    the prompt once for all of them; the split with fewer tokens to compute is returned.
    """
    by_length = _fill(torch.argsort(lengths, descending=True).tolist(), lengths, token_budget)
    if groups is None:
        return by_length
    group_len = torch.zeros(int(groups.max()) + 1, dtype=lengths.dtype).scatter_reduce(0, groups, lengths, "amax")
    order = sorted(range(len(lengths)), key=lambda i: (-int(group_len[groups[i]]), int(groups[i]), -int(lengths[i])))
    by_prompt = _fill(order, lengths, token_budget)

    def computed(mb):  # tokens backbone_hidden runs: the distinct prompts, then every row from the shortest prompt on
        return len(set(groups[mb].tolist())) * int(starts[mb].max()) + len(mb) * int(lengths[mb].max() - starts[mb].min())

    return min(by_length, by_prompt, key=lambda mbs: sum(computed(mb) for mb in mbs))


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


def row_micro_batches(batch: dict[str, torch.Tensor], token_budget: int) -> list[torch.Tensor]:
    """micro_batches for a batch of rows (make_batch's layout), aware of the prompts they share."""
    starts = prompt_lengths(batch["attention_mask"], batch["response_mask"])
    return micro_batches(batch["attention_mask"].sum(-1), token_budget, starts, prompt_groups(batch["input_ids"], starts)[0])


def select(batch: dict[str, torch.Tensor], idx: torch.Tensor) -> dict[str, torch.Tensor]:
    """Rows `idx` of every tensor in `batch`, trimmed to the longest of those rows."""
    width = int(batch["attention_mask"][idx].sum(-1).max())
    return {k: v[idx][:, :width] if v.dim() > 1 else v[idx] for k, v in batch.items()}


@torch.no_grad()
def compute_logprobs(model: nn.Module, batch: dict[str, torch.Tensor], token_budget: int, temperature: float):
    """Per-token log-probs [N, T] of the batch's response tokens, by micro-batches, without grad."""
    logprobs = torch.zeros_like(batch["input_ids"], dtype=torch.float32)
    for idx in row_micro_batches(batch, token_budget):
        mb = select(batch, idx)
        lp, _ = model(mb["input_ids"], mb["attention_mask"], mb["response_mask"], temperature)
        logprobs[idx, : lp.shape[1]] = lp.float()
    return logprobs


@torch.no_grad()
def compute_values(model: nn.Module, batch: dict[str, torch.Tensor], token_budget: int) -> torch.Tensor:
    """Per-token values [N, T] of a ValueModel on the batch's response tokens, by micro-batches, without grad."""
    values = torch.zeros_like(batch["input_ids"], dtype=torch.float32)
    for idx in row_micro_batches(batch, token_budget):
        mb = select(batch, idx)
        v = model(mb["input_ids"], mb["attention_mask"], mb["response_mask"])
        values[idx, : v.shape[1]] = v.float()
    return values


def global_sum(accelerator, x: float) -> float:
    """Sum a number over all processes."""
    t = torch.tensor(float(x), device=accelerator.device)
    return accelerator.reduce(t, reduction="sum").item() if accelerator.num_processes > 1 else t.item()


LossFn = Callable[[dict[str, torch.Tensor], float, float], tuple[torch.Tensor, dict[str, float]]]


def ppo_step(accelerator, model, optimizer, scheduler, batch, loss_fn: LossFn, token_budget: int, max_grad_norm: float) -> dict[str, float]:
    """One optimizer step over this process's `batch`, exact under any micro-batch split.

    `loss_fn(mb, num_tokens, num_seqs) -> (loss, stats)` must divide its token (or sequence) sums by
    `num_tokens` (or `num_seqs`), the counts of the GLOBAL batch, and return stats normalized the
    same way: summed over micro-batches and processes, they are then global-batch means.
    """
    num_tokens = global_sum(accelerator, batch["response_mask"].sum())
    num_seqs = global_sum(accelerator, batch["response_mask"].shape[0])
    stats: dict[str, float] = {}
    mbs = row_micro_batches(batch, token_budget)
    for i, idx in enumerate(mbs):
        # all-reduce gradients once, on the last micro-batch; each process has at least one
        last = i == len(mbs) - 1
        if accelerator.distributed_type == DistributedType.DEEPSPEED:
            accelerator.sync_gradients = last  # DeepSpeed steps inside backward, at the boundary only
        with nullcontext() if last else accelerator.no_sync(model):
            loss, mb_stats = loss_fn(select(batch, idx), num_tokens, num_seqs)
            accelerator.backward(loss * accelerator.num_processes)  # DDP averages; we want the sum
        for k, v in mb_stats.items():
            stats[k] = stats.get(k, 0.0) + float(v)
    grad_norm = accelerator.clip_grad_norm_(model.parameters(), max_grad_norm)
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    stats = {k: global_sum(accelerator, v) for k, v in stats.items()}
    stats["losses/grad_norm"] = float("nan") if grad_norm is None else float(grad_norm)  # None under DeepSpeed
    return stats


def ppo_update(accelerator, model, optimizer, scheduler, batch, loss_fn: LossFn, *, epochs: int, num_mini_batches: int,
               token_budget: int, max_grad_norm: float, seed: int) -> dict[str, float]:
    """`epochs` passes over the batch, each split into `num_mini_batches` optimizer steps.

    Mini-batches are a seeded shuffle of whole samples; each optimizer step is exact (`ppo_step`).
    Returns the stats of all steps, averaged.
    """
    n = batch["input_ids"].shape[0]
    if n % num_mini_batches:
        raise ValueError(f"--num-mini-batches {num_mini_batches} must divide the {n} samples per process")
    generator = torch.Generator().manual_seed(seed)
    totals: dict[str, float] = {}
    steps = 0
    for _ in range(epochs):
        perm = torch.randperm(n, generator=generator) if num_mini_batches > 1 else torch.arange(n)
        for idx in perm.chunk(num_mini_batches):
            mini = {k: v[idx] for k, v in batch.items()}
            for k, v in ppo_step(accelerator, model, optimizer, scheduler, mini, loss_fn, token_budget, max_grad_norm).items():
                totals[k] = totals.get(k, 0.0) + v
            steps += 1
    return {k: v / steps for k, v in totals.items()}


def build_optimizer(model: nn.Module, lr: float, weight_decay: float, warmup_steps: int, total_steps: int, schedule: str):
    """AdamW with linear warmup, then constant or cosine decay to 10% of `lr`."""
    if schedule not in ("constant", "cosine"):
        raise ValueError(f"--lr-schedule must be 'constant' or 'cosine', got {schedule!r}")
    params = [p for p in model.parameters() if p.requires_grad]
    # fused: one kernel over all parameters instead of a loop of small ops (measured 9x faster per step
    # than the default on CPU for SmolLM2-135M); plain tensors on CPU/CUDA only (not DTensor shards)
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


def make_batch(prompt_ids: list[list[int]], completion_ids: list[list[int]], pad_id: int) -> dict[str, torch.Tensor]:
    """Right-padded [N, T] tensors (input_ids, attention_mask, response_mask) from token lists."""
    lengths = [len(p) + len(c) for p, c in zip(prompt_ids, completion_ids)]
    input_ids = torch.full((len(lengths), max(lengths, default=0)), pad_id, dtype=torch.long)  # 0 rows: an empty batch
    attention_mask = torch.zeros_like(input_ids)
    response_mask = torch.zeros_like(input_ids)
    for i, (p, c) in enumerate(zip(prompt_ids, completion_ids)):
        input_ids[i, : len(p) + len(c)] = torch.tensor(p + c)
        attention_mask[i, : len(p) + len(c)] = 1
        response_mask[i, len(p) : len(p) + len(c)] = 1
    return {"input_ids": input_ids, "attention_mask": attention_mask, "response_mask": response_mask}
