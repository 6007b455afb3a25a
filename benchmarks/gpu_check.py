"""The one check to run on a GPU machine: the test suite on CUDA, then short bf16 runs of lite_ppo.py, with
tokens/s per phase and the update's model-FLOPs utilization (MFU).

    python benchmarks/gpu_check.py                      # on a GPU: tests, 5 steps --backend hf, 5 steps --backend vllm
    python benchmarks/gpu_check.py --short --model DIR  # a CPU-sized version (the tests run it on a tiny model)
    python benchmarks/gpu_check.py --short -- --prompts-per-step 64 --max-new-tokens 256   # a larger batch:
                                                        # everything after `--` goes to lite_ppo.py as it is

What it runs, each step printed as it goes and a table at the end:
  1. `pytest tests` (full mode only): the suite, on whatever device torch finds;
  2. `lite_ppo.py --backend hf` for --steps steps on --model (default: the embedded SmolLM2), in bf16 on CUDA
     (the scripts' own choice there), fp32 on CPU;
  3. the same with `--backend vllm` when vLLM is installed.
Per run: the precision it chose and why (its start line), the sampler-trainer mismatch (median per-token |log-prob
difference| and KL over the steps, the largest token ratio either way: common/mismatch.py), generation, reward,
update and sync seconds per step (medians over the steps after the first), completion
tokens/s end to end, and the update's MFU: model FLOPs of the update (6 x non-embedding parameters x tokens
computed: every distinct prompt once, as the shared-prompt forward runs it, plus every completion token; plus
6 x vocabulary x hidden per completion token for the LM head), divided by the update's seconds and the device's
peak (bf16 dense, from the table below by device name, or --peak-tflops).
"""

import argparse
import importlib.util
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
PEAK_BF16_TFLOPS = {"H200": 989.0, "H100": 989.0, "A100": 312.0, "L40S": 362.0, "A10G": 125.0, "L4": 121.0,
                    "RTX 4090": 165.0, "RTX 3090": 71.0}  # dense, no sparsity (vendor data sheets)


def device_and_peak(peak_tflops: float | None) -> tuple[str, float | None]:
    import torch

    if not torch.cuda.is_available():
        return "cpu", peak_tflops
    name = torch.cuda.get_device_name()
    return name, peak_tflops or next((v for k, v in PEAK_BF16_TFLOPS.items() if k in name), None)


def model_flops_per_step(run_dir: Path) -> list[float]:
    """Model FLOPs of each step's update, from the run's args (data order, model) and its metrics."""
    from transformers import AutoConfig, AutoTokenizer

    from common.data import batch_indices, load_rows, tokenize_prompts
    from common.model import resolve_model

    args = json.loads((run_dir / "args.json").read_text())
    path = resolve_model(args["model"])
    config = AutoConfig.from_pretrained(path).get_text_config()
    h, layers, mlp, vocab = config.hidden_size, config.num_hidden_layers, config.intermediate_size, config.vocab_size
    heads, kv = config.num_attention_heads, getattr(config, "num_key_value_heads", config.num_attention_heads)
    head_dim = getattr(config, "head_dim", None) or h // heads
    per_layer = h * head_dim * (2 * heads + 2 * kv) + 3 * h * mlp  # q, o, k, v projections and the gated MLP
    tokenizer = AutoTokenizer.from_pretrained(path)
    rows = load_rows(args["dataset"])
    metrics = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    flops = []
    for m in (m for m in metrics if "time/training" in m):
        step_rows = [rows[i] for i in batch_indices(len(rows), args["prompts_per_step"], args["seed"], m["step"] - 1)]
        prompt_tokens = sum(map(len, tokenize_prompts(tokenizer, [r["question"] for r in step_rows], args["template"])))
        completion_tokens = m["rollout/response_len_mean"] * args["prompts_per_step"] * args["group_size"]
        flops.append(6 * (layers * per_layer * (prompt_tokens + completion_tokens) + vocab * h * completion_tokens))
    return flops


