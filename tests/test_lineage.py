"""Keep the copies honest: each script differs from its parent by its tricks, and by nothing else.

`lite_ppo.py` and `dapo.py` are `grpo.py` plus their tricks, `ppo_vanilla.py` is `lite_ppo.py` plus a critic
(tools/lineage.py reads the lineage from the scripts' headers; tests/test_forks.py holds forks to the same rules). Discipline alone lets copies drift (CleanRL's two continuous-action PPO
files differ in 16 hunks, about 4 of them the trick), so three tests hold the line:
- a budget of changed lines per script, so that a diff stays small enough to read;
- the rule below, so that the shared skeleton (setup, rollout, logging, checkpoints...) stays identical;
- the README's lineage section must be the one tools/lineage.py generates from the files.

The rule: every hunk of `diff parent child` must either lie entirely in the algorithm's own code, or carry a
trick marker. The algorithm's own code: the header docstring, the imports (a trick may need one), the top-level
functions other than `main` (compute_advantages, policy_loss, the script's extras) and blank lines. A trick
marker is a `[Paper ...]` tag in a comment or a docstring (`# [DAPO 3.1] clip-higher`), on a line of the
hunk (either side) or on the line just before or after it. So a change in `Args` or in `main` must be
marked where it stands, and an unmarked edit of the skeleton (a changed default, a reordered log line, a fix
made in one copy only) fails here, pointing at the hunk.
"""

import ast
import re
from pathlib import Path

import pytest

from tools.lineage import CORE, END, START, changed_lines, header, lineage, matcher, page, replace_section, section

ROOT = Path(__file__).resolve().parents[1]
# a tag in a comment or docstring: a capital, then a word ("[DAPO 3.1]", "[Lite PPO, Sec. 4.2]", "[PPO]"), so
# shape comments ("[B, T]", "[N]") are not markers
MARKER = re.compile(r'(#|""").*\[[A-Z][A-Za-z]+[^\]]*\]')

# Changed lines (added + removed, as GNU `diff` counts them) allowed per script against its parent: the count when
# the budget was set plus about 10%, enough for a reworded comment, not for a new feature or a fix copied into
# one script. A change that grows a diff on purpose raises its budget in the same commit, with its reason here.
#   lite_ppo.py     61 = header docstring 19, Args 2 (GRPO's beta), compute_advantages + policy_loss 33 (batch
#                        std, token-level aggregation, no KL), main 7 (GRPO's reference model, gone)
#   dapo.py        176 = header docstring 24, imports 2, Args 14, policy_loss ~20 and extras ~60 (length penalty,
#                        group filter, truncation mask, the dynamic-sampling loop), blank lines 8, main 47 (rounds
#                        of rollout, length penalty, overlong filter, skip when nothing is kept, no reference model)
#   ppo_vanilla.py 162 = header docstring, the critic's Args, GAE and value loss, the critic's setup and update
#   issue 18 (the paper's techniques as switches of lite_ppo.py, defaults Lite PPO) grew lite_ppo.py to 112: the
#                        docstring's list of switches 6, Args 13, compute_advantages's mean/std levels and
#                        policy_loss's aggregation and clip-higher ~20, main 8 (wrong-answer reward, overlong
#                        filter, the solve rates from correctness); ppo_vanilla.py's diff grew by the same lines,
#                        which PPO with a critic does not take, to 222
#   issue 26 (forks) put ppo_vanilla.py's CHECKS_OFF (3 lines: its critic computes every row) in its diff, to 228
BUDGETS = {"lite_ppo.py": 124, "dapo.py": 194, "ppo_vanilla.py": 250}
LINEAGE = lineage()  # every script whose header names its parent: the design's four and any fork (tests/test_forks.py)
CHILDREN = [name for name, parent in LINEAGE.items() if parent and name in CORE]
SKELETON_COPIES = ["grpo.py", "lite_ppo.py", "dapo.py"]  # one skeleton, the same numbered sections


def free_lines(source: str) -> set[int]:
    """0-based line numbers of the algorithm's own code in a script's `source` (see the module docstring)."""
    tree = ast.parse(source)
    free = {i for i, line in enumerate(source.splitlines()) if not line.strip()}
    for node in tree.body:
        docstring = node is tree.body[0] and isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
        algorithm = isinstance(node, ast.FunctionDef) and node.name != "main"
        if docstring or algorithm or isinstance(node, (ast.Import, ast.ImportFrom)):
            start = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
            free.update(range(start - 1, node.end_lineno))
    return free


