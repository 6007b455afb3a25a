"""Data sets and prompts: the built-in arithmetic task, public math sets, local files, hub ids.

A row is a plain dict {"id": str, "question": str, "answer": str}; `answer` is the gold final
answer as a string ("18", "\\frac{1}{2}", ...), checked later by common/reward.py.

Source syntax (the `--dataset` string of every script), read by `load_rows(source, split)`:

    arithmetic[:key=value,...]   the built-in task, made in code; keys digits, operands, ops, n, seed, test, max
                                 (max=20: operands 0..20 of any digit count, in place of digits)
                                 e.g. "arithmetic:digits=1,operands=3,ops=+-*,n=2000,seed=0"
                                 (n defaults to 10000 for train, 500 for test, capped at what the
                                 split holds; test: the held-out share of the problem space, 0.1)
    gsm8k | math | math500 | aime24 | amc23 | olympiadbench | minerva
                                 a known set: a local file if there is one, else its hub id
    path/to/file.jsonl | .json | .parquet
                                 a local file (.json: one list of objects, or JSON lines)
    path/to/dir                  a local folder holding <split>.jsonl (or .json, .parquet)
    owner/name[:config]          anything else: a hub data set through `datasets.load_dataset`

Known names. A local file is looked for at $RL_MATH_DATA/<folder>/<split>.jsonl (a folder of the
public sets as JSONL, one sub-folder per set as below); the hub id is the fallback.

    name           folder          hub id (config)          default split
    gsm8k          gsm8k           openai/gsm8k (main)      train
    math           math            hiyouga/math12k          train   (MATH 12k = 12.5k minus MATH-500)
    math500        math500         HuggingFaceH4/MATH-500   test
    aime24         aime24          math-ai/aime24           test
    amc23          amc23           math-ai/amc23            test
    olympiadbench  olympiadbench   math-ai/olympiadbench    test
    minerva        minerva_math    math-ai/minervamath      test

The default split is "train" for arithmetic, gsm8k, math and other sources, "test" for benchmarks.

Row rules (one normalizer for every format):
- question: `problem`, else `question`; OlympiadBench's `context`, when set, comes first.
- gold: the first non-empty of `final_answer` (OlympiadBench; a list is joined with ", "),
  `answer` (27.0 becomes "27") and the content of the LAST \\boxed{...} of `solution`
  (common.grader.last_boxed), tidied by common.grader.normalize_gold (GSM8K's "#### 1,234" ->
  "1234", surrounding $ and a final period stripped): the one normalization, done at load.
- id: `id` / `unique_id` / `idx`, else "<tag>:<row>" (tag: "gsm8k/train", a file name, a hub id).
- A malformed row (bad JSON, not an object, no question, no answer field, a solution without
  \\boxed) raises common.errors.BadSpec (a ValueError) naming the file or hub id and the 1-based row (line for JSONL).
  A row whose gold is empty cannot be rewarded: it is skipped with a warning naming its rows
  (MATH 12k train has two solutions ending in an empty \\boxed{}). Nothing is dropped silently.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import json
import os
import random
import re
import warnings
from pathlib import Path
from typing import Any, Iterator

import numpy as np

from common.errors import BadSpec, MissingPath, Unavailable, UsageError
from common.grader import last_boxed, normalize_gold

KNOWN = {  # name: (local folder, hub id, hub config, default split)
    "gsm8k": ("gsm8k", "openai/gsm8k", "main", "train"),
    "math": ("math", "hiyouga/math12k", None, "train"),
    "math500": ("math500", "HuggingFaceH4/MATH-500", None, "test"),
    "aime24": ("aime24", "math-ai/aime24", None, "test"),
    "amc23": ("amc23", "math-ai/amc23", None, "test"),
    "olympiadbench": ("olympiadbench", "math-ai/olympiadbench", None, "test"),
    "minerva": ("minerva_math", "math-ai/minervamath", None, "test"),
}
FILE_SUFFIXES = (".jsonl", ".json", ".parquet")

# ---------------------------------------------------------------- built-in arithmetic task
TEST_FRACTION = 0.1  # share of the problem space that belongs to the held-out split


def _split_of(expr: str, test_fraction: float = TEST_FRACTION) -> str:
    # A hash of the canonical text decides the split, so train and test are disjoint for every
    # seed and n, and a problem never changes sides (a larger test share only adds to the test split).
    h = int.from_bytes(hashlib.blake2b(expr.encode(), digest_size=8).digest(), "big")
    return "test" if h / 2**64 < test_fraction else "train"


def _evaluate(nums: list[int], opers: list[str]) -> int:
    total, sign, term = 0, 1, nums[0]  # "*" binds tighter than "+" and "-"
    for op, x in zip(opers, nums[1:]):
        if op == "*":
            term *= x
        else:
            total, sign, term = total + sign * term, (1 if op == "+" else -1), x
    return total + sign * term


def _arith_space(digits: int, num_operands: int, ops: str, largest: int | None = None) -> tuple[range, int]:
    values = (range(0, largest + 1) if largest is not None else range(0, 10) if digits == 1 else
              range(10 ** (digits - 1), 10**digits))
    return values, len(values) ** num_operands * len(ops) ** (num_operands - 1)


def _is_small(space: int, split: str, n: int, test_fraction: float) -> bool:
    share = test_fraction if split == "test" else 1 - test_fraction
    return space * share <= 2 * n + 1000


@functools.lru_cache(maxsize=8)
def _split_pool(split: str, digits: int, num_operands: int, ops: str, test_fraction: float,
                largest: int | None = None) -> list[tuple]:
    values, _ = _arith_space(digits, num_operands, ops, largest)
    pool = []
    for nums in itertools.product(values, repeat=num_operands):
        for opers in itertools.product(ops, repeat=num_operands - 1):
            if _split_of(_expr(nums, opers), test_fraction) == split:
                pool.append((nums, opers))
    return pool


def _expr(nums: tuple[int, ...], opers: tuple[str, ...]) -> str:
    return " ".join([str(nums[0])] + [f"{op} {x}" for op, x in zip(opers, nums[1:])])


def make_arithmetic(n: int, split: str = "train", seed: int = 0, digits: int = 2,
                    num_operands: int = 2, ops: str = "+-", test_fraction: float = TEST_FRACTION,
                    largest: int | None = None) -> list[dict]:
    """`n` distinct problems like "What is 47 + 85?", seeded; the splits never share a problem.

    Operands have exactly `digits` digits (0-9 for one digit); "*" binds tighter than "+"/"-";
    results may be negative. Defaults (2 digits, 2 operands, "+-") because SmolLM2-135M-Instruct
    solves 2-digit sums only ~10-15% of the time (1-digit ~30-55%): hard enough to leave room to
    learn, easy enough that most groups of 8 samples hold a correct one for GRPO-style advantages.
    `test_fraction` of the problem space is held out (a small space's test split grows with it). `largest`: operands
    0..largest of any digit count instead (12 + 7, 3 * 15: a smooth range of difficulty for a screen of tiers).
    """
    if split not in ("train", "test"):
        raise BadSpec(f"arithmetic split must be 'train' or 'test', got {split!r}")
    if digits < 1 or num_operands < 2 or n < 1:
        raise BadSpec(f"need digits >= 1, num_operands >= 2, n >= 1; got {digits}, {num_operands}, {n}")
    if not ops or set(ops) - set("+-*") or len(set(ops)) != len(ops):
        raise BadSpec(f"ops must be distinct characters from '+-*', got {ops!r}")
    if not 0 < test_fraction < 1:
        raise BadSpec(f"the held-out share must be in (0, 1), got {test_fraction!r}")
    if largest is not None and largest < 1:
        raise BadSpec(f"the largest operand must be >= 1, got {largest}")
    values, space = _arith_space(digits, num_operands, ops, largest)
    rng = random.Random(f"arithmetic:{split}:{seed}:{digits}:{num_operands}:{ops}" +
                        ("" if largest is None else f":max{largest}"))
    if _is_small(space, split, n, test_fraction):  # enumerate, so the size check is exact
        pool = _split_pool(split, digits, num_operands, ops, test_fraction, largest)
        if n > len(pool):
            raise BadSpec(
                f"the {split} split of arithmetic (digits={digits}, operands={num_operands}, "
                f"ops={ops!r}) holds only {len(pool)} problems, asked for n={n}: lower n or "
                "raise digits/operands")
        chosen = rng.sample(pool, n)
    else:  # space >= ~2n in this split: rejection sampling ends fast
        chosen, seen = [], set()
        while len(chosen) < n:
            nums = tuple(rng.choice(values) for _ in range(num_operands))
            opers = tuple(rng.choice(ops) for _ in range(num_operands - 1))
            e = _expr(nums, opers)
            if e not in seen and _split_of(e, test_fraction) == split:
                seen.add(e)
                chosen.append((nums, opers))
    return [{"id": "arithmetic:" + _expr(nums, opers).replace(" ", ""),
             "question": f"What is {_expr(nums, opers)}?",
             "answer": str(_evaluate(list(nums), list(opers)))} for nums, opers in chosen]


def _arithmetic_from_string(source: str, split: str) -> list[dict]:
    keys = {"digits": "digits", "operands": "num_operands", "ops": "ops", "n": "n", "seed": "seed", "test": "test_fraction",
            "max": "largest"}
    bounds = {"digits": (1, 18), "operands": (2, 10), "n": (1, 10**7), "seed": (-(2**63), 2**63 - 1), "max": (1, 10**9)}
    kw: dict[str, Any] = {}
    _, _, settings = source.partition(":")
    for item in filter(None, settings.split(",")):
        key, eq, value = (part.strip() for part in item.partition("="))
        if not eq or key not in keys:
            raise BadSpec(f"{source!r}: bad arithmetic setting {item!r}; use key=value with keys {sorted(keys)}")
        if key == "ops":
            if not value or set(value) - set("+-*") or len(set(value)) != len(value):
                raise BadSpec(f"{source!r}: ops={value!r} must be distinct characters from '+-*'")
            kw["ops"] = value
            continue
        if key == "test":
            if not re.fullmatch(r"0?\.\d+", value) or not 0 < float(value) <= 0.5:
                raise BadSpec(f"{source!r}: test={value!r} must be a held-out share in (0, 0.5], e.g. test=0.25")
            kw["test_fraction"] = float(value)
            continue
        low, high = bounds[key]
        if not re.fullmatch(r"-?\d+", value) or not low <= int(value) <= high:
            raise BadSpec(f"{source!r}: {key}={value!r} must be an integer in [{low}, {high}]")
        kw[keys[key]] = int(value)
    if "n" not in kw:
        d, k, ops, share = kw.get("digits", 2), kw.get("num_operands", 2), kw.get("ops", "+-"), \
            kw.get("test_fraction", TEST_FRACTION)
        n = 10000 if split == "train" else 500
        top = kw.get("largest")
        if split in ("train", "test") and _is_small(_arith_space(d, k, ops, top)[1], split, n, share):
            n = min(n, len(_split_pool(split, d, k, ops, share, top)))
        kw["n"] = n
    return make_arithmetic(split=split, **kw)


# ---------------------------------------------------------------- loaders
def resolve_source(source: str, split: str | None = None) -> tuple[str, str, str | None, str]:
    """(kind, target, config, split): kind is "arithmetic", "file" (target a path) or "hub"."""
    name = source.split(":")[0]
    if name == "arithmetic":
        return "arithmetic", source, None, split or "train"
    if source in KNOWN:
        folder, hub_id, config, default_split = KNOWN[source]
        split = split or default_split
        root = os.environ.get("RL_MATH_DATA")
        if root and (Path(root) / folder / f"{split}.jsonl").is_file():
            return "file", str(Path(root) / folder / f"{split}.jsonl"), None, split
        return "hub", hub_id, config, split
    split = split or "train"
    path = Path(source).expanduser()
    if path.is_dir():
        for suffix in FILE_SUFFIXES:
            if (path / f"{split}{suffix}").is_file():
                return "file", str(path / f"{split}{suffix}"), None, split
        raise MissingPath(
            f"{path}: no {split}.jsonl/.json/.parquet in this folder; known names: {', '.join(KNOWN)}")
    if path.suffix in FILE_SUFFIXES or path.exists() or source.startswith((".", "/", "~")):
        if not path.is_file():
            raise MissingPath(f"{path}: no such file; known names: {', '.join(KNOWN)}, arithmetic")
        return "file", str(path), None, split
    hub_id, _, config = source.partition(":")
    return "hub", hub_id, config or None, split


def _read_file(path: str) -> Iterator[tuple[int, Any]]:
    """(1-based row number, parsed object) pairs; JSON syntax errors raise with the line."""
    if path.endswith(".parquet"):
        import pyarrow.parquet as pq
        yield from enumerate(pq.read_table(path).to_pylist(), 1)
        return
    with open(path, encoding="utf-8") as f:
        if path.endswith(".json"):
            text = f.read()
            if text.lstrip().startswith("["):
                try:
                    yield from enumerate(json.loads(text), 1)
                except json.JSONDecodeError as e:
                    raise BadSpec(f"{path}: bad JSON at line {e.lineno}: {e.msg}") from None
                return
            lines: Any = text.splitlines()
        else:
            lines = f
        for lineno, line in enumerate(lines, 1):
            if line.strip():
                try:
                    yield lineno, json.loads(line)
                except json.JSONDecodeError as e:
                    raise BadSpec(f"{path}: row {lineno}: bad JSON ({e.msg})") from None


def _gold(row: dict) -> str | None:
    """The first non-empty gold the row offers ("" if all are empty), None if it offers none."""
    found = None
    for key in ("final_answer", "answer", "solution"):
        value = row.get(key)
        if value is None:
            continue
        if key == "final_answer" and isinstance(value, list):
            value = ", ".join(str(a).strip().strip("$").strip() for a in value)
        elif key == "solution":
            value = last_boxed(value) if isinstance(value, str) else None
            if value is None:
                continue
        elif isinstance(value, float) and value.is_integer():
            value = int(value)
        found = normalize_gold(str(value))
        if found:
            return found
    return found


def _normalize(obj: Any, where: str, tag: str, rownum: int) -> dict | None:
    if not isinstance(obj, dict):
        raise BadSpec(f"{where}: row {rownum}: expected a JSON object, got {type(obj).__name__}")
    question = obj.get("problem") if obj.get("problem") is not None else obj.get("question")
    if not isinstance(question, str) or not question.strip():
        raise BadSpec(f"{where}: row {rownum}: missing question (need a 'problem' or 'question' field)")
    if obj.get("context"):
        question = f"{obj['context']}\n\n{question}"
    answer = _gold(obj)
    if answer is None:
        what = "a \\boxed{} in 'solution'" if "solution" in obj else "an 'answer' field"
        raise BadSpec(f"{where}: row {rownum}: missing answer (need 'answer', 'final_answer' or {what})")
    if not answer:
        return None
    rid = next((obj[k] for k in ("id", "unique_id", "idx") if obj.get(k) is not None), f"{tag}:{rownum}")
    return {"id": str(rid), "question": question, "answer": answer}


def load_rows(source: str, split: str | None = None, limit: int | None = None, flag: str | None = None) -> list[dict]:
    """Rows {"id", "question", "answer"} of `source` (syntax in the module docstring); `flag` (e.g. "--dataset")
    starts the message of any error, so that it names what to fix."""
    try:
        return _load_rows(source, split, limit)
    except UsageError as e:
        if flag is None:
            raise
        raise type(e)(f"{flag} {source}: {e}") from None


def _load_rows(source: str, split: str | None, limit: int | None) -> list[dict]:
    kind, target, config, split = resolve_source(source, split)
    if kind == "arithmetic":
        return _arithmetic_from_string(target, split)[:limit]
    if kind == "file":
        where, items = target, _read_file(target)
        tag = f"{source}/{split}" if source in KNOWN else Path(target).name
    else:
        import datasets
        where = f"hub dataset {target}" + (f" ({config})" if config else "") + f" split {split}"
        try:
            items = enumerate(datasets.load_dataset(target, config, split=split), 1)
        except Exception as e:  # offline, unknown id, wrong split: say what was tried
            raise Unavailable(
                f"could not load {where}: {e}. Known names: {', '.join(KNOWN)}, arithmetic; local "
                "files: a .jsonl/.json/.parquet path, or $RL_MATH_DATA/<name>/<split>.jsonl") from e
        tag = f"{source}/{split}" if source in KNOWN else target
    rows, empty = [], []
    for rownum, obj in items if limit != 0 else ():
        row = _normalize(obj, where, tag, rownum)
        if row is None:
            empty.append(rownum)
        else:
            rows.append(row)
        if len(rows) == limit:  # stop before reading (and validating) any row past the limit
            break
    if empty:
        warnings.warn(f"{where}: skipped {len(empty)} row(s) with an empty gold answer: rows {empty}")
    return rows


# ---------------------------------------------------------------- prompts
INSTRUCTION = "Please reason step by step, and put your final answer within \\boxed{}."
TEMPLATES = ("chat", "plain", "fewshot")
# Two worked problems (both of arithmetic's train split, so no held-out problem is shown) before the question: a
# small base model continues a pattern where it does not follow an instruction. Gemma 3 270M base, 1-digit sums,
# sampled at T=1: 22% right with these shots, 5% with "plain" (16 problems x 4 samples, measured by hand).
FEWSHOT = ("Question: What is 3 + 4?\nAnswer: 3 + 4 = 7. The answer is \\boxed{7}.\n\n"
           "Question: What is 9 - 5?\nAnswer: 9 - 5 = 4. The answer is \\boxed{4}.\n\n")


def build_prompt(tokenizer: Any, question: str, template: str = "chat") -> str:
    """The prompt text: "chat" (instruct models), "plain" (base models, as in the papers) or "fewshot" (small base
    models: FEWSHOT, then the question; the answer is one line, see stop_ids).

    "chat" and "plain" carry the Qwen2.5-Math chain-of-thought instruction; "plain" is the Qwen2.5-Math "cot"
    few-shot-free format ("Question: ...\\nAnswer: Let's think step by step.") used by the
    base-model RL setups of "Tricks or Traps" (arXiv 2508.08221).
    """
    if template == "chat":
        if not getattr(tokenizer, "chat_template", None):
            raise BadSpec("this tokenizer has no chat template: use --template plain or fewshot (base models)")
        messages = [{"role": "user", "content": f"{question}\n{INSTRUCTION}"}]
        return tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    if template == "plain":
        return f"Question: {question}\n{INSTRUCTION}\nAnswer: Let's think step by step."
    if template == "fewshot":
        return f"{FEWSHOT}Question: {question}\nAnswer:"
    raise BadSpec(f"unknown prompt template {template!r}; allowed: {', '.join(TEMPLATES)}")


def stop_ids(tokenizer: Any, template: str) -> list[int]:
    """Token ids that end a sample as EOS does. Under "fewshot", every token that holds a line break: a worked
    answer is one line, and a base model, done answering, goes on to write the next question (and to box its
    answer, which would then be the one graded). The other templates: none."""
    if template != "fewshot":
        return []
    texts = tokenizer.batch_decode([[i] for i in range(len(tokenizer))])  # 1.7 s for Gemma's 262k tokens here
    return [i for i, text in enumerate(texts) if "\n" in text]


def tokenize_prompts(tokenizer: Any, questions: list[str], template: str = "chat") -> list[list[int]]:
    """Token ids of each prompt, with exactly the special tokens the model expects."""
    if not questions:  # e.g. a process's share of an eval set smaller than the number of processes
        return []
    prompts = [build_prompt(tokenizer, q, template) for q in questions]
    # A rendered chat template already holds BOS and role tokens; adding them again doubles BOS.
    return tokenizer(prompts, add_special_tokens=(template != "chat"))["input_ids"]


def prompt_tokens_bound(tokenizer: Any, questions: list[str], template: str = "chat") -> int:
    """An upper bound on the lengths of tokenize_prompts(questions), without rendering every prompt
    (a chat template renders at ~1k prompts/s): the template's tokens around an empty question, plus the
    longest question's own tokens, plus a margin for tokens merged differently at the two seams.
    It sizes the generation engine's context (max_model_len), which must hold every prompt."""
    frame = len(tokenize_prompts(tokenizer, [""], template)[0])
    body = max(len(ids) for ids in tokenizer(list(questions), add_special_tokens=False)["input_ids"])
    return frame + body + 16


# ---------------------------------------------------------------- sampling
def batch_indices(num_rows: int, batch_size: int, seed: int, step: int) -> list[int]:
    """Row indices of training step `step`: a function of (seed, step) only, so resuming needs no
    saved iterator. Position p = step*batch_size + i is row perm_e[p % num_rows] of epoch
    e = p // num_rows; each epoch's permutation comes from (seed, e), and a batch that crosses an
    epoch end continues into the next epoch's permutation."""
    if num_rows < 1 or batch_size < 1 or step < 0:
        raise BadSpec(f"need num_rows >= 1, batch_size >= 1, step >= 0; got {num_rows}, {batch_size}, {step}")
    perms: dict[int, np.ndarray] = {}
    out = []
    for pos in range(step * batch_size, (step + 1) * batch_size):
        epoch, i = divmod(pos, num_rows)
        if epoch not in perms:
            perms[epoch] = np.random.default_rng([seed, epoch]).permutation(num_rows)
        out.append(int(perms[epoch][i]))
    return out
