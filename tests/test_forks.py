"""Every fork gets the checks the four scripts pass, with no edit outside its own file.

The forks: every top-level script whose header names a parent (tools/fork.py writes such a header) beyond the
design's four, the worked forks kept as patches in docs/forks/ (GSPO, Dr. GRPO), each applied to a scratch copy
of the repository so that they cannot rot, and a fork of lite_ppo.py made here by tools/fork.py that changes its
loss only. On each:
- update_exact: one step of its own main() the same whole, micro-batched and on two processes, in fp32 and bf16
  (tests/step_equivalence.py, the harness of tests/test_update.py);
- zero_row_skip: the step the same with the zero-gradient rows skipped as computed, and only the rows with signal
  forwarded;
- resume: kill -9 after a checkpoint, then --resume: the weights of an uninterrupted run, bitwise;
- lineage: every changed hunk against its parent in the algorithm's own functions or marked, within a budget, and a
  row of the generated lineage table.
A check that cannot apply to a fork's loss is turned off in the fork itself: a module-level `CHECKS_OFF = {name:
why}` (ppo_vanilla.py has one: its critic learns from every row). The worked forks are also checked by numbers
against the peer implementation of the same loss, TRL's, written out below from its documented formulas.
"""

import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from tests.step_equivalence import ATOL, run_step
from tests.test_lineage import unmarked_skeleton_hunks
from tests.test_lite_ppo import kill_and_resume
from tests.test_update import learning_rows, two_process_step
from tools.fork import apply_patch, fork_source
from tools.lineage import CORE, ancestors, changed_lines, header, lineage, section

ROOT = Path(__file__).resolve().parents[1]
CHECKS = ("update_exact", "zero_row_skip", "resume", "lineage")
PATCHES = sorted((ROOT / "docs" / "forks").glob("*.patch"))
FORK_BUDGET = 80  # changed lines against its parent: a trick, not a new script (the worked forks: 40, below)
WORKED_FORK_BUDGET = 40
SKIP_ALL = {"scratch", ".git", ".venv", "runs", "results", ".pytest_cache", "__pycache__"}
# a loss-only fork of lite_ppo.py, as a new user writes one: negative advantages count half
MADE = ("lite_ppo.py", "half_negative.py", "Half Negative (a test, 2026, arXiv 0000.00000)",
        "negative advantages weigh half in the loss",
        ("    adv = advantages[:, None]  # [B, 1]: the sample's advantage for each of its tokens\n",
         "    adv = advantages[:, None] * torch.where(advantages[:, None] < 0, 0.5, 1.0)  # [B, 1] negatives at half\n"))


@dataclass
class Fork:
    root: Path  # the repository the fork lives in: this one, or a scratch copy
    name: str  # its file name
    parent: str

    @property
    def module(self) -> str:
        return Path(self.name).stem

    def checks_off(self) -> dict[str, str]:
        import importlib

        return getattr(importlib.import_module(self.module), "CHECKS_OFF", {})


def scratch_repo(tmp: Path) -> Path:
    """A copy of the repository to put a fork in: links to everything but the forks already at the top level."""
    tmp.mkdir(parents=True, exist_ok=True)
    top_level_forks = set(lineage()) - set(CORE)
    for entry in ROOT.iterdir():
        if entry.name not in SKIP_ALL | top_level_forks:
            (tmp / entry.name).symlink_to(entry)
    return tmp


def write_patched(patch: str, root: Path) -> str:
    """Apply docs/forks/<patch> to the repository copy `root` and write the fork there; its file name."""
    name, source = apply_patch((ROOT / "docs" / "forks" / patch).read_text(), root)
    (root / name).write_text(source)
    return name


def forks() -> list[tuple[str, str]]:
    return ([("file", name) for name in lineage() if name not in CORE] + [("patch", p.name) for p in PATCHES]
            + [("made", MADE[1])])


@pytest.fixture(scope="module", params=forks(), ids=lambda p: f"{p[0]}:{p[1]}")
def fork(request, tmp_path_factory) -> Fork:
    kind, name = request.param
    mp = pytest.MonkeyPatch()
    if kind == "file":
        root = ROOT
    else:
        root = scratch_repo(tmp_path_factory.mktemp(f"repo-{Path(name).stem}"))
        if kind == "patch":
            name = write_patched(name, root)
        else:
            parent, name, paper, trick, (old, new) = MADE
            source = fork_source((ROOT / parent).read_text(), parent, name, paper, trick)
            assert source.count(old) == 1
            (root / name).write_text(source.replace(old, new))  # the trick: one line of policy_loss
        mp.syspath_prepend(str(root))  # the fork imports as a module, in this process and under torchrun
        mp.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")])))
    yield Fork(root, name, lineage(root)[name])
    sys.modules.pop(Path(name).stem, None)
    mp.undo()


def need(fork: Fork, check: str) -> None:
    if check in (off := fork.checks_off()):
        pytest.skip(f"{fork.name} declares {check} off: {off[check]}")


