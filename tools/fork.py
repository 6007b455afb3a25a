"""Fork a script to try a new trick: the copy, with its header set for the lineage.

    python tools/fork.py lite_ppo.py my_trick.py --paper 'My Trick (Doe et al., 2026, arXiv 2601.00001)' \
        --trick 'advantage = ... (Sec. 3)'          # writes my_trick.py, ready to edit
    python tools/fork.py --patch my_trick.py > docs/forks/my_trick.patch   # the fork as a patch of its parent
    python tools/fork.py --apply docs/forks/gspo.patch                    # a patch back into a script

The fork is its parent with a new header docstring: the title, the paper, "Parent: <parent>" and the trick as a
numbered list, the lines tools/lineage.py reads. From then on `make test` checks it like the four scripts
(tests/test_forks.py): the update exact whole, micro-batched and on two processes, the zero-row skip exact, kill -9
and resume, every changed hunk inside the algorithm's functions or marked (`# [My Trick, Sec. 3] what`), and its
generated lineage row (`python tools/lineage.py --fork my_trick.py`; the README's table shows the design's four). A check that cannot apply to the fork's loss is declared in the fork itself, in a
module-level `CHECKS_OFF = {"check name": "why"}` (tests/test_forks.py lists the names), never by editing tests.
"""

import argparse
import ast
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from tools.lineage import lineage, unified_diff  # noqa: E402


def fork_source(parent_source: str, parent: str, child: str, paper: str, trick: str) -> str:
    """The parent's source with its header docstring replaced by the fork's."""
    tree = ast.parse(parent_source)
    doc = tree.body[0]
    if not (isinstance(doc, ast.Expr) and isinstance(doc.value, ast.Constant) and isinstance(doc.value.value, str)):
        raise SystemExit(f"{parent} has no header docstring to replace")
    title = paper.split("(")[0].strip().strip('"') or Path(child).stem
    items = [t.strip() for t in trick.split(";") if t.strip()] or ["(describe the trick)"]
    header = "\n".join([
        f'"""{title}: {Path(parent).stem} plus one trick.', "",
        f"Paper: {paper}. Parent: {parent}. The trick, relative to {Path(parent).stem}:",
        *[f"  {i}. {item}" for i, item in enumerate(items, 1)], "",
        "Usage:",
        f"    python {child}                                   # the parent's embedded default, with the trick",
        f"    accelerate launch {child} --model Qwen/Qwen3-4B-Base --dataset math --template plain",
        '"""'])
    lines = parent_source.splitlines(keepends=True)
    return header + "\n" + "".join(lines[doc.end_lineno:])


def apply_patch(patch: str, root: Path = ROOT) -> tuple[str, str]:
    """(child name, child source) of a patch in `tools/fork.py --patch` form (`diff -u parent child`), applied to
    the parent in `root`; a hunk whose context or removed lines do not match the parent fails, naming it."""
    lines = patch.splitlines()
    if len(lines) < 2 or not lines[0].startswith("--- ") or not lines[1].startswith("+++ "):
        raise SystemExit("not a fork patch: it must start with '--- parent.py' and '+++ child.py'")
    parent, child = lines[0][4:].strip(), lines[1][4:].strip()
    old = (root / parent).read_text().splitlines()
    out, pos = [], 0
    for n, line in enumerate(lines[2:], 3):
        if m := re.match(r"@@ -(\d+)(?:,(\d+))? \+\d+(?:,\d+)? @@", line):
            start = int(m.group(1)) - (m.group(2) != "0")  # 0-based first line of the hunk in the parent
            out += old[pos:start]
            pos = start
        elif line[:1] in (" ", "-"):
            if pos >= len(old) or old[pos] != line[1:]:
                raise SystemExit(f"patch line {n} does not match {parent} line {pos + 1}: the parent changed since "
                                 "the patch was made (remake it with --patch)")
            if line[0] == " ":
                out.append(old[pos])
            pos += 1
        elif line[:1] == "+":
            out.append(line[1:])
        elif line:  # anything else is not part of a unified diff
            raise SystemExit(f"patch line {n}: not a diff line: {line[:60]!r}")
    return child, "\n".join(out + old[pos:]) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("parent", nargs="?", help="the script to fork (lite_ppo.py, grpo.py, dapo.py, ppo_vanilla.py)")
    parser.add_argument("child", nargs="?", help="the fork's file name (my_trick.py)")
    parser.add_argument("--paper", default="", help="title (authors, year, arXiv id): the header's Paper line")
    parser.add_argument("--trick", default="", help="what the fork changes, one item per ';'")
    parser.add_argument("--patch", metavar="FORK", help="print FORK's diff from its parent, in the form --apply takes")
    parser.add_argument("--apply", metavar="PATCH", help="write the fork a patch describes, next to its parent")
    args = parser.parse_args()
    if args.patch:
        parent = lineage().get(Path(args.patch).name)
        if not parent:
            raise SystemExit(f"{args.patch}: its header names no parent (\"Parent: x.py\")")
        print("\n".join(unified_diff(parent, Path(args.patch).name)))
        return
    if args.apply:
        child, source = apply_patch(Path(args.apply).read_text())
    else:
        if not (args.parent and args.child):
            parser.error("give PARENT and CHILD (or --patch / --apply)")
        if not (ROOT / args.parent).exists():
            raise SystemExit(f"{args.parent}: no such script in {ROOT}")
        child = Path(args.child).name
        if not re.fullmatch(r"[a-z_][a-z0-9_]*\.py", child):
            raise SystemExit(f"{args.child}: a fork's name must be a Python module name (my_trick.py)")
        source = fork_source((ROOT / args.parent).read_text(), args.parent, child, args.paper, args.trick)
    if (ROOT / child).exists():
        raise SystemExit(f"{child} exists already: choose another name or remove it first")
    (ROOT / child).write_text(source)
    print(f"wrote {child} (parent {lineage().get(child)}); edit its loss, then `make test` (tests/test_forks.py "
          f"checks it); `python tools/lineage.py --fork {child}` shows its lineage row and diff")


if __name__ == "__main__":
    main()
