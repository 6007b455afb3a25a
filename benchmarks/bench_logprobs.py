"""Peak memory of per-token log-probs (+ entropy) with a 152k-token vocabulary, relative to the logits.

    .venv/bin/python benchmarks/bench_logprobs.py [--batch 8] [--seq 512]

Each method runs in a fresh process (peak RSS is per process) on a small Qwen3 with Qwen's vocabulary
size, so the vocabulary projection dominates memory as it does for real models:
  naive : model(...).logits [B, T, V] -> log_softmax -> gather (what most code does)
  ours  : common.heads.LogprobModel (hidden states -> chunked, checkpointed lm_head + log_softmax)
Reported: peak extra memory / size of one fp32 [B, T, V] logits tensor, forward only (old log-probs)
and forward + backward (the policy update: the loss reads the log-probs; the entropy is only logged),
and the seconds that pass takes.
"""

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
VOCAB = 151_936


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize()


def child(method: str, batch: int, seq: int, backward: bool) -> None:
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from common.heads import LogprobModel

    torch.manual_seed(0)
    config = Qwen3Config(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=1, num_key_value_heads=1, head_dim=64, tie_word_embeddings=False)
    lm = Qwen3ForCausalLM(config).float()
    input_ids = torch.randint(0, VOCAB, (batch, seq))
    attention_mask = torch.ones_like(input_ids)
    response_mask = torch.ones_like(input_ids)
    response_mask[:, : seq // 4] = 0  # a prompt quarter
    torch.set_grad_enabled(backward)
    base, start = rss_bytes(), time.perf_counter()
    if method == "naive":
        logits = lm(input_ids=input_ids, attention_mask=attention_mask).logits[:, :-1].float()
        logp = torch.log_softmax(logits, -1)
        logprobs = logp.gather(-1, input_ids[:, 1:, None]).squeeze(-1) * response_mask[:, 1:]
        entropy = -(logp.exp() * logp).sum(-1).detach()
    else:
        batch = {"input_ids": input_ids, "attention_mask": attention_mask, "response_mask": response_mask,
                 "prompt_lens": torch.full((batch,), seq // 4), "group": torch.arange(batch)}
        logprobs, entropy = LogprobModel(lm)(batch)
    entropy.sum().item()  # logged, as the scripts do (ours: 0 off the response)
    if backward:
        logprobs.sum().backward()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - base
    print(json.dumps({"peak": peak, "seconds": time.perf_counter() - start}))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq", type=int, default=512)
    parser.add_argument("--child", nargs=2)
    a = parser.parse_args()
    if a.child:
        return child(a.child[0], a.batch, a.seq, a.child[1] == "1")
    logits_bytes = a.batch * a.seq * VOCAB * 4
    print(f"B={a.batch} T={a.seq} V={VOCAB}: one fp32 logits tensor = {logits_bytes / 2**30:.2f} GiB")
    print(f"{'method':8} {'pass':18} {'peak GiB':>9} {'peak / logits':>14} {'seconds':>8}")
    for backward in (False, True):
        for method in ("naive", "ours"):
            out = subprocess.run([sys.executable, __file__, "--batch", str(a.batch), "--seq", str(a.seq),
                                  "--child", method, str(int(backward))], capture_output=True, text=True, check=True)
            result = json.loads(out.stdout.strip().splitlines()[-1])
            print(f"{method:8} {'forward+backward' if backward else 'forward (no grad)':18} "
                  f"{result['peak'] / 2**30:9.2f} {result['peak'] / logits_bytes:14.2f} {result['seconds']:8.2f}")


if __name__ == "__main__":
    main()