@pytest.mark.heavy
@pytest.mark.timeout(900)
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_fork_update_is_the_same_whole_micro_batched_and_on_two_processes(fork, precision, tiny_model_path, tmp_path):
    need(fork, "update_exact")
    whole, world = run_step(fork.module, tiny_model_path, str(tmp_path / "whole"), "--precision", precision)
    micro, _ = run_step(fork.module, tiny_model_path, str(tmp_path / "micro"), "--micro-batch-tokens", "40",
                        "--precision", precision)
    two, world2, ranks = two_process_step(fork.module, tiny_model_path, tmp_path / "two", "--precision", precision)
    assert (world, world2) == (1, 2) and [r["prompts"] for r in ranks] == [2, 2]
    assert set(micro) == set(whole) == set(two)
    for k in whole:
        torch.testing.assert_close(micro[k], whole[k], atol=ATOL[precision], rtol=0)
        torch.testing.assert_close(two[k], whole[k], atol=ATOL[precision], rtol=0)


@pytest.mark.heavy
@pytest.mark.timeout(900)
def test_fork_skips_the_zero_gradient_rows_exactly(fork, tiny_model_path, tmp_path):
    need(fork, "zero_row_skip")
    import importlib

    flags = ["--beta", "0"] if hasattr(importlib.import_module(fork.module).Args, "beta") else []  # a KL term: all rows learn
    full, _ = run_step(fork.module, tiny_model_path, str(tmp_path / "full"), *flags, "--no-skip")
    skipped, _ = run_step(fork.module, tiny_model_path, str(tmp_path / "skip"), *flags)
    record = json.loads((tmp_path / "skip" / "rank0.json").read_text())
    family = "dapo" if "dapo.py" in ancestors(fork.name, fork.root) else fork.module
    learning = learning_rows(record, family)
    assert 0 < learning < len(record["rewards"]) and record["rows_trained"] == [learning] * 2
    for k in full:
        torch.testing.assert_close(skipped[k], full[k], atol=1e-6, rtol=0)


@pytest.mark.heavy
@pytest.mark.timeout(900)
def test_fork_resumes_after_kill_dash_nine_with_the_same_weights(fork, tiny_model_path, tiny_math_data, tmp_path):
    need(fork, "resume")
    import importlib

    # GRPO's KL term: two identical runs of grpo.py itself (beta 0.04) differ by ~2e-7 after 8 steps on this CPU
    # (measured; the cause is not found yet), so a bitwise resume is checked without it
    flags = ["--beta", "0"] if hasattr(importlib.import_module(fork.module).Args, "beta") else []
    kill_and_resume(fork.root / fork.name, tiny_model_path, tiny_math_data, tmp_path, *flags)


def test_fork_changes_only_marked_tricks_and_has_its_lineage_row(fork):
    need(fork, "lineage")
    assert header(fork.name, fork.root)["parent"] == fork.parent
    bad = unmarked_skeleton_hunks(fork.parent, fork.name, root=fork.root)
    assert not bad, f"{fork.name}: changes outside its algorithm without a trick marker:\n\n" + "\n\n".join(bad)
    added, removed = changed_lines(fork.parent, fork.name, fork.root)
    assert added + removed <= FORK_BUDGET, f"{fork.name} changes {added + removed} lines of {fork.parent}"
    row = next(line for line in section(fork.root, [fork.name]).splitlines() if line.startswith(f"| `{fork.name}` |"))
    assert f"| `{fork.parent}` |" in row and f"+{added} −{removed}" in row


def test_every_check_a_fork_turns_off_is_a_known_one_with_a_reason(fork):
    for check, why in fork.checks_off().items():
        assert check in CHECKS and why.strip(), (fork.name, check)


# ------------------------------------------------------------------------------------------- the worked forks
def worked(name: str, tmp_path_factory) -> tuple[object, Path]:
    """The module of docs/forks/<name>.patch, applied to a scratch copy of the repository."""
    import importlib

    root = scratch_repo(tmp_path_factory.mktemp(f"worked-{name}"))
    child = write_patched(f"{name}.patch", root)
    sys.path.insert(0, str(root))
    try:
        return importlib.import_module(Path(child).stem), root
    finally:
        sys.path.remove(str(root))
        sys.modules.pop(Path(child).stem, None)


@pytest.mark.parametrize("name", ["gspo", "dr_grpo"])
def test_the_worked_forks_stay_within_forty_changed_lines(name, tmp_path_factory):
    module, root = worked(name, tmp_path_factory)
    added, removed = changed_lines("grpo.py", f"{name}.py", root)
    assert added + removed <= WORKED_FORK_BUDGET, (name, added, removed)


