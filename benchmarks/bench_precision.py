"""Where bf16 loses accuracy in the update: each part's log-prob error, the gradient's, and how much of a step survives.

On the default run's first rollout (the embedded model, its first step's 8 prompts x 8 samples at temperature 1, seed
1, sampled in fp32), against the same computation in fp32, at the start weights and after each of --steps fp32 AdamW
steps (lr 2e-5, on that same batch):
1. the per-token |log p - log p_fp32| of each part in reduced precision on its own: the body (the transformer under
   autocast), the LM head (the logits' matmul), the log-softmax over the vocabulary; and of the settings that
   combine them (common/precision.py: bf16 = bf16 body and head, bf16-fp32-head = bf16 body, fp32 head), and fp16
   (emulated where the CPU has no fp16 unit: the same roundings, not its speed);
2. the gradient of Lite PPO's loss on the batch in each setting against fp32's, per layer group: cosine similarity
   and relative error ||g - g_fp32|| / ||g_fp32|| (fp16's with --fp16-gradient); beside it two references, fp32 against itself split into other
   micro-batches (summation order) and fp32 on a second rollout (another seed: the sampling noise a step has anyway);
3. what a step leaves: after one fp32 AdamW step, the change of each token's log-prob as each setting computes it
   against the change fp32 computes (relative error of the change, and its correlation), and the share of weights a
   bf16 copy of the model (a bf16 sampler's, autocast's) sees change at all.

    python benchmarks/bench_precision.py                       # ~10 min on 2 cores
    python benchmarks/bench_precision.py --steps 1 --prompts 4 --output results/precision.json
The machine (CPU model, its bf16 flags) is printed first: the errors are its kernels' roundings.
"""

import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
import tyro

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import lite_ppo  # noqa: E402
from common.data import batch_indices, load_rows, tokenize_prompts  # noqa: E402
from common.generation import SamplingConfig, make_engine, rollout_seed  # noqa: E402
from common.heads import LogprobModel, backbone_hidden  # noqa: E402
from common.model import DEFAULT_MODEL, load_policy  # noqa: E402
from common.precision import machine  # noqa: E402
from common.reward import batch_math_reward  # noqa: E402
from common.update import make_batch, micro_batches  # noqa: E402

F32, BF16, F16 = torch.float32, torch.bfloat16, torch.float16
PARTS = {  # name: (body, head matmul, log-softmax) dtypes; the rest of the computation fp32
    "bf16 body": (BF16, F32, F32),
    "bf16 head": (F32, BF16, F32),
    "bf16 log-softmax": (F32, F32, BF16),
    "bf16 (body + head)": (BF16, BF16, F32),
    "bf16-fp32-head (body)": (BF16, F32, F32),
    "fp16 (body + head)": (F16, F16, F32),
    "fp16 body, fp32 head": (F16, F32, F32),
}
GRADIENTS = {"bf16": (BF16, False), "bf16-fp32-head": (BF16, True)}  # autocast dtype, fp32 head
FP16_GRADIENT = {"fp16, fp32 head": (F16, True)}  # --fp16-gradient: emulated where there is no fp16 unit, very slow


@dataclass
class Args:
    model: str = DEFAULT_MODEL
    """the model (default: the embedded SmolLM2-135M-Instruct)"""
    dataset: str = "arithmetic:digits=1"
    """the prompts: the first step's of this data set, as lite_ppo.py draws them"""
    prompts: int = 8
    """prompts of the rollout"""
    group_size: int = 8
    """samples per prompt"""
    max_new_tokens: int = 96
    """completion length limit"""
    seed: int = 1
    """the run's seed"""
    steps: int = 2
    """fp32 AdamW steps on the batch, measured after each (and before the first)"""
    learning_rate: float = 2e-5
    """their learning rate (lite_ppo.py's default)"""
    fp16_gradient: bool = False
    """also the gradient under fp16 autocast (on a CPU without avx512_fp16: emulated, >10 min for the default batch)"""
    backend: str = "hf"
    """the engine that samples the rollout (fp32): hf (no engine start) or vllm"""
    output: str | None = None
    """also write the figures as JSON here"""


def part_logprobs(lm, batch, body: torch.dtype, head: torch.dtype, softmax: torch.dtype) -> torch.Tensor:
    """Per-token log-probs [M] of the batch's response tokens, each part computed in its own dtype (no grad)."""
    with torch.no_grad(), torch.autocast("cpu", dtype=body, enabled=body != F32):
        hidden = backbone_hidden(lm.base_model, batch)  # [B, T, H]
    mask = batch["response_mask"][:, 1:].bool()
    h, targets = hidden[:, :-1][mask].float(), batch["input_ids"][:, 1:][mask]
    weight = lm.get_output_embeddings().weight
    out = []
    for i in range(0, len(h), 256):
        with torch.no_grad():
            logits = F.linear(h[i:i + 256].to(head), weight.to(head)).to(softmax)
            out.append(logits.log_softmax(-1).gather(-1, targets[i:i + 256, None]).squeeze(-1).float())
    return torch.cat(out)