def run_script(backend: str, model: str, dataset: str, steps: int, out: Path, extra: list[str]) -> dict:
    cmd = [sys.executable, str(ROOT / "lite_ppo.py"), "--model", model, "--dataset", dataset, "--backend", backend,
           "--total-steps", str(steps),
           "--output-dir", str(out), "--run-name", backend, "--eval-size", "8", "--eval-every", str(10**6),
           "--save-every", str(10**6), *extra]
    start = time.perf_counter()
    result = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    (out / f"{backend}.log").write_text(result.stdout + result.stderr)  # the whole output, for a failure's cause
    if result.returncode != 0:
        return {"backend": backend, "error": result.stderr.strip().splitlines()[-1] if result.stderr.strip() else "failed"}
    run_dir = out / backend
    metrics = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    train = [m for m in metrics if "time/training" in m]
    timed = train[1:] or train  # the first step warms up (kernels, caches)
    median = {k: statistics.median(m[f"time/{k}"] for m in timed) for k in ("generation", "reward", "training", "sync")}
    flops = model_flops_per_step(run_dir)[len(train) - len(timed):]
    precision = next((line for line in result.stdout.splitlines() if line.startswith("precision: ")), "precision: ?")
    seen = lambda key: [m[key] for m in train if m.get(key) is not None]  # noqa: E731 (null: a step with no row computed)
    mismatch = {"sampler_abs_diff": statistics.median(seen("rollout/sampler_abs_diff") or [float("nan")]),
                "sampler_kl": statistics.median(seen("rollout/sampler_kl") or [float("nan")]),
                "sampler_ratio_max": max(seen("rollout/sampler_ratio_max") + seen("rollout/sampler_inv_ratio_max"),
                                         default=float("nan"))}
    return {"backend": backend, "precision": precision, **mismatch, "wall_s": time.perf_counter() - start,
            "steps": len(train), **median,
            "tok_per_s": statistics.median(m["charts/tokens_per_sec"] for m in timed),
            "update_tflops": statistics.median(f / m["time/training"] / 1e12 for f, m in zip(flops, timed)),
            "final_accuracy": next((m["eval/accuracy"] for m in reversed(metrics) if "eval/accuracy" in m), None)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m-instruct", help="what lite_ppo.py trains (default: the embedded model)")
    parser.add_argument("--dataset", default="arithmetic:digits=1", help="what lite_ppo.py trains on (its default)")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--short", action="store_true", help="skip the test suite and vLLM; for a CPU and a tiny model")
    parser.add_argument("--peak-tflops", type=float, default=None, help="the device's peak bf16 TFLOP/s (default: by name)")
    parser.add_argument("--out", default=str(ROOT / "results" / "gpu_check"))
    argv = sys.argv[1:]
    cut = argv.index("--") if "--" in argv else len(argv)
    args, extra = parser.parse_args(argv[:cut]), argv[cut + 1:]  # extra: lite_ppo.py's own flags, passed on
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    device, peak = device_and_peak(args.peak_tflops)
    print(f"[gpu_check] device: {device}; peak bf16: {peak or 'unknown'} TFLOP/s", flush=True)
    if not args.short:
        tests = subprocess.run([sys.executable, "-m", "pytest", "-q", "tests"], cwd=ROOT)
        print(f"[gpu_check] test suite: exit {tests.returncode}", flush=True)
    backends = ["hf"] + (["vllm"] if not args.short and importlib.util.find_spec("vllm") is not None else [])
    rows = []
    for backend in backends:
        print(f"[gpu_check] lite_ppo.py --backend {backend}, {args.steps} steps ...", flush=True)
        rows.append(run_script(backend, args.model, args.dataset, args.steps, out, extra))
    print("\n| backend | steps | generation s | reward s | update s | sync s | tok/s | update TFLOP/s | MFU | final accuracy "
          "| sampler \\|diff\\| | sampler KL | largest ratio |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        if "error" in r:
            print(f"| {r['backend']} | failed: {r['error']} |")
            continue
        mfu = f"{r['update_tflops'] / peak:.1%}" if peak else "n/a"
        print(f"| {r['backend']} | {r['steps']} | {r['generation']:.2f} | {r['reward']:.3f} | {r['training']:.2f} | "
              f"{r['sync']:.2f} | {r['tok_per_s']:.1f} | {r['update_tflops']:.4f} | {mfu} | {r['final_accuracy']:.3f} | "
              f"{r['sampler_abs_diff']:.2e} | {r['sampler_kl']:.2e} | {r['sampler_ratio_max']:.3f} |")
        print(f"[gpu_check] {r['backend']}: {r['precision']}")
    (out / "gpu_check.json").write_text(json.dumps({"device": device, "peak_tflops": peak, "script_args": extra,
                                                    "runs": rows}, indent=2))


if __name__ == "__main__":
    main()
