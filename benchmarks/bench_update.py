"""The update's speed per precision setting: seconds per 1k tokens, its share of this CPU's matmul peak, and where the
time goes (torch.profiler, by operator), on a batch shaped like the default run's.

The embedded SmolLM2-135M; 8 prompts x 8 completions of random tokens (prompt 40, completions 20-90 tokens, the
lengths a default step sees), one forward + backward of Lite PPO's loss per setting, by micro-batches of 2048 tokens
as the scripts run it, best of --reps after a warm-up. The peak is one matmul at the MLP's shape (2048x576 @ 576x1536)
in fp32 and in bf16, timed in the same process; the update's GFLOP/s count the matmuls it must do (the body forward
and backward on each distinct prompt and completion token, the LM head's four matmuls on each response token: forward,
its recompute, and two in backward).

    python benchmarks/bench_update.py                         # fp32, bf16, bf16-fp32-head
    python benchmarks/bench_update.py --settings fp32 bf16 --profile 25
"""

import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
import tyro

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import lite_ppo  # noqa: E402
from common.heads import LogprobModel  # noqa: E402
from common.model import DEFAULT_MODEL, load_policy  # noqa: E402
from common.precision import SETTINGS, machine  # noqa: E402
from common.update import make_batch, micro_batches  # noqa: E402


@dataclass
class Args:
    settings: list[str] = field(default_factory=lambda: ["fp32", "bf16", "bf16-fp32-head"])
    """precision settings whose update is timed (bf16-gen's update is fp32's)"""
    reps: int = 2
    """timed repetitions (the best is reported) after one warm-up"""
    profile: int = 12
    """operators listed per setting from one profiled repetition (0: no profile)"""
    micro_batch_tokens: int = 2048
    """padded tokens per forward/backward, as --micro-batch-tokens"""


def matmul_gflops(dtype: torch.dtype, m: int = 2048, k: int = 576, n: int = 1536, reps: int = 10) -> float:
    a, b = torch.randn(m, k).to(dtype), torch.randn(k, n).to(dtype)
    a @ b
    start = time.perf_counter()
    for _ in range(reps):
        a @ b
    return 2 * m * k * n * reps / (time.perf_counter() - start) / 1e9


def default_like_batch(vocab: int, seed: int = 0) -> dict:
    g = torch.Generator().manual_seed(seed)
    prompts = [torch.randint(100, vocab, (40,), generator=g).tolist() for _ in range(8)]
    completions = [torch.randint(100, vocab, (int(torch.randint(20, 91, (1,), generator=g)),), generator=g).tolist()
                   for _ in range(64)]
    batch = make_batch(prompts, completions, pad_id=0)
    batch["advantages"] = torch.randn(64, generator=g)
    return batch


def update(model: LogprobModel, batch: dict, setting: str, budget: int) -> None:
    """One forward + backward of Lite PPO's loss over the batch, by micro-batches, as the scripts' section 6."""
    largs, s = lite_ppo.Args(), SETTINGS[setting]
    model.fp32_head = s.fp32_head
    num_tokens = float(batch["response_mask"].sum())
    for mb in micro_batches(batch, budget):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=s.update == torch.bfloat16):
            logprobs, _ = model(mb)
        loss, _ = lite_ppo.policy_loss(logprobs, logprobs.detach(), mb["advantages"], mb["response_mask"], largs,
                                       num_tokens=num_tokens)
        loss.backward()
    model.zero_grad(set_to_none=True)


def main(args: Args) -> None:
    info = machine()
    print(f"[bench] {info['cpu']} (family {info['cpu_family']} model {info['cpu_model']}), bf16 flags "
          f"{info['cpu_bf16_flags'] or 'none'}, torch {info['torch']}, {info['torch_threads']} threads")
    peak = {"fp32": matmul_gflops(torch.float32), "bf16": matmul_gflops(torch.bfloat16)}
    print(f"[bench] matmul 2048x576 @ 576x1536: fp32 {peak['fp32']:.0f} GFLOP/s, bf16 {peak['bf16']:.0f} GFLOP/s "
          f"({peak['bf16'] / peak['fp32']:.2f}x)")
    _, lm, _ = load_policy(DEFAULT_MODEL)
    model = LogprobModel(lm).train()
    batch = default_like_batch(lm.config.vocab_size)
    cfg = lm.config
    body_params = sum(p.numel() for n, p in lm.named_parameters() if "layers." in n)
    unique = int(batch["prompt_lens"][::8].sum() + (batch["attention_mask"].sum(-1) - batch["prompt_lens"]).sum())
    response = int(batch["response_mask"].sum())
    flops = 6 * body_params * unique + 4 * 2 * cfg.hidden_size * cfg.vocab_size * response
    padded = sum(mb["input_ids"].numel() for mb in micro_batches(batch, args.micro_batch_tokens))
    print(f"[bench] batch: 64 rows, {unique} distinct tokens, {response} response tokens, {padded} padded tokens in "
          f"micro-batches of {args.micro_batch_tokens}; {flops / 1e9:.0f} GFLOP of matmuls per update")
    results = {}
    for setting in args.settings:
        update(model, batch, setting, args.micro_batch_tokens)  # warm-up: oneDNN picks its kernels
        best = float("inf")
        for _ in range(args.reps):
            start = time.perf_counter()
            update(model, batch, setting, args.micro_batch_tokens)
            best = min(best, time.perf_counter() - start)
        results[setting] = best
        dtype = "bf16" if SETTINGS[setting].update == torch.bfloat16 else "fp32"
        print(f"\n== {setting}: {best:.2f} s per update, {1000 * best / padded:.3f} s per 1k padded tokens, "
              f"{flops / best / 1e9:.0f} GFLOP/s = {100 * flops / best / 1e9 / peak[dtype]:.0f}% of the {dtype} matmul "
              f"peak{f', {results[args.settings[0]] / best:.2f}x ' + args.settings[0] if setting != args.settings[0] else ''}")
        if args.profile:
            with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
                update(model, batch, setting, args.micro_batch_tokens)
            print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=args.profile,
                                            max_name_column_width=40))


if __name__ == "__main__":
    main(tyro.cli(Args))