def setting_gradient(model: LogprobModel, batch, largs, autocast: torch.dtype, fp32_head: bool, budget: int = 2048):
    """Lite PPO's gradient on the batch (on-policy: old = current), by micro-batches as the scripts run it."""
    model.zero_grad(set_to_none=True)
    model.fp32_head = fp32_head
    num_tokens = float(batch["response_mask"].sum())
    for mb in micro_batches(batch, budget):
        with torch.autocast("cpu", dtype=autocast, enabled=autocast != F32):
            logprobs, _ = model(mb)
        loss, _ = lite_ppo.policy_loss(logprobs, logprobs.detach(), mb["advantages"], mb["response_mask"], largs,
                                       num_tokens=num_tokens)
        loss.backward()
    return {n: p.grad.detach().clone() for n, p in model.named_parameters()}


def group_of(name: str, layers: int) -> str:
    if "embed" in name or "lm_head" in name:
        return "embedding (= tied head)"
    if "layers." not in name:
        return "final norm"
    i = int(name.split("layers.")[1].split(".")[0])
    third = ["layers 0-9", "layers 10-19", "layers 20-29"][min(2, 3 * i // layers)]
    if "norm" in name:
        return "norms"
    return f"{'attention' if 'attn' in name else 'MLP'}, {third}" if layers >= 30 else ('attention' if 'attn' in name else 'MLP')


def compare(grad: dict, ref: dict, layers: int) -> dict:
    """Per group and overall: cosine(g, ref) and ||g - ref|| / ||ref||."""
    groups = {}
    for n in ref:
        groups.setdefault(group_of(n, layers), []).append(n)
    groups["all"] = list(ref)
    out = {}
    for g, names in groups.items():
        a = torch.cat([grad[n].flatten().double() for n in names])
        b = torch.cat([ref[n].flatten().double() for n in names])
        out[g] = {"cos": F.cosine_similarity(a, b, dim=0).item(), "rel_err": ((a - b).norm() / b.norm()).item()}
    return out


def rollout(engine, tokenizer, args: Args, seed: int):
    rows = load_rows(args.dataset)
    rows = [rows[i] for i in batch_indices(len(rows), args.prompts, args.seed, 0)]
    prompt_ids = tokenize_prompts(tokenizer, [r["question"] for r in rows], "chat")
    sampling = SamplingConfig(max_new_tokens=args.max_new_tokens, temperature=1.0, seed=rollout_seed(seed, 0, 0, 1))
    completions = engine.generate(prompt_ids, args.group_size, sampling)
    batch = make_batch(prompt_ids, [c.token_ids for c in completions], tokenizer.pad_token_id)
    correct = torch.tensor(batch_math_reward([c.text for c in completions],
                                             [r["answer"] for r in rows for _ in range(args.group_size)]))
    batch["advantages"] = lite_ppo.compute_advantages(correct.float(), args.group_size)
    return batch


def main(args: Args) -> None:
    info = machine()
    print(f"[bench] {info['cpu']} (family {info['cpu_family']} model {info['cpu_model']}), bf16 flags "
          f"{info['cpu_bf16_flags'] or 'none'}, torch {info['torch']}, {info['torch_threads']} threads")
    t0 = time.perf_counter()
    path, lm, tokenizer = load_policy(args.model)
    model = LogprobModel(lm)
    engine = make_engine(args.backend, model_path=path, model=lm, tokenizer=tokenizer, seed=args.seed,
                         max_model_len=None, gpu_memory_utilization=0.3, enable_sleep_mode=False)
    batch, other = rollout(engine, tokenizer, args, args.seed), rollout(engine, tokenizer, args, args.seed + 1)
    engine.close()
    tokens = int(batch["response_mask"].sum())
    print(f"[bench] rollout: {len(batch['input_ids'])} samples, {tokens} response tokens, "
          f"{int((batch['advantages'] != 0).sum())} with a nonzero advantage ({time.perf_counter() - t0:.0f} s)")
    largs = lite_ppo.Args()
    layers = lm.config.num_hidden_layers
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.learning_rate, weight_decay=0.0)
    results = {"machine": info, "tokens": tokens, "steps": []}
    mask = batch["response_mask"][:, 1:].bool()
    for step in range(args.steps + 1):
        t1 = time.perf_counter()
        record = {"step": step, "logprob_error": {}, "gradient": {}}
        ref = part_logprobs(lm, batch, F32, F32, F32)
        model.eval()
        for name, dtypes in PARTS.items():
            d = (part_logprobs(lm, batch, *dtypes) - ref).abs()
            record["logprob_error"][name] = {"mean": d.mean().item(), "p99": d.quantile(0.99).item(), "max": d.max().item()}
        # the real code path (common/heads.py) for the two bf16 settings: must equal the parts above
        for name, fp32_head in (("LogprobModel bf16", False), ("LogprobModel bf16-fp32-head", True)):
            model.fp32_head = fp32_head
            with torch.no_grad(), torch.autocast("cpu", dtype=BF16):
                lp, _ = model(batch)
            d = (lp[:, 1:][mask] - ref).abs()
            record["logprob_error"][name] = {"mean": d.mean().item(), "p99": d.quantile(0.99).item(), "max": d.max().item()}
        model.train()
        g32 = setting_gradient(model, batch, largs, F32, True)
        record["gradient"]["fp32, other micro-batches"] = compare(setting_gradient(model, batch, largs, F32, True, 700), g32, layers)
        record["gradient"]["fp32, another rollout"] = compare(setting_gradient(model, other, largs, F32, True), g32, layers)
        for name, (autocast, fp32_head) in (GRADIENTS | (FP16_GRADIENT if args.fp16_gradient else {})).items():
            record["gradient"][name] = compare(setting_gradient(model, batch, largs, autocast, fp32_head), g32, layers)
        # 3. one fp32 AdamW step with g32: the change of the log-probs as each setting sees it
        before = {name: part_logprobs(lm, batch, *PARTS[name]) for name in ("bf16 (body + head)", "bf16-fp32-head (body)")}
        old_weights = {n: p.detach().clone() for n, p in model.named_parameters()}
        for n, p in model.named_parameters():
            p.grad = g32[n]
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        delta32 = part_logprobs(lm, batch, F32, F32, F32) - ref
        record["step_change"] = {"fp32 mean |change|": delta32.abs().mean().item()}
        for name, lp0 in before.items():
            delta = part_logprobs(lm, batch, *PARTS[name]) - lp0
            record["step_change"][name] = {
                "rel_err": ((delta - delta32).norm() / delta32.norm()).item(),
                "corr": torch.corrcoef(torch.stack([delta, delta32]))[0, 1].item()}
        moved = seen = 0
        for n, p in model.named_parameters():
            w0, w1 = old_weights[n], p.detach()
            moved += int((w1 != w0).sum())
            seen += int((w1.to(BF16) != w0.to(BF16)).sum())
        record["step_change"]["weights changed in fp32"] = moved
        record["step_change"]["of them, changed in a bf16 copy"] = seen / max(moved, 1)
        record["seconds"] = round(time.perf_counter() - t1, 1)
        results["steps"].append(record)
        report(record)
        if args.output:  # after every step: a stopped benchmark keeps what it measured
            Path(args.output).parent.mkdir(parents=True, exist_ok=True)
            Path(args.output).write_text(json.dumps(results, indent=2))


def report(record: dict) -> None:
    print(f"\n== at step {record['step']} ({record['seconds']:.0f} s)\nper-token |log p - log p_fp32|:")
    for name, e in record["logprob_error"].items():
        print(f"   {name:>30}: mean {e['mean']:.4f}  p99 {e['p99']:.4f}  max {e['max']:.3f}")
    print("gradient against fp32's (cosine / relative error), per group:")
    names = list(record["gradient"])
    print(f"   {'group':>28} " + " ".join(f"{n[:24]:>26}" for n in names))
    for group in record["gradient"][names[0]]:
        cells = [record["gradient"][n][group] for n in names]
        print(f"   {group:>28} " + " ".join(f"{c['cos']:>12.5f} / {c['rel_err']:<11.4f}" for c in cells))
    change = record["step_change"]
    print(f"one fp32 AdamW step: fp32 sees a mean |change| of {change['fp32 mean |change|']:.2e} per token's log-prob")
    for name in ("bf16 (body + head)", "bf16-fp32-head (body)"):
        print(f"   {name:>30}: change's relative error {change[name]['rel_err']:.3f}, correlation {change[name]['corr']:.3f}")
    print(f"   weights the step changed: {change['weights changed in fp32']:,}; a bf16 copy sees "
          f"{100 * change['of them, changed in a bf16 copy']:.1f}% of them change")


if __name__ == "__main__":
    main(tyro.cli(Args))
