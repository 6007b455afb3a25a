"""Regenerate the README's lineage section: which script is a copy of which, what it changes, and the diffs.

    python tools/lineage.py                     # print the section
    python tools/lineage.py --write README.md   # replace the section in place, between the markers
    python tools/lineage.py --check README.md   # exit 1 if the section is stale (tests/test_lineage.py does this)

Nothing in the section is written by hand: each script's paper, parent and list of changes come from its header
docstring (the paragraph with "Parent: x.py"), the line counts and the diffs from difflib on the files. The
lineage itself is read from the files too: every top-level script whose header names a parent that exists is a
child of it (a fork made by tools/fork.py included), so the tests check every script that says where it came from;
the README's section shows the design's four (`--fork my_trick.py` prints a fork's row and diff).
"""

import argparse
import ast
import difflib
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
START, END = "<!-- lineage:start -->", "<!-- lineage:end -->"
BASE = "grpo.py"  # the root of the lineage: "Parent: none"
CORE = ["grpo.py", "lite_ppo.py", "dapo.py", "ppo_vanilla.py"]  # the design's four, in reading order; forks follow


def lineage(root: Path = ROOT) -> dict[str, str | None]:
    """script -> parent (None for the base), for every top-level script of `root` whose header docstring names an
    existing parent ("Parent: x.py"), in reading order: the four, then the others by name."""
    found = {BASE: None} if (root / BASE).exists() else {}
    for path in sorted(root.glob("*.py"), key=lambda p: (p.name not in CORE, CORE.index(p.name) if p.name in CORE else 0, p.name)):
        if path.name != BASE and (parent := header(path.name, root)["parent"]).endswith(".py") and (root / parent).exists():
            found[path.name] = parent
    return found


def ancestors(name: str, root: Path = ROOT) -> list[str]:
    """`name`, its parent, its parent's parent, ... up to the base."""
    chain, tree = [name], lineage(root)
    while tree.get(chain[-1]) and chain[-1] not in chain[:-1]:
        chain.append(tree[chain[-1]])
    return chain


def scripts(root: Path = ROOT) -> list[str]:
    return list(lineage(root))


def read_lines(name: str, root: Path = ROOT) -> list[str]:
    return (root / name).read_text().splitlines()


def matcher(a: list[str], b: list[str]) -> difflib.SequenceMatcher:
    """The line matching every count, check and diff here uses. autojunk off: difflib's default treats lines
    that recur (blank ones, docstring quotes) as junk in files over 200 lines: larger diffs than `diff`'s."""
    return difflib.SequenceMatcher(None, a, b, autojunk=False)


def unified_diff(parent: str, child: str, root: Path = ROOT) -> list[str]:
    """`diff -u parent child` as lines (3 lines of context), as difflib.unified_diff writes it."""
    a, b = read_lines(parent, root), read_lines(child, root)

    def span(start: int, stop: int) -> str:
        return f"{start + (stop > start)}" + ("" if stop - start == 1 else f",{stop - start}")

    out = [f"--- {parent}", f"+++ {child}"]
    for group in matcher(a, b).get_grouped_opcodes(3):
        out.append(f"@@ -{span(group[0][1], group[-1][2])} +{span(group[0][3], group[-1][4])} @@")
        for op, i1, i2, j1, j2 in group:
            out += [" " + line for line in a[i1:i2]] if op == "equal" else (
                ["-" + line for line in a[i1:i2]] + ["+" + line for line in b[j1:j2]])
    return out


def changed_lines(parent: str, child: str, root: Path = ROOT) -> tuple[int, int]:
    """(lines added, lines removed) from parent to child, as `git diff --numstat` counts them."""
    body = [line for line in unified_diff(parent, child, root) if not line.startswith(("---", "+++", "@@"))]
    return sum(line.startswith("+") for line in body), sum(line.startswith("-") for line in body)


def header(name: str, root: Path = ROOT) -> dict[str, str]:
    """Title, arXiv ids, parent and the summary of changes, from the script's header docstring."""
    try:
        doc = ast.get_docstring(ast.parse((root / name).read_text())) or ""
    except SyntaxError:  # not a script of the lineage (yet): a fork being written is checked once it parses
        doc = ""
    paragraphs = doc.split("\n\n")
    para = next((p for p in paragraphs if "Parent:" in p), "")
    before, _, after = para.partition("Parent:")
    parent = after.split()[0].rstrip(".,") if after.split() else ""
    items: list[str] = []  # the lead-in, then one entry per numbered item, then what follows the list
    for line in (after.split(". ", 1)[1] if ". " in after else "").splitlines():
        if not items or re.match(r"\d+\. ", line.strip()) or (line[:1].strip() and items[-1][:1].isdigit()):
            items.append(line.strip())
        else:
            items[-1] += " " + line.strip()
    return {"title": doc.splitlines()[0].split(":")[0] if doc else name,
            "arxiv": " ".join(re.findall(r"arXiv (\d{4}\.\d{4,5})", before)), "parent": parent,
            "changes": "<br>".join(" ".join(item.split()) for item in items)}


def section(root: Path = ROOT, names: list[str] | None = None) -> str:
    """The README section between (and including) the markers: the table and diffs of `names` (default: the design's
    four; a fork's row is generated the same way, tests/test_forks.py, without a line of the README to edit)."""
    out = [START, "<!-- generated by `python tools/lineage.py --write README.md`; edit the scripts, not this -->", "",
           "| script | paper | parent | what it changes relative to its parent | lines changed |",
           "|---|---|---|---|---|"]
    everything = lineage(root)
    tree = {name: everything[name] for name in (CORE if names is None else names) if name in everything}
    for name in tree:
        h, parent = header(name, root), tree[name]
        papers = ", ".join(f"[arXiv {a}](https://arxiv.org/abs/{a})" for a in h["arxiv"].split())
        counts = "+{} −{}".format(*changed_lines(parent, name, root)) if parent else "—"
        out.append(f"| `{name}` | {h['title']} ({papers}) | {f'`{parent}`' if parent else '—'} | "
                   f"{h['changes'].replace('|', '&#124;')} | {counts} |")
    for name in tree:
        if parent := tree[name]:
            added, removed = changed_lines(parent, name, root)
            out += ["", f"<details><summary><code>diff -u {parent} {name}</code> (+{added} −{removed})</summary>", "",
                    "```diff", *unified_diff(parent, name, root), "```", "", "</details>"]
    return "\n".join(out + ["", END])


def replace_section(text: str, new: str) -> str:
    if START not in text or END not in text:
        raise ValueError(f"no lineage section: add the two lines {START} and {END} where it goes")
    head, rest = text.split(START, 1)
    return head + new + rest.split(END, 1)[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--write", metavar="README", help="replace the section of this file in place")
    group.add_argument("--check", metavar="README", help="exit 1 if the section of this file is not current")
    group.add_argument("--fork", metavar="SCRIPT", help="print the row and diff of a fork instead")
    args = parser.parse_args()
    if args.fork:
        print(section(names=[Path(args.fork).name]))
        return
    if not (args.write or args.check):
        print(section())
        return
    path = Path(args.write or args.check)
    text = path.read_text()
    new = replace_section(text, section())
    if args.check:
        sys.exit(0 if new == text else f"{path}: the lineage section is stale; run python tools/lineage.py --write {path}")
    path.write_text(new)


if __name__ == "__main__":
    main()
