"""One optimizer step of LogprobModel on the tiny Qwen3, under DDP or PyTorch FSDP2, on 2 CPU (gloo) processes.

    torchrun --nproc_per_node 2 tests/fsdp_step.py MODE OUT.pt      MODE: ddp | fsdp2

The batch is tests/test_update.py's PROMPTS x COMPLETIONS (4 prompts x 2 samples), the same on every rank;
rank r takes rows [r * 4, (r + 1) * 4). The loss is token level, sum(-advantage * logprob) over the response
tokens divided by the GLOBAL response-token count, times the world size (DDP and FSDP2 both average gradients
over processes). SGD with lr 1, so the step IS the gradient.

ddp:   `Accelerator(cpu=True)` (a gloo group) and `accelerator.prepare`, as the scripts do: DistributedDataParallel.
fsdp2: `fully_shard` by hand on each decoder layer, then on the root LogprobModel. accelerate cannot do it here:
       it only switches to FSDP for GPU-type devices (state.py leaves MULTI_CPU alone), so
       `Accelerator(cpu=True, fsdp_plugin=FullyShardedDataParallelPlugin(fsdp_version=2))` stays MULTI_CPU; the
       script records the distributed type accelerate chose, and uses the Accelerator only for its gloo group.

Rank 0 saves to OUT.pt: world_size, mode, accelerate's distributed type, `common.model.sharding(model)` after
wrapping, the input shapes embed_tokens saw in the one forward (the shared-prompt path: two calls, prompts then
completions; the plain path: one call of the whole micro-batch), the loss, and the initial and final full
parameters by Hugging Face name (`common.model.full_weights`: DTensor.full_tensor() under FSDP2).
"""

import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from common.heads import LogprobModel  # noqa: E402
from common.model import full_weights, sharding  # noqa: E402
from common.update import make_batch, select  # noqa: E402
from tests.test_update import COMPLETIONS, PROMPTS, tiny_lm  # noqa: E402
from tests.torchrun import leave_together  # noqa: E402


def main(mode: str, out: str) -> None:
    from accelerate import Accelerator

    if mode == "ddp":
        accelerator = Accelerator(cpu=True)
    elif mode == "fsdp2":
        from accelerate import FullyShardedDataParallelPlugin

        accelerator = Accelerator(cpu=True, fsdp_plugin=FullyShardedDataParallelPlugin(fsdp_version=2))
    else:
        raise SystemExit(f"MODE must be ddp or fsdp2, got {mode!r}")
    world, rank = accelerator.num_processes, accelerator.process_index
    assert torch.distributed.is_initialized() and torch.distributed.get_backend() == "gloo"

    lm = tiny_lm()  # seed 0: the same weights on every rank
    initial = {k: v.detach().clone() for k, v in lm.state_dict().items()}
    shapes = []  # input shapes seen by embed_tokens: which path backbone_hidden took
    lm.model.embed_tokens.register_forward_hook(lambda m, args, out: shapes.append(list(args[0].shape)))
    model = LogprobModel(lm)
    if mode == "ddp":
        model = accelerator.prepare(model)
    else:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        mesh = init_device_mesh("cpu", (world,))
        for layer in lm.model.layers:
            fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh)
    kind = sharding(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)

    batch = make_batch(PROMPTS, COMPLETIONS, pad_id=0)
    n = batch["input_ids"].shape[0]
    advantages = torch.randn(n, generator=torch.Generator().manual_seed(1))  # fixed, per sample
    global_tokens = batch["response_mask"][:, 1:].sum()  # the response tokens whose log-probs exist (all but t=0)
    rows = torch.arange(n).chunk(world)[rank]
    mb = select(batch, rows)
    logprobs, _ = model(mb)
    loss = -(advantages[rows, None] * logprobs * mb["response_mask"]).sum() / global_tokens
    (loss * world).backward()  # gradients are averaged over processes: undo it
    optimizer.step()
    optimizer.zero_grad()
    total_loss = loss.detach().clone()
    torch.distributed.all_reduce(total_loss)

    with full_weights(model) as weights:  # collective under FSDP2: every rank iterates
        final = {name: t.detach().clone() for name, t in weights}
    if rank == 0:
        torch.save({"world_size": world, "mode": mode, "distributed_type": str(accelerator.distributed_type),
                    "sharding": kind, "embed_shapes": shapes, "loss": total_loss.item(),
                    "initial": initial, "final": final}, out)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
    leave_together()  # rank 0 saved its result before
