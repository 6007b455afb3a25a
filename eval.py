"""Benchmark a model or a training checkpoint on math sets: avg@n, pass@k, maj@n.

Uses the training code's data loaders, prompts, engines and `math_reward`, so a number here means
what `eval/accuracy` means in a training run (metric definitions: common/evaluation.py).

Usage:
    python eval.py --model smollm2-135m-instruct --datasets gsm8k --limit 200 --n 4
    python eval.py --model runs/lite_ppo__1__1700000000/checkpoints/step-24 --datasets math500,aime24
    python eval.py --model Qwen/Qwen3-4B-Base --template plain --datasets math500,aime24,amc23 --n 16 \\
        --temperature 0.6 --max-new-tokens 4096
Writes {output_dir}/summary.json (metrics per data set), samples.jsonl (every sample: what the
model wrote, the extracted answer, the gold, correct or not) and prints a table.
"""

import dataclasses
import importlib.util
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import torch
from transformers import AutoTokenizer

from common.data import TEMPLATES, load_rows, stop_ids, tokenize_prompts
from common.evaluation import default_pass_k, evaluate
from common.generation import SamplingConfig, make_engine
from common.errors import BadSpec
from common.model import DEFAULT_MODEL, check_model, load_policy, resolve_model
from common.precision import PrecisionFlag, machine, resolve_precision
from common.run import cli


@dataclass
class Args:
    model: str = DEFAULT_MODEL
    """hub id, local Hugging Face directory, checkpoint folder (runs/<run>/checkpoints/step-N) or an embedded model:
    smollm2-135m-instruct, gemma3-270m (a base model: --template plain)"""
    datasets: str = "math500,aime24,gsm8k"
    """comma list: gsm8k, math500, aime24, amc23, olympiadbench, minerva, arithmetic[:...], a .jsonl/.json/.parquet path or a hub id"""
    split: str = "test"
    """split of each data set (ignored for a file path)"""
    limit: int | None = None
    """problems per data set (the first N); None = all"""
    n: int = 4
    """samples per problem"""
    pass_k: tuple[int, ...] = ()
    """k values of pass@k, each <= n; empty = powers of two up to n"""
    temperature: float = 0.6
    """sampling temperature (0 = greedy)"""
    top_p: float = 0.95
    """nucleus sampling (1 = off)"""
    top_k: int = 0
    """top-k sampling (0 = off)"""
    max_new_tokens: int = 1024
    """completion length limit; longer completions are cut and counted as truncated"""
    template: Literal["chat", "plain", "fewshot"] = "chat"
    """prompt: chat (the tokenizer's chat template, instruct models), plain (base models) or fewshot (two worked
    problems first, then a one-line answer: small base models)"""
    seed: int = 0
    """generation seed: same seed, backend and model give the same samples"""
    backend: Literal["auto", "vllm", "hf"] = "auto"
    """generation engine: vllm, hf (transformers generate) or auto (vllm if installed)"""
    gpu_memory_utilization: float = 0.9
    """vLLM: fraction of GPU memory for weights and KV cache"""
    precision: PrecisionFlag = "auto"
    """a training precision (lite_ppo.py --help); generation computes in its dtype: bf16 for bf16, bf16-fp32-head and
    bf16-gen, else fp32; auto as in training (printed with why)"""
    output_dir: str | None = None
    """where summary.json and samples.jsonl go; None = results/eval__{model}__{seed}__{time}"""


def resolve_checkpoint(model: str) -> str:
    """A training checkpoint folder (step-N/ holding model/, state/, meta.json) -> its model/ folder."""
    path = Path(model).expanduser()
    if path.is_dir() and not (path / "config.json").exists() and (path / "model" / "config.json").exists():
        return str(path / "model")
    return model


def format_table(results: dict[str, dict]) -> str:
    """One row per data set: problems, avg@n, pass@k..., maj@n (percent), mean length (tokens), truncated (percent)."""
    header, rows = None, []
    for name, r in results.items():
        m = r["metrics"]
        labels = [f"avg@{r['n']}" if k == "accuracy" else {"response_len_mean": "len", "truncated_frac": "trunc"}.get(k, k)
                  for k in m]
        header = header or ["dataset", "problems"] + labels
        rows.append([name, str(r["problems"])] + [f"{v:.0f}" if k == "response_len_mean" else f"{100 * v:.1f}"
                                                   for k, v in m.items()])
    widths = [max(len(row[i]) for row in [header] + rows) for i in range(len(header))]
    fmt = lambda row: "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths)))
    return "\n".join([fmt(header), fmt(["-" * w for w in widths])] + [fmt(row) for row in rows])


def split_datasets(spec: str) -> list[str]:
    """ "math500,arithmetic:digits=1,operands=3" -> ["math500", "arithmetic:digits=1,operands=3"]:
    a piece with "=" but no ":" is a setting of the data set before it."""
    names: list[str] = []
    for piece in filter(None, (p.strip() for p in spec.split(","))):
        if names and "=" in piece and ":" not in piece:
            names[-1] += "," + piece
        else:
            names.append(piece)
    return names


