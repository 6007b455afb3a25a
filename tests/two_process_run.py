"""lite_ppo.py's main() as `torchrun --nproc_per_node 2` runs it, recording what each process did.

    torchrun --nproc_per_node 2 tests/two_process_run.py OUT_DIR [lite_ppo.py flags ...]

Each process writes OUT_DIR/rank{r}.json: the world size it saw, the engine it generated with, how many
prompts it generated for (training rollouts, temperature > 0), and a checksum of its final weights (taken at
the last checkpoint, when every process holds the weights it trained).
"""

import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import lite_ppo  # noqa: E402
from common.model import unwrap  # noqa: E402


def main() -> None:
    out, flags = Path(sys.argv[1]), sys.argv[2:]
    out.mkdir(parents=True, exist_ok=True)
    record = {"prompts": 0}
    make_engine, save_checkpoint = lite_ppo.make_engine, lite_ppo.save_checkpoint

    def recording_engine(*args, **kwargs):
        engine = make_engine(*args, **kwargs)
        generate = engine.generate

        def counting_generate(prompt_ids, n, sampling):
            if sampling.temperature > 0:
                record["prompts"] += len(prompt_ids)
            return generate(prompt_ids, n, sampling)

        engine.generate = counting_generate
        record.update(engine=type(engine).__name__, world_size=torch.distributed.get_world_size(),
                      rank=torch.distributed.get_rank())
        return engine

    def recording_save(accelerator, run_dir, step, model, *args, **kwargs):
        weights = unwrap(model).state_dict()
        record["checksum"] = [float(v.double().sum()) for v in weights.values()]
        (out / f"rank{record['rank']}.json").write_text(json.dumps(record))
        return save_checkpoint(accelerator, run_dir, step, model, *args, **kwargs)

    lite_ppo.make_engine, lite_ppo.save_checkpoint = recording_engine, recording_save
    import tyro

    lite_ppo.main(tyro.cli(lite_ppo.Args, args=flags))


if __name__ == "__main__":
    main()
