"""The paper's argument for Lite PPO's normalization, drawn from one rollout: no training.

One rollout of lite_ppo.py's default setting (its model, data, prompts x samples, length, temperature, step 0 of
--seed), graded; then the advantage a correct and a wrong sample get, as a function of its group's solve rate k/G,
under the group std (GRPO, Eq. 5), the batch std of this rollout (Lite PPO) and no std (Eq. 7), all centered on the
group mean. Marks at the bottom: the solve rates of the rollout's groups. Written to --out (a PNG) with a table.

    python tools/advantage_figure.py                         # docs/advantages.png
    python tools/advantage_figure.py --seed 2 --out /tmp/advantages.png
    python tools/advantage_figure.py --counts 0 1 0 2 0 0 1 1      # redraw from correct samples per group, no rollout
"""

import sys
from dataclasses import dataclass
from pathlib import Path

import torch
import tyro

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import lite_ppo  # noqa: E402


@dataclass
class Args:
    seed: int = 1
    """the rollout: lite_ppo.py's first step at this seed"""
    out: str = "docs/advantages.png"
    """the figure"""
    model: str = lite_ppo.Args.model
    """policy (lite_ppo.py's default)"""
    dataset: str = lite_ppo.Args.dataset
    """training problems (lite_ppo.py's default)"""
    template: str = lite_ppo.Args.template
    """chat or plain"""
    prompts_per_step: int = lite_ppo.Args.prompts_per_step
    """prompts in the rollout"""
    group_size: int = lite_ppo.Args.group_size
    """samples per prompt (G)"""
    max_new_tokens: int = lite_ppo.Args.max_new_tokens
    """completion length limit"""
    backend: str = "auto"
    """generation engine: vllm, hf or auto"""
    counts: list[int] | None = None
    """correct samples per group: draw from these instead of a rollout (the figure depends on nothing else)"""


def rollout(args: Args) -> torch.Tensor:
    """The 0/1 rewards [P*G] of lite_ppo.py's first rollout with these settings (groups contiguous)."""
    from common.data import batch_indices, load_rows, tokenize_prompts
    from common.generation import SamplingConfig, make_engine, rollout_seed
    from common.model import load_policy
    from common.reward import batch_math_reward
    from common.run import seed_everything

    seed_everything(args.seed)
    rows = load_rows(args.dataset, flag="--dataset")
    rows = [rows[i] for i in batch_indices(len(rows), args.prompts_per_step, args.seed, 0)]
    model_path, lm, tokenizer = load_policy(args.model)
    prompt_ids = tokenize_prompts(tokenizer, [r["question"] for r in rows], args.template)
    engine = make_engine(args.backend, model_path=model_path, model=lm, tokenizer=tokenizer, seed=args.seed,
                         max_model_len=max(map(len, prompt_ids)) + args.max_new_tokens, gpu_memory_utilization=0.3,
                         enable_sleep_mode=False, kv_cache_seqs=len(prompt_ids) * args.group_size)
    sampling = SamplingConfig(max_new_tokens=args.max_new_tokens, temperature=lite_ppo.Args.temperature,
                              seed=rollout_seed(args.seed, 0, 0, 1))
    completions = engine.generate(prompt_ids, args.group_size, sampling)
    engine.close()
    answers = [r["answer"] for r in rows for _ in range(args.group_size)]
    return torch.tensor(batch_math_reward([c.text for c in completions], answers))


def advantage_curves(rewards: torch.Tensor, group_size: int, eps: float = 1e-6) -> dict[str, torch.Tensor]:
    """For k = 0..G correct in a group: the advantage of a correct and of a wrong sample [G + 1] under each std level,
    the group's mean subtracted; the batch std is that of `rewards`. NaN where no such sample exists (k = 0 / G)."""
    k = torch.arange(group_size + 1, dtype=torch.float64)
    mean = k / group_size
    group_std = torch.sqrt(k * (1 - mean) ** 2 + (group_size - k) * mean**2) / (group_size - 1) ** 0.5  # unbiased
    scales = {"group": group_std + eps, "batch": rewards.double().std() + eps, "none": torch.ones_like(k)}
    curves = {}
    for level, scale in scales.items():
        curves[f"{level}/correct"] = torch.where(k > 0, (1 - mean) / scale, torch.nan)
        curves[f"{level}/wrong"] = torch.where(k < group_size, -mean / scale, torch.nan)
    return curves


def plot(rewards: torch.Tensor, group_size: int, path: Path, title: str) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    curves = advantage_curves(rewards, group_size)
    rate = torch.arange(group_size + 1) / group_size
    solved = rewards.view(-1, group_size).mean(1)
    fig, ax = plt.subplots(figsize=(8, 5))
    names = {"group": "group std (GRPO, Eq. 5)", "batch": f"batch std {rewards.double().std():.3f} (Lite PPO)",
             "none": "no std (Eq. 7)"}
    for level, color in (("group", "tab:red"), ("batch", "tab:blue"), ("none", "tab:gray")):
        ax.plot(rate, curves[f"{level}/correct"], color=color, marker="o", label=f"{names[level]}: a correct sample")
        ax.plot(rate, curves[f"{level}/wrong"], color=color, marker="x", linestyle="--", label=f"{names[level]}: a wrong one")
    ax.axhline(0, color="black", linewidth=0.8)
    low = ax.get_ylim()[0]
    for r, n in zip(*torch.unique(solved, return_counts=True)):
        ax.plot([r], [low], marker="|", color="black", markersize=18)
        ax.annotate(f"{int(n)}", (float(r), low), textcoords="offset points", xytext=(4, 4), fontsize=8)
    ax.set(xlabel=f"the group's solve rate k/G (G = {group_size}); bottom marks: this rollout's groups (how many)",
           ylabel="advantage", title=title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    lines = ["| k/G | " + " | ".join(f"{lvl} {who}" for lvl in ("group", "batch", "none") for who in ("correct", "wrong")) + " |",
             "|---:|" + "---:|" * 6]
    for i, r in enumerate(rate.tolist()):
        cells = [curves[f"{lvl}/{who}"][i].item() for lvl in ("group", "batch", "none") for who in ("correct", "wrong")]
        lines.append(f"| {r:.3f} | " + " | ".join("—" if c != c else f"{c + 0.0:+.2f}" for c in cells) + " |")
    return "\n".join(lines)


def main(args: Args) -> None:
    if args.counts is None:
        rewards = rollout(args)
    else:
        rewards = torch.cat([(torch.arange(args.group_size) < k).float() for k in args.counts])
    solved = rewards.view(-1, args.group_size).sum(1).int().tolist()
    title = (f"advantage vs the group's solve rate; one rollout ({len(solved)} prompts x {args.group_size}, seed "
             f"{args.seed}):\nreward mean {rewards.mean():.3f}, correct per group {solved}")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    print(title)
    print(plot(rewards, args.group_size, Path(args.out), title))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main(tyro.cli(Args, description=__doc__))