def open_engine(model: str, backend: str, precision, template: str, max_new_tokens: int, questions: list[str],
                seed: int, gpu_memory_utilization: float = 0.9):
    """(engine, tokenizer, backend, model path) for generating answers to `questions` with `model`: vLLM loads the
    weights itself (no second copy); hf generates on a loaded model. auto: vllm if installed."""
    if backend == "auto":
        backend = "vllm" if importlib.util.find_spec("vllm") is not None else "hf"
    if backend == "hf":  # generate runs on this model object
        model_path, lm, tokenizer = load_policy(model)
        lm.to("cuda" if torch.cuda.is_available() else "cpu")
    else:
        model_path, lm = resolve_model(model), None
        tokenizer = AutoTokenizer.from_pretrained(model_path)
    longest_prompt = max(len(ids) for ids in tokenize_prompts(tokenizer, questions, template))
    engine = make_engine(backend, model_path=model_path, model=lm, tokenizer=tokenizer, seed=seed,
                         max_model_len=longest_prompt + max_new_tokens, gpu_memory_utilization=gpu_memory_utilization,
                         enable_sleep_mode=False, precision=precision, stop_ids=stop_ids(tokenizer, template))
    return engine, tokenizer, backend, model_path


def main(args: Args) -> dict:
    # ---------------------------------------------------------------- 1. check flags, load every data set
    # Everything that can fail fast does so before the (slow) model load.
    if args.template not in TEMPLATES:
        raise BadSpec(f"--template must be one of {TEMPLATES}, got {args.template!r}")
    if args.backend not in ("auto", "vllm", "hf"):
        raise BadSpec(f"--backend must be auto, vllm or hf, got {args.backend!r}")
    pass_k = list(args.pass_k) or default_pass_k(args.n)
    if args.n < 1 or any(not 1 <= k <= args.n for k in pass_k):
        raise BadSpec(f"need --n >= 1 and every --pass-k in [1, n]; got n={args.n}, pass-k={pass_k}")
    names = split_datasets(args.datasets)
    if not names:
        raise BadSpec("--datasets is empty")
    data = {}
    for name in names:
        data[name] = load_rows(name, split=args.split, limit=args.limit, flag="--datasets")
        if not data[name]:
            raise BadSpec(f"--datasets {name}: no problems")
    model_arg = resolve_checkpoint(args.model)
    check_model(model_arg)
    precision = resolve_precision(args.precision)
    print(precision)

    # ---------------------------------------------------------------- 2. model and engine
    t_start = time.perf_counter()
    engine, tokenizer, backend, model_path = open_engine(
        model_arg, args.backend, precision, args.template, args.max_new_tokens,
        [r["question"] for rows in data.values() for r in rows], args.seed, args.gpu_memory_utilization)
    sampling = SamplingConfig(max_new_tokens=args.max_new_tokens, temperature=args.temperature, top_p=args.top_p,
                              top_k=args.top_k, seed=args.seed)
    out_dir = Path(args.output_dir or f"results/eval__{Path(model_path).name}__{args.seed}__{int(time.time())}")
    out_dir.mkdir(parents=True, exist_ok=True)
    print(f"[eval] {args.model} ({backend}) on {', '.join(f'{k} ({len(v)})' for k, v in data.items())}, "
          f"n={args.n}, T={args.temperature}, top_p={args.top_p}, max_new_tokens={args.max_new_tokens} -> {out_dir}")

    # ---------------------------------------------------------------- 3. generate and score, one data set at a time
    results = {}
    with open(out_dir / "samples.jsonl", "w") as f:
        for name, rows in data.items():
            t0 = time.perf_counter()
            metrics, records = evaluate(engine, tokenizer, rows, template=args.template, sampling=sampling, n=args.n,
                                        pass_k=pass_k, desc=name)
            results[name] = {"problems": len(rows), "n": args.n, "metrics": metrics,
                             "seconds": round(time.perf_counter() - t0, 1)}
            for rec in records:
                f.write(json.dumps({"dataset": name, **rec}) + "\n")

    # ---------------------------------------------------------------- 4. report
    summary = {"model": args.model, "model_path": model_path, "backend": backend, "precision": precision.name,
               "machine": machine(), "results": results,
               "seconds": round(time.perf_counter() - t_start, 1), "args": dataclasses.asdict(args)}
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=2))
    print(format_table(results))
    print(f"[eval] {summary['seconds']:.0f} s; samples in {out_dir / 'samples.jsonl'}, summary in {out_dir / 'summary.json'}")
    return summary


if __name__ == "__main__":
    cli(main, Args)  # a bad flag, data spec or path: one line that names it, exit 1