def batch(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    old = -3 * torch.rand(6, 7, generator=g)
    logprobs = (old + 0.3 * torch.randn(6, 7, generator=g)).requires_grad_()  # off-policy: ratios far from 1, clipped
    mask = torch.ones(6, 7)
    mask[0, 5:] = mask[3, 2:] = mask[4, 6:] = 0  # unequal lengths
    advantages = torch.tensor([1.0, -0.5, 0.25, 2.0, -1.5, 0.0])
    return logprobs, old, mask, advantages


def trl_per_token_loss(logprobs, old, mask, advantages, eps_low, eps_high, level):
    """TRL 1.16 GRPOTrainer's per-token loss, written out from its documented formulas: the log importance weight
    per token, or (importance_sampling_level="sequence") its mean over the completion, as [B, 1]; coef_1 = its exp,
    coef_2 = coef_1 clamped to [1 - epsilon, 1 + epsilon_high]; the loss -min(coef_1 * A, coef_2 * A)."""
    log_ratio = logprobs - old
    if level == "sequence":
        log_ratio = ((log_ratio * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).unsqueeze(-1)
    coef_1 = torch.exp(log_ratio)
    coef_2 = torch.clamp(coef_1, 1 - eps_low, 1 + eps_high)
    a = advantages.unsqueeze(1)
    return -torch.min(coef_1 * a, coef_2 * a)


def test_gspo_is_trls_sequence_level_importance_sampling(tmp_path_factory):
    # TRL: importance_sampling_level="sequence", loss_type="grpo" (each sequence's token mean, averaged), beta=0,
    # epsilon=3e-4, epsilon_high=4e-4 (its GSPO recipe)
    gspo, _ = worked("gspo", tmp_path_factory)
    args = gspo.Args(beta=0.0)
    assert (args.clip_eps, args.clip_eps_high) == (3e-4, 4e-4)
    for clip in [(3e-4, 4e-4), (0.05, 0.08)]:  # the paper's, and wider (some sequences inside the bounds)
        args.clip_eps, args.clip_eps_high = clip
        logprobs, old, mask, adv = batch()
        ours, _ = gspo.policy_loss(logprobs, old, adv, mask, args)
        per_token = trl_per_token_loss(logprobs, old, mask, adv, *clip, "sequence")
        theirs = ((per_token * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).mean()
        g_ours, = torch.autograd.grad(ours, logprobs)
        g_theirs, = torch.autograd.grad(theirs, logprobs)
        assert ours.item() == pytest.approx(theirs.item(), rel=1e-6, abs=1e-9)
        torch.testing.assert_close(g_ours, g_theirs, rtol=1e-5, atol=1e-8)
        assert g_ours.abs().sum() > 0
    # one ratio per sequence: every token of a row has the same gradient weight up to its advantage
    seq_ratio = torch.exp(((logprobs - old) * mask).sum(-1) / mask.sum(-1))
    assert not torch.allclose(seq_ratio, torch.ones(6))


def test_dr_grpo_is_trls_dr_grpo_loss(tmp_path_factory):
    # TRL: loss_type="dr_grpo" (token sums / (sequences x max_completion_length)), scale_rewards="none"
    # (advantages = reward - group mean), token-level ratios
    dr, _ = worked("dr_grpo", tmp_path_factory)
    rewards = torch.tensor([1.0, 0, 0, 0, 1, 1, 0, 1])
    grouped = rewards.view(-1, 4)
    assert dr.compute_advantages(rewards, 4).tolist() == pytest.approx((grouped - grouped.mean(1, keepdim=True)).flatten().tolist())
    args = dr.Args(beta=0.0, max_new_tokens=9)
    logprobs, old, mask, adv = batch(1)
    ours, _ = dr.policy_loss(logprobs, old, adv, mask, args)
    per_token = trl_per_token_loss(logprobs, old, mask, adv, args.clip_eps, args.clip_eps, "token")
    theirs = (per_token * mask).sum() / (mask.shape[0] * args.max_new_tokens)
    g_ours, = torch.autograd.grad(ours, logprobs)
    g_theirs, = torch.autograd.grad(theirs, logprobs)
    assert ours.item() == pytest.approx(theirs.item(), rel=1e-6)
    torch.testing.assert_close(g_ours, g_theirs, rtol=1e-5, atol=1e-8)
    # a constant denominator: on-policy (ratio 1, nothing clipped) every token's gradient is -A / (sequences x
    # max_new_tokens), in a short completion as in a long one
    on_policy = old.clone().requires_grad_()
    loss, _ = dr.policy_loss(on_policy, old, adv, mask, args)
    g, = torch.autograd.grad(loss, on_policy)
    torch.testing.assert_close(g, (-adv[:, None] / (mask.shape[0] * args.max_new_tokens)).expand_as(mask) * mask)


def test_a_patch_round_trips_and_a_stale_one_fails(tmp_path):
    from tools.lineage import unified_diff

    root = scratch_repo(tmp_path / "repo")
    parent, name, paper, trick, (old, new) = MADE
    source = fork_source((ROOT / parent).read_text(), parent, name, paper, trick).replace(old, new)
    (root / name).write_text(source)
    patch = "\n".join(unified_diff(parent, name, root))
    assert apply_patch(patch, root) == (name, source)
    assert header(name, root)["parent"] == parent and "arXiv 0000.00000" in source.split('"""')[1]
    lines = patch.splitlines()
    context = next(i for i, line in enumerate(lines) if i > 2 and line.startswith(" ") and line.strip())
    lines[context] = " # a line the parent does not have"  # the parent changed since the patch was made
    with pytest.raises(SystemExit, match="does not match"):
        apply_patch("\n".join(lines), root)
