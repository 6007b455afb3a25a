"""One training step of a script's own main(), on a fixed rollout; run alone or under `torchrun --nproc_per_node 2`.

    python tests/step_equivalence.py ALGO MODEL_DIR OUT_DIR [--micro-batch-tokens N ...] [--rewards MODE] [--no-skip]
    torchrun --nproc_per_node 2 tests/step_equivalence.py ALGO MODEL_DIR OUT_DIR

ALGO is any script of the lineage by module name (lite_ppo, a fork on PYTHONPATH, ...) that keeps the skeleton's
names: main, Args, LogprobModel, make_engine, batch_math_reward, build_optimizer, micro_batches.

What runs is the script's main() itself (setup, rollout, reward, advantages, old/ref log-probs, its update loop,
checkpoint), with three stand-ins: an engine whose completions are a fixed function of (prompt, sample index),
so every world size sees the same global batch; rewards that are a fixed function of the completion; and SGD with
lr 1, so the update IS the (clipped) gradient (Adam's first step, g / (|g| + eps), would amplify float round-off
in near-zero gradient entries into lr-sized differences). Two PPO epochs: the second runs off-policy, so ratios
move, clipping and the KL term act. The weights come back from the checkpoint the script writes (its `state/`:
the policy, and the critic for ppo_vanilla.py); each process also records its world size and its share of the
rollout in OUT_DIR/rank{r}.json: the training rollout's rewards and truncation flags, and the rows each
training forward (with grad) saw. Two harness flags: --rewards half|last|mixed (which groups are all wrong,
fixed_rewards), and --no-skip, which makes the update loop compute every row (micro_batches without `skip`).
"""

import importlib
import json
import sys
import zlib
from contextlib import ExitStack
from pathlib import Path
from unittest import mock

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from common.generation import Completion  # noqa: E402
from tests.torchrun import leave_together  # noqa: E402
from tools.lineage import ancestors  # noqa: E402

MAX_NEW_TOKENS = 10
# How far two runs of the same update may land apart ("the same update"), by precision. fp32 sums in another order
# (micro-batches, all-reduce) differ by ~1e-7 relative: 1e-5. bf16 autocast rounds each matmul's inputs to 8
# significant bits, and a micro-batch split or a process split changes the matmuls' shapes (rows, padded width), so
# their roundings differ: measured here over the four scripts' steps (which move parameters by 0.07-0.11),
# micro-batched vs whole 7e-4 to 9e-4, two processes vs one 6e-4 to 2.6e-3 (ppo_vanilla, two models); allowed
# 1e-2, about 4x the largest measured and a tenth of the step, which a wrong denominator or a lost row exceeds.
ATOL = {"fp32": 1e-5, "bf16": 1e-2, "bf16-fp32-head": 1e-2, "bf16-gen": 1e-5}  # bf16-gen's update is fp32's


class FixedEngine:
    """Completions that depend on (prompt, sample index) only: 2..MAX_NEW_TOKENS random tokens, the longest
    ones cut at the limit (truncated), the others ending in EOS, with random "sampler" log-probs."""

    def __init__(self, tokenizer, out_dir: Path):
        self.eos, self.vocab = tokenizer.eos_token_id, len(tokenizer)
        rank = torch.distributed.get_rank() if torch.distributed.is_initialized() else 0
        self.rank, self.world = rank, torch.distributed.get_world_size() if torch.distributed.is_initialized() else 1
        self.record = {"rank": rank, "world_size": self.world, "prompts": 0, "truncated": [], "rows_trained": []}
        self.path = out_dir / f"rank{rank}.json"

    def generate(self, prompt_ids, n, sampling):
        completions = []
        for j, prompt in enumerate(prompt_ids):
            key = zlib.crc32(bytes(str(prompt), "utf-8"))
            position = self.rank * len(prompt_ids) + j  # the prompt's place in the global batch (processes split it in order)
            for i in range(n):
                g = torch.Generator().manual_seed(key * 100 + i)
                length = int(torch.randint(2, MAX_NEW_TOKENS + 1, (1,), generator=g))
                tokens = torch.randint(3, self.vocab, (length,), generator=g).tolist()  # past the special tokens
                truncated = length == MAX_NEW_TOKENS
                if not truncated:
                    tokens[-1] = self.eos
                # a sampler's log-probs unlike the trainer's: importance weights from ~e^-7 to ~e^5, below and above any cap
                logprobs = (-1 - 7 * torch.rand(length, generator=g)).tolist() if sampling.logprobs else None
                completions.append(Completion(tokens, f"{key} {i} {position} {len(prompt_ids) * self.world}", truncated, logprobs))
        if sampling.temperature > 0:  # a training rollout, not an eval
            self.record["prompts"] += len(prompt_ids)
            self.record["truncated"] += [c.truncated for c in completions]
            self.save()
        return completions

    def save(self):
        self.path.write_text(json.dumps(self.record))

    def sync_weights(self, model):
        pass

    def sleep(self):
        pass

    def wake_up(self):
        pass

    def close(self):
        pass