def unmarked_skeleton_hunks(parent: str, child: str, root: Path = ROOT) -> list[str]:
    """The hunks of `diff parent child` that break the rule, printed as `parent lines -> child lines`."""
    source_a, source_b = (root / parent).read_text(), (root / child).read_text()
    a, b = source_a.splitlines(), source_b.splitlines()
    free_a, free_b = free_lines(source_a), free_lines(source_b)
    bad = []
    for op, i1, i2, j1, j2 in matcher(a, b).get_opcodes():
        if op == "equal":
            continue
        if set(range(i1, i2)) <= free_a and set(range(j1, j2)) <= free_b:
            continue  # all in the algorithm's own code
        near = a[max(i1 - 1, 0) : i2 + 1] + b[max(j1 - 1, 0) : j2 + 1]
        if any(MARKER.search(line) for line in near):
            continue
        bad.append(f"{parent}:{i1 + 1}-{i2} -> {child}:{j1 + 1}-{j2}\n" + "\n".join(
            [f"  - {line}" for line in a[i1:i2]] + [f"  + {line}" for line in b[j1:j2]]))
    return bad


def present(name: str) -> str:
    assert (ROOT / name).exists(), f"{name} is missing"
    return name


@pytest.mark.parametrize("child", CHILDREN)
def test_diff_against_parent_stays_within_budget(child):
    added, removed = changed_lines(LINEAGE[present(child)], child)
    assert added + removed <= BUDGETS[child], (
        f"diff {LINEAGE[child]} {child} changes {added + removed} lines (+{added} -{removed}), over its budget "
        f"{BUDGETS[child]}: move plumbing to common/, or raise the budget in tests/test_lineage.py with a reason")


@pytest.mark.parametrize("child", CHILDREN)
def test_changes_outside_the_algorithm_carry_a_trick_marker(child):
    bad = unmarked_skeleton_hunks(LINEAGE[present(child)], child)
    assert not bad, (f"{child} differs from {LINEAGE[child]} in the shared skeleton without a trick marker "
                     "(`# [Paper Sec.] what`): make the change in every script (or in common/), or mark it:\n\n"
                     + "\n\n".join(bad))


def test_the_rule_catches_skeleton_drift(tmp_path):
    """The rule itself: an unmarked change in main or Args fails, the same change marked passes, a change inside
    an algorithm function passes without a marker."""
    text = (ROOT / "lite_ppo.py").read_text()
    cases = {
        "drift": (text.replace("clip_grad_norm_(model.parameters(), args.max_grad_norm)",
                               "clip_grad_norm_(model.parameters(), 2 * args.max_grad_norm)"), 1),
        "marked": (text.replace("clip_grad_norm_(model.parameters(), args.max_grad_norm)  # None under DeepSpeed",
                                "clip_grad_norm_(model.parameters(), 2 * args.max_grad_norm)  # [Fork, Sec. 1] doubled"), 0),
        "algorithm": (text.replace("pg_unclipped = -adv * ratio", "pg_unclipped = -adv * ratio * 1.0"), 0),
        "args": (text.replace("max_grad_norm: float = 1.0", "max_grad_norm: float = 0.5"), 1),
    }
    (tmp_path / "lite_ppo.py").write_text(text)
    for name, (changed, expected) in cases.items():
        assert changed != text, name
        (tmp_path / f"{name}.py").write_text(changed)
        assert len(unmarked_skeleton_hunks("lite_ppo.py", f"{name}.py", root=tmp_path)) == expected, name


def test_skeleton_copies_share_their_sections():
    banners = {name: [" ".join(line.split()) for line in (ROOT / name).read_text().splitlines()
                      if re.match(r"\s*# -{20,} \d\.", line)] for name in SKELETON_COPIES}
    assert len(banners["grpo.py"]) == 8
    for name in SKELETON_COPIES:
        assert banners[name] == banners["grpo.py"], name
        tree = ast.parse((ROOT / name).read_text())
        names = [n.name for n in tree.body if isinstance(n, (ast.ClassDef, ast.FunctionDef))]
        assert names[:3] == ["Args", "compute_advantages", "policy_loss"] and names[-1] == "main", (name, names)


@pytest.mark.parametrize("child", CHILDREN)
def test_header_docstring_names_the_parent(child):
    assert header(present(child))["parent"] == LINEAGE[child]


def test_readme_lineage_section_and_the_diffs_page_are_current():
    readme = ROOT / "README.md"
    assert readme.exists() and START in readme.read_text() and END in readme.read_text(), (
        f"README.md needs a lineage section: the lines {START} and {END}, then python tools/lineage.py --write")
    text = readme.read_text()
    assert replace_section(text, section()) == text, "stale lineage section: run python tools/lineage.py --write"
    assert (ROOT / "docs" / "lineage.md").read_text() == page(), "stale docs/lineage.md: run python tools/lineage.py --write"
    for parent, child in (("grpo.py", "lite_ppo.py"), ("grpo.py", "dapo.py"), ("lite_ppo.py", "ppo_vanilla.py")):
        added, removed = changed_lines(parent, child)
        assert f"## `diff -u {parent} {child}` (+{added} −{removed})" in page()  # every child's diff, with its counts
