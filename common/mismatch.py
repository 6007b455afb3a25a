"""The sampler-trainer mismatch: measured every step, and corrected by importance weights (`--sampler-is`).

The engine that samples a completion (vLLM, or HF generate with a KV cache) and the trainer that scores it compute
the same policy with different kernels, and in bf16 with different roundings: the sampler's log-prob of a sampled
token is not the trainer's. The update then treats samples of one policy (the sampler's, q) as samples of another
(the trainer's, pi_old): off-policy without knowing it (Yao et al. 2025, "Your Efficient RL Framework Secretly
Brings You Off-Policy RL Training"). Each completion carries the sampler's own log-probs of its tokens
(common/generation.py), so both are known and the mismatch is measured, not guessed:
    w_t = exp(log pi_old(y_t) - log q(y_t))      (detached; pi_old: the trainer's log-probs before the update)
Token modes weigh each token's policy-gradient term by its own w_t; sequence modes by the row's
w = exp(sum_t (log pi_old - log q)), the likelihood ratio of the whole completion. Truncate: min(w, cap) (truncated
importance sampling, Yao et al.); mask: w where w <= cap, else 0 (the token or row leaves the loss). These are TRL's
four `vllm_importance_sampling_mode`s with its `vllm_importance_sampling_cap` (TRL's default: sequence_mask, 3.0),
verl's rollout importance sampling at token and sequence level. As in TRL, the weight multiplies the clipped
surrogate only, never a KL term (which the trainer computes on its own samples' log-probs), and a row's weights
depend on that row alone: micro-batching, processes and the zero-row skip see the same weights.

The sampler's log-probs are of the distribution it drew from (temperature, and renormalized over the top-k/top-p set
when those are on, common/generation.py), the trainer's of the full distribution at that temperature: with top-k or
top-p on, w_t also carries the kept probability mass (<= 1), which is part of the mismatch (the samples really come
from the truncated distribution).
"""

import torch

MODES = ("none", "token_truncate", "token_mask", "sequence_truncate", "sequence_mask")


@torch.no_grad()
def sampler_weights(old_logprobs: torch.Tensor, sampler_logprobs: torch.Tensor, mask: torch.Tensor, mode: str,
                    cap: float) -> torch.Tensor | None:
    """Importance weights [B, T] (token modes) or [B, 1] (sequence modes) for the policy loss; None for mode "none".

    old_logprobs, sampler_logprobs, mask: [B, T], aligned with input_ids; `mask`: the response tokens (a sequence's
    ratio is over all of them)."""
    if mode == "none":
        return None
    log_ratio = (old_logprobs - sampler_logprobs) * mask  # [B, T], 0 off the response
    if mode.startswith("sequence"):
        log_ratio = log_ratio.sum(-1, keepdim=True)  # [B, 1]
    weights = torch.exp(log_ratio)
    if mode.endswith("truncate"):
        return weights.clamp(max=cap)
    if mode.endswith("mask"):
        return weights.masked_fill(weights > cap, 0.0)
    raise ValueError(f"unknown sampler correction {mode!r}: expected one of {', '.join(MODES)}")


@torch.no_grad()
def mismatch_stats(old_logprobs: torch.Tensor, sampler_logprobs: torch.Tensor, weights: torch.Tensor | None,
                   mask: torch.Tensor, num_tokens: float) -> dict[str, float]:
    """This micro-batch's share of token means over the tokens the update computes (`num_tokens`: their global
    count), as common/update.py's policy_stats: |log pi_old - log q|, the k3 estimate of KL(q || pi_old) from q's own
    samples, and the weight applied (1 without a correction); and, as `_max` keys, the largest token ratio
    pi_old / q and its inverse (the largest over micro-batches and processes: common/update.py's add_stats)."""
    mask = mask.bool()
    log_ratio = (old_logprobs - sampler_logprobs)[mask]  # log(pi_old / q) per token
    stats = {  # -inf: no token here (a placeholder row), the identity of a max
        "rollout/sampler_ratio_max": log_ratio.max().exp().item() if len(log_ratio) else float("-inf"),
        "rollout/sampler_inv_ratio_max": (-log_ratio).max().exp().item() if len(log_ratio) else float("-inf"),
    }
    if not num_tokens:
        return stats | {k: float("nan") for k in ("rollout/sampler_abs_diff", "rollout/sampler_kl",
                                                   "rollout/sampler_is_weight")}
    applied = torch.ones_like(old_logprobs) if weights is None else weights.expand_as(old_logprobs)
    return stats | {
        "rollout/sampler_abs_diff": log_ratio.abs().sum().item() / num_tokens,
        "rollout/sampler_kl": (torch.exp(log_ratio) - 1 - log_ratio).sum().item() / num_tokens,
        "rollout/sampler_is_weight": applied[mask].sum().item() / num_tokens,
    }