def fixed_rewards(mode: str, record: dict):
    """Reward of the text "<prompt key> <sample index> <position> <prompts>", by `mode`: every group of mixed
    outcomes ("mixed", for DAPO's dynamic sampling, which would keep different groups per world size), or besides
    those all-wrong groups, whose samples have advantage 0: the prompts whose key is odd ("half"), or the last half
    of the global batch ("last": all of the second process's prompts in a 2-process run). Recorded in `record`."""
    def reward(texts, answers):
        out = []
        for text in texts:
            key, i, position, prompts = map(int, text.split())
            wrong = (mode == "half" and key % 2) or (mode == "last" and position >= prompts // 2)
            out.append(0.0 if wrong else float((key + i) % 3 == 0))
        record.setdefault("rewards", []).extend(out)
        return out
    return reward


def sgd(model, lr, weight_decay, warmup_steps, total_steps, schedule):
    optimizer = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=1.0)
    return optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, lambda _: 1.0)


def run_step(algo: str, model_dir: str, out_dir: str, *flags: str) -> tuple[dict[str, torch.Tensor], int]:
    """main() of `algo` for one step; returns (the checkpoint's weights, the world size)."""
    import tyro
    from accelerate.state import AcceleratorState
    from safetensors.torch import load_file

    script = importlib.import_module(algo)
    # a DAPO (or a fork of it) filters uniform groups: every group mixed, so each world size keeps the same ones
    dapo = "dapo.py" in ancestors(f"{algo}.py", Path(script.__file__).parent)
    flags = list(flags)
    rewards = flags.pop(flags.index("--rewards") + 1) if "--rewards" in flags else "mixed" if dapo else "half"
    flags = [f for f in flags if f != "--rewards"]
    skip = "--no-skip" not in flags
    flags = [f for f in flags if f != "--no-skip"]
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    argv = ["--model", model_dir, "--backend", "hf", "--dataset", "arithmetic:digits=1", "--total-steps", "1",
            "--prompts-per-step", "4", "--group-size", "4", "--max-new-tokens", str(MAX_NEW_TOKENS), "--eval-size", "1",
            "--ppo-epochs", "2", "--output-dir", str(out), "--run-name", "run", *flags]
    if "--precision" not in flags:  # fp32 unless a test asks for bf16: the same numbers on every machine
        argv += ["--precision", "fp32"]
    if dapo:
        argv += ["--overlong-filter"]
    args = tyro.cli(script.Args, args=argv)
    engine = {}
    forward = script.LogprobModel.forward

    def counted_forward(self, batch, *a, **k):  # the rows of each training forward, the ones that backpropagate
        if torch.is_grad_enabled() and self.training:
            engine["engine"].record["rows_trained"].append(len(batch["input_ids"]))
        return forward(self, batch, *a, **k)

    def make_engine(*a, tokenizer, **k):
        engine["engine"] = FixedEngine(tokenizer, out)
        return engine["engine"]

    split = script.micro_batches
    with ExitStack() as stack:
        stack.enter_context(mock.patch.object(script, "make_engine", make_engine))
        stack.enter_context(mock.patch.object(script, "batch_math_reward", fixed_rewards(rewards, engine)))
        stack.enter_context(mock.patch.object(script, "build_optimizer", sgd))
        stack.enter_context(mock.patch.object(script.LogprobModel, "forward", counted_forward))
        if not skip:
            stack.enter_context(mock.patch.object(script, "micro_batches", lambda batch, budget, skip=None: split(batch, budget)))
        if not torch.distributed.is_initialized():  # accelerate keeps one state per process: fresh for each precision
            stack.callback(AcceleratorState._reset_state, reset_partial_state=True)
            AcceleratorState._reset_state(reset_partial_state=True)
        script.main(args)
    engine["engine"].record["rewards"] = engine.pop("rewards", [])[-len(engine["engine"].record["truncated"]):]
    engine["engine"].save()
    state = max((out / "run" / "checkpoints").glob("step-*"), key=lambda p: int(p.name[5:])) / "state"
    params = {f"{f.stem}.{k}": v for f in sorted(state.glob("model*.safetensors")) for k, v in load_file(f).items()}
    return params, engine["engine"].world  # not read from rank0.json, which rank 0 may be rewriting right now


if __name__ == "__main__":
    run_step(sys.argv[1], sys.argv[2], sys.argv[3], *sys.argv[4:])
    leave_together()
