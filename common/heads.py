"""Model heads for the update: a causal LM's per-token log-probs (the policy) and per-token values (a critic).

Both read a batch in common/update.py's layout and return tensors aligned with its input_ids [B, T].
They are modules, not functions, because DDP and FSDP only synchronize gradients of work done inside
the forward of the module they wrap: `accelerator.prepare` wraps these.

Shared prompts: the G samples of a group repeat their prompt, often the longer part of a row (a math
question in a chat template, against a short completion). `backbone_hidden` runs each distinct prompt
of a micro-batch once and the completions on top of its KV cache: that is the saving, about (G - 1) / G
of the prompt tokens' forward and backward. It reads the group structure the batch records, and falls
back to one plain forward where a KV cache cannot be threaded through the layers (gradient
checkpointing, sharded parameters) or no prompt is shared. The results equal a plain forward (tested).
"""

import torch
import torch.nn.functional as F
from torch import nn
from transformers import DynamicCache

from common.model import sharding
from common.update import micro_batches


class LogprobModel(nn.Module):
    """A causal LM whose forward returns per-token log-probs and entropies [B, T], never full logits.

    Both carry gradients: an entropy bonus in a script's loss trains. Logging the entropy only costs
    nothing in backward: `_Logprobs` keeps no logits, recomputes them in backward, and adds the
    entropy's term there only when the entropy received a gradient.
    """

    def __init__(self, lm: nn.Module, chunk_size: int | None = None, fp32_head: bool = False):
        super().__init__()
        self.lm = lm
        self.fp32_head = fp32_head  # the logits in fp32 under a bf16 autocast (common/precision.py); False: in bf16
        # response tokens whose logits exist at once; default: 2^24 logits (64 MiB in fp32) per chunk
        self.chunk_size = chunk_size or max(1, 2**24 // lm.get_output_embeddings().weight.shape[0])

    def forward(self, batch: dict[str, torch.Tensor], temperature: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
        input_ids, response_mask = batch["input_ids"], batch["response_mask"]
        hidden = backbone_hidden(self.lm.base_model, batch)  # [B, T, H]
        # the hidden state at t-1 predicts token t; only response tokens need a distribution
        targets_mask = response_mask[:, 1:].bool()  # [B, T-1]
        h = hidden[:, :-1][targets_mask]  # [M, H]
        targets = input_ids[:, 1:][targets_mask]  # [M]
        lm_head = self.lm.get_output_embeddings()
        logps, entropies = _Logprobs.apply(h, targets, lm_head.weight, lm_head.bias, temperature, self.fp32_head,
                                           self.chunk_size)  # [M] each
        logprobs = hidden.new_zeros(input_ids.shape, dtype=torch.float32)  # [B, T]
        entropy = hidden.new_zeros(input_ids.shape, dtype=torch.float32)
        logprobs[:, 1:][targets_mask] = logps
        entropy[:, 1:][targets_mask] = entropies
        return logprobs, entropy


class _Logprobs(torch.autograd.Function):
    """(log p(target), entropy) [M] of hidden states [M, H] under the LM head, at a temperature, chunk by chunk.

    The [c, V] logits of a chunk of c rows exist only inside forward and, recomputed, inside backward: nothing of
    size V is kept between the two (what activation checkpointing would give, without its recomputed entropy
    branch staying alive when the entropy only is logged). With z = logits / T, p = softmax(z), H = -sum p log p:
        d log p_t / dz = onehot_t - p          d H / dz = -p * (log p + H)
    Under bf16 autocast the matmuls run in bf16, as autocast would run them, on a bf16 copy of the head's weight
    made once per call (kept for backward), not once per chunk and matmul; with `fp32_head` in fp32, on the fp32
    hidden states (the residual stream stays fp32 under autocast). The log-softmax is fp32 in every case.
    """

    @staticmethod
    def forward(ctx, h, targets, weight, bias, temperature: float, fp32_head: bool, chunk_size: int):
        device = h.device.type
        low = torch.is_autocast_enabled(device) and not fp32_head
        dtype = torch.get_autocast_dtype(device) if low else torch.float32
        x, w = h.to(dtype), weight.to(dtype)  # the weight's cast: once here, for every chunk, forward and backward
        b = None if bias is None else bias.to(dtype)
        ctx.temperature, ctx.chunk_size = temperature, chunk_size
        ctx.save_for_backward(x, targets, w, b)
        ctx.dtypes = h.dtype, weight.dtype, None if bias is None else bias.dtype
        ctx.set_materialize_grads(False)  # an output nobody differentiates (the logged entropy) gets None
        logps, entropies = [], []
        with torch.autocast(device, enabled=False):
            for i in range(0, x.shape[0], chunk_size):
                logp_all = (F.linear(x[i : i + chunk_size], w, b).float() / temperature).log_softmax(-1)  # [c, V]
                logps.append(logp_all.gather(-1, targets[i : i + chunk_size, None]).squeeze(-1))
                entropies.append(-(logp_all.exp() * logp_all).sum(-1))
        empty = x.new_zeros(0, dtype=torch.float32)
        return (torch.cat(logps), torch.cat(entropies)) if logps else (empty, empty.clone())

    @staticmethod
    def backward(ctx, grad_logp, grad_entropy):
        x, targets, w, b = ctx.saved_tensors
        h_dtype, w_dtype, b_dtype = ctx.dtypes
        c = ctx.chunk_size
        if grad_logp is None and grad_entropy is None:
            return (None,) * 7
        grad_h = torch.empty_like(x, dtype=h_dtype) if ctx.needs_input_grad[0] else None
        grad_w = torch.zeros_like(w, dtype=w_dtype) if ctx.needs_input_grad[2] else None
        grad_b = torch.zeros_like(b, dtype=b_dtype) if b is not None and ctx.needs_input_grad[3] else None
        with torch.autocast(x.device.type, enabled=False):
            for i in range(0, x.shape[0], c):
                xc = x[i : i + c]
                logp_all = F.linear(xc, w, b).float().div_(ctx.temperature).log_softmax(-1)  # [c, V]; at most 3 [c, V]
                p = logp_all.exp()
                grad_z = None
                if grad_entropy is not None:  # -p (log p + H) g, in place of log p
                    entropy = -(p * logp_all).sum(-1, keepdim=True)
                    grad_z = logp_all.add_(entropy).mul_(p).mul_(-grad_entropy[i : i + c, None])
                del logp_all
                if grad_logp is not None:  # (onehot - p) g, in place of p
                    g = grad_logp[i : i + c, None]
                    p.mul_(-g).scatter_add_(1, targets[i : i + c, None], g.float())
                    grad_z = p if grad_z is None else grad_z.add_(p)
                grad_logits = grad_z.div_(ctx.temperature).to(w.dtype)  # [c, V], in the dtype the matmul ran in
                del p, grad_z
                if grad_h is not None:
                    grad_h[i : i + c] = grad_logits @ w
                if grad_w is not None:
                    grad_w += grad_logits.T @ xc
                if grad_b is not None:
                    grad_b += grad_logits.sum(0)
        return grad_h, None, grad_w, grad_b, None, None, None


class ValueModel(nn.Module):
    """A causal LM's backbone with a scalar head (a critic); forward returns per-token values [B, T].

    `values[n, t]` is the value of the state before token t (the prefix input_ids[n, :t]), read from the
    hidden state at t-1: aligned with input_ids like LogprobModel's log-probs, 0 off the response.
    The LM head is dropped. The value head starts at zero, so every value starts at 0 ("The N
    Implementation Details of RLHF with PPO": value head zero-init).
    """

    def __init__(self, lm: nn.Module):
        super().__init__()
        self.backbone = lm.base_model
        self.head = nn.Linear(lm.config.hidden_size, 1)
        nn.init.zeros_(self.head.weight)
        nn.init.zeros_(self.head.bias)

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        hidden = backbone_hidden(self.backbone, batch)  # [B, T, H]
        values = self.head(hidden[:, :-1]).squeeze(-1).float() * batch["response_mask"][:, 1:]  # [B, T-1]
        return F.pad(values, (1, 0))  # [B, T]


def backbone_hidden(backbone: nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """Last hidden states [B, T, H] of the batch's rows, each distinct prompt computed once (module docstring).

    The prompts run once, keeping their KV cache; the cache is indexed out to each row, and the completions
    run on top of it, at their own positions. Gradients flow back through the cache into the one prompt pass.
    Equal to `backbone(input_ids, attention_mask)` on every prompt and completion position (up to float
    rounding; tested); what padding gets is unspecified.
    """
    input_ids, attention_mask, starts = batch["input_ids"], batch["attention_mask"], batch["prompt_lens"]
    plain = lambda: backbone(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state  # noqa: E731
    # transformers drops the cache in checkpointed layers; sharded layers (FSDP, ZeRO-3) would gather twice
    if (backbone.training and getattr(backbone, "is_gradient_checkpointing", False)) or sharding(backbone):
        return plain()
    groups, owner = torch.unique(batch["group"], return_inverse=True)  # owner [B]: each row's prompt, 0..U-1
    B, T = input_ids.shape
    if len(groups) == B or int(starts.min()) >= T:  # no prompt shared, or no completion at all
        return plain()
    arange = torch.arange(T, device=input_ids.device)
    first = torch.full((len(groups),), B, device=owner.device).scatter_reduce(0, owner, torch.arange(B, device=owner.device), "amin")
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


@torch.no_grad()
def compute_logprobs(model: nn.Module, batch: dict[str, torch.Tensor], token_budget: int, temperature: float,
                     skip: torch.Tensor | None = None) -> torch.Tensor:
    """Per-token log-probs [N, T] of the batch's response tokens, by micro-batches, without grad; `skip` rows [N] are
    not computed (0), unless every row is skipped: then micro_batches' placeholder row gets its true values."""
    logprobs = torch.zeros_like(batch["input_ids"], dtype=torch.float32)
    for mb in micro_batches(batch, token_budget, skip):
        lp, _ = model(mb, temperature)
        logprobs[mb["rows"], : lp.shape[1]] = lp.float()
    return logprobs


@torch.no_grad()
def compute_values(model: nn.Module, batch: dict[str, torch.Tensor], token_budget: int) -> torch.Tensor:
    """Per-token values [N, T] of a ValueModel on the batch's response tokens, by micro-batches, without grad."""
    values = torch.zeros_like(batch["input_ids"], dtype=torch.float32)
    for mb in micro_batches(batch, token_budget):
        values[mb["rows"], : mb["input_ids"].shape[1]] = model(mb).float()
    return values
