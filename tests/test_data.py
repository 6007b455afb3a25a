"""Tests of common/data.py: arithmetic task, loaders and row formats, prompts, batch order."""

import json
import random
import re
import warnings
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from common.data import (FEWSHOT, batch_indices, build_prompt, load_rows, make_arithmetic, prompt_tokens_bound,
                         resolve_source, stop_ids, tokenize_prompts)

SHARED = Path(__file__).resolve().parent.parent.parent / "shared" / "data"


# ---------------------------------------------------------------- arithmetic
def parse_question(q: str) -> tuple[list[int], list[str]]:
    m = re.fullmatch(r"What is (.+)\?", q)
    assert m, q
    tokens = m.group(1).split(" ")
    return [int(t) for t in tokens[::2]], tokens[1::2]


def solve(nums: list[int], opers: list[str]) -> int:
    # Independent of data._evaluate: fold products first, then sum the signed terms.
    terms, signs = [nums[0]], [1]
    for op, x in zip(opers, nums[1:]):
        if op == "*":
            terms[-1] *= x
        else:
            terms.append(x)
            signs.append(1 if op == "+" else -1)
    return sum(s * t for s, t in zip(signs, terms))


def test_arithmetic_deterministic_and_seeded():
    assert make_arithmetic(200, seed=3) == make_arithmetic(200, seed=3)
    assert make_arithmetic(200, seed=3) != make_arithmetic(200, seed=4)
    assert make_arithmetic(50, split="test", seed=3) == make_arithmetic(50, split="test", seed=3)


def test_arithmetic_splits_disjoint_and_unique():
    for kw in ({}, {"digits": 1, "num_operands": 3, "ops": "+-*"}):
        train = {r["question"] for s in (0, 1) for r in make_arithmetic(3000, "train", seed=s, **kw)}
        test = {r["question"] for s in (0, 1) for r in make_arithmetic(300, "test", seed=s, **kw)}
        assert train and test and not train & test
    rows = make_arithmetic(3000)
    assert len({r["question"] for r in rows}) == len({r["id"] for r in rows}) == 3000


@pytest.mark.parametrize("digits,operands,ops", [(1, 3, "+"), (2, 2, "+-"), (3, 3, "+-*"), (1, 4, "*")])
def test_arithmetic_difficulty_and_gold(digits, operands, ops):
    rows = make_arithmetic(300, seed=1, digits=digits, num_operands=operands, ops=ops)
    assert len(rows) == 300
    lo = 0 if digits == 1 else 10 ** (digits - 1)
    for r in rows:
        nums, opers = parse_question(r["question"])
        assert len(nums) == operands and set(opers) <= set(ops)
        assert all(lo <= x < 10**digits for x in nums)
        assert r["answer"] == str(solve(nums, opers))
    if ops == "+-*":
        assert {op for r in rows for op in parse_question(r["question"])[1]} == set(ops)


def test_arithmetic_defaults_and_errors():
    nums, opers = parse_question(make_arithmetic(1)[0]["question"])
    assert len(nums) == 2 and all(10 <= x < 100 for x in nums) and set(opers) <= set("+-")
    with pytest.raises(ValueError, match="holds only .* n=300"):
        make_arithmetic(300, digits=1, ops="+")  # 100 problems in all
    for bad in ({"split": "val"}, {"ops": "+/"}, {"num_operands": 1}, {"digits": 0}):
        with pytest.raises(ValueError):
            make_arithmetic(5, **bad)


def test_arithmetic_source_string():
    rows = load_rows("arithmetic:digits=1,operands=3,ops=+*,n=40,seed=2", split="test")
    assert rows == make_arithmetic(40, "test", seed=2, digits=1, num_operands=3, ops="+*")
    assert len(load_rows("arithmetic", split="test")) == 500
    small = load_rows("arithmetic:digits=1,ops=+")  # n omitted: capped at the split's size
    assert 50 < len(small) < 100 and len(load_rows("arithmetic", limit=7)) == 7
    with pytest.raises(ValueError, match="bad arithmetic setting"):
        load_rows("arithmetic:width=3")


def test_a_larger_held_out_share_only_moves_problems_from_train_to_test():
    spec = "arithmetic:digits=1,operands=3,ops=+"  # 1,000 problems in all
    test, wide = (set(r["id"] for r in load_rows(spec + extra, split="test")) for extra in ("", ",test=0.25"))
    train, narrow = (set(r["id"] for r in load_rows(spec + extra, split="train")) for extra in ("", ",test=0.25"))
    assert test < wide and narrow < train and not wide & narrow and len(wide | narrow) == 1000
    assert 200 < len(wide) < 300 and 80 < len(test) < 140  # ~25% and ~10% of the hashes
    assert load_rows(spec + ",test=0.1", split="test") == load_rows(spec, split="test")  # 0.1 is the default
    assert load_rows("arithmetic:test=.3,n=50", split="test") == make_arithmetic(50, "test", test_fraction=0.3)


@pytest.mark.parametrize("spec,message", [
    ("arithmetic:test=0", r"test='0' must be a held-out share in \(0, 0.5\]"),
    ("arithmetic:test=0.6", r"test='0.6' must be a held-out share"),
    ("arithmetic:test=25", r"test='25' must be a held-out share"),
    ("arithmetic:digits=0", r"digits='0' must be an integer in \[1, 18\]"),
    ("arithmetic:digits=1.5", r"digits='1.5' must be an integer"),
    ("arithmetic:digits=19", r"digits='19'"),
    ("arithmetic:operands=1", r"operands='1' must be an integer in \[2, 10\]"),
    ("arithmetic:n=0", r"n='0'"),
    ("arithmetic:n=", r"n='' must be an integer"),
    ("arithmetic:seed=x", r"seed='x' must be an integer"),
    ("arithmetic:ops=", r"ops='' must be distinct"),
    ("arithmetic:ops=++", r"ops='\+\+' must be distinct"),
    ("arithmetic:ops=+/", r"ops='\+/' must be distinct"),
    ("arithmetic:digits", r"bad arithmetic setting 'digits'"),
])
def test_every_field_of_the_arithmetic_spec_is_checked(spec, message):
    from common.errors import UsageError

    with pytest.raises(UsageError, match=message) as error:
        load_rows(spec, flag="--dataset")
    assert str(error.value).startswith(f"--dataset {spec}: ") and "\n" not in str(error.value)


# ---------------------------------------------------------------- loaders
def write_jsonl(path: Path, rows: list) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


FORMATS = [  # (raw row, expected question, expected answer, expected id or None for "<tag>:1")
    ({"question": "Q?", "answer": "a <<2*3=6>>6\nb\n#### 1,234"}, "Q?", "1234", None),  # GSM8K
    ({"problem": "P?", "solution": "so $\\boxed{\\frac{1}{2}}$ and \\boxed{\\frac{\\sqrt{2}}{\\{3\\}}}."},
     "P?", "\\frac{\\sqrt{2}}{\\{3\\}}", None),  # MATH, last \boxed, nested braces
    ({"problem": "P?", "solution": "\\boxed{9}", "answer": "\\left( 3, \\frac{\\pi}{2} \\right)",
      "unique_id": "test/x/1.json"}, "P?", "\\left( 3, \\frac{\\pi}{2} \\right)", "test/x/1.json"),
    ({"id": 7, "question": "O?", "final_answer": ["$(1,2)$", "$(3,4)$"], "context": None}, "O?", "(1,2), (3,4)", "7"),
    ({"id": 8, "question": "O?", "final_answer": ["$\\frac{1}{2}$"], "context": "Ctx."}, "Ctx.\n\nO?", "\\frac{1}{2}", "8"),
    ({"id": 0, "problem": "A?", "question": "A?", "answer": 27.0}, "A?", "27", "0"),  # AMC
    ({"problem": "A?", "answer": 2.5}, "A?", "2.5", None),
    ({"id": 60, "problem": "A?", "answer": "033"}, "A?", "033", "60"),  # AIME
    ({"idx": 3, "problem": "M?", "solution": "$s=\\boxed{1.6} \\mathrm{~cm}$"}, "M?", "1.6", "3"),  # Minerva
    ({"question": "Q?", "answer": "", "solution": "\\boxed{5}"}, "Q?", "5", None),  # empty answer, boxed fallback
]


@pytest.mark.parametrize("raw,question,answer,rid", FORMATS)
def test_row_formats(tmp_path, raw, question, answer, rid):
    rows = load_rows(str(write_jsonl(tmp_path / "f.jsonl", [raw])))
    assert rows == [{"id": rid or "f.jsonl:1", "question": question, "answer": answer}]


def test_json_parquet_and_folder_files(tmp_path):
    raws = [FORMATS[0][0], FORMATS[1][0], FORMATS[5][0]]
    expected = load_rows(str(write_jsonl(tmp_path / "a.jsonl", raws)))
    assert [r["answer"] for r in expected] == ["1234", FORMATS[1][2], "27"]
    (tmp_path / "b.json").write_text(json.dumps(raws, indent=1))
    write_jsonl(tmp_path / "c.json", raws)
    pq.write_table(pa.Table.from_pylist([{"question": "Q?", "answer": "#### 5"}, {"question": "R?", "answer": "x"}]),
                   tmp_path / "d.parquet")
    strip = lambda rows: [(r["question"], r["answer"]) for r in rows]  # noqa: E731
    assert strip(load_rows(str(tmp_path / "b.json"))) == strip(expected)
    assert strip(load_rows(str(tmp_path / "c.json"))) == strip(expected)
    assert load_rows(str(tmp_path / "d.parquet")) == [
        {"id": "d.parquet:1", "question": "Q?", "answer": "5"}, {"id": "d.parquet:2", "question": "R?", "answer": "x"}]
    write_jsonl(tmp_path / "dir" / "test.jsonl", [{"question": "T?", "answer": "1"}])
    assert load_rows(str(tmp_path / "dir"), split="test")[0]["question"] == "T?"
    with pytest.raises(FileNotFoundError, match="train.jsonl"):
        load_rows(str(tmp_path / "dir"))


def test_short_names_resolve_through_env(tmp_path, monkeypatch):
    monkeypatch.setenv("RL_MATH_DATA", str(tmp_path / "d"))
    write_jsonl(tmp_path / "d" / "gsm8k" / "train.jsonl", [{"question": "Q?", "answer": "#### 4"}])
    write_jsonl(tmp_path / "d" / "minerva_math" / "test.jsonl", [{"problem": "M?", "solution": "\\boxed{2}"}])
    assert load_rows("gsm8k") == [{"id": "gsm8k/train:1", "question": "Q?", "answer": "4"}]
    assert resolve_source("minerva") == ("file", str(tmp_path / "d" / "minerva_math" / "test.jsonl"), None, "test")
    assert resolve_source("gsm8k", "test") == ("hub", "openai/gsm8k", "main", "test")
    assert resolve_source("math500") == ("hub", "HuggingFaceH4/MATH-500", None, "test")
    assert resolve_source("math") == ("hub", "hiyouga/math12k", None, "train")
    assert resolve_source("aime24")[:2] == ("hub", "math-ai/aime24")
    assert resolve_source("someone/set:cfg") == ("hub", "someone/set", "cfg", "train")
    # Without the env var: the hub, never a path outside the repository
    write_jsonl(tmp_path / "shared" / "data" / "amc23" / "test.jsonl", [{"question": "A?", "answer": 1.0}])
    monkeypatch.chdir(tmp_path / "shared")
    monkeypatch.delenv("RL_MATH_DATA")
    assert resolve_source("amc23") == ("hub", "math-ai/amc23", None, "test")
    monkeypatch.setenv("RL_MATH_DATA", str(tmp_path / "shared" / "data"))
    assert load_rows("amc23") == [{"id": "amc23/test:1", "question": "A?", "answer": "1"}]


def test_hub_ids_go_through_datasets(monkeypatch):
    import datasets
    calls = []

    def fake_load(path, name=None, split=None):
        calls.append((path, name, split))
        if path == "offline/set":
            raise ConnectionError("no network")
        return [{"question": "Q?", "answer": "#### 3"}, {"question": "R?", "answer": "#### 4"}]

    monkeypatch.setattr(datasets, "load_dataset", fake_load)
    assert load_rows("someone/set:cfg", split="test", limit=1) == [{"id": "someone/set:1", "question": "Q?", "answer": "3"}]
    assert calls == [("someone/set", "cfg", "test")]
    with pytest.raises(RuntimeError, match="offline/set.*Known names: gsm8k"):
        load_rows("offline/set")


@pytest.mark.parametrize("bad,message", [
    ('{"question": "Q?", "answer": "#### 1"', "bad JSON"),
    ('["not", "an", "object"]', "expected a JSON object"),
    ({"answer": "#### 1"}, "missing question"),
    ({"question": "Q?"}, "missing answer"),
    ({"problem": "P?", "solution": "no box here"}, "boxed"),
])
def test_malformed_rows_raise_with_file_and_row(tmp_path, bad, message):
    good = {"question": "Q?", "answer": "#### 1"}
    path = write_jsonl(tmp_path / "bad.jsonl", [good, "", bad, good])  # blank line 2, bad line 3
    with pytest.raises(ValueError, match=rf"bad\.jsonl: row 3: .*{message}"):
        load_rows(str(path))
    assert len(load_rows(str(path), limit=1)) == 1  # rows past the limit are not read
    (tmp_path / "bad.json").write_text(json.dumps([good, good, {"question": "Q?"}]))
    with pytest.raises(ValueError, match=r"bad\.json: row 3: missing answer"):
        load_rows(str(tmp_path / "bad.json"))


def test_empty_gold_is_skipped_loudly_and_limit(tmp_path):
    rows = [{"question": f"Q{i}?", "answer": f"#### {i}"} for i in range(5)]
    rows.insert(2, {"problem": "E?", "solution": "so \\boxed{}."})
    path = write_jsonl(tmp_path / "e.jsonl", rows)
    with pytest.warns(UserWarning, match=r"e\.jsonl: skipped 1 row.*\[3\]"):
        loaded = load_rows(str(path))
    assert [r["answer"] for r in loaded] == ["0", "1", "2", "3", "4"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert [r["answer"] for r in load_rows(str(path), limit=2)] == ["0", "1"]


def test_missing_file_lists_known_names(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"nope\.jsonl.*gsm8k.*minerva"):
        load_rows(str(tmp_path / "nope.jsonl"))


@pytest.mark.skipif(not SHARED.is_dir(), reason="the public sets as JSONL are not on this machine")
def test_shared_data_files_load(monkeypatch):
    monkeypatch.setenv("RL_MATH_DATA", str(SHARED))  # where the development machines keep them
    counts = {("gsm8k", "train"): 7473, ("gsm8k", "test"): 1319, ("math", "train"): 11998, ("math500", "test"): 500,
              ("aime24", "test"): 30, ("amc23", "test"): 40, ("olympiadbench", "test"): 675, ("minerva", "test"): 272}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # MATH train's two empty \boxed{} rows
        loaded = {key: load_rows(*key) for key in counts}
    assert {key: len(rows) for key, rows in loaded.items()} == counts
    assert loaded["gsm8k", "test"][0]["answer"] == "18"
    assert loaded["math500", "test"][0]["answer"] == "\\left( 3, \\frac{\\pi}{2} \\right)"
    assert loaded["amc23", "test"][0]["answer"] == "27" and loaded["aime24", "test"][0]["answer"] == "204"
    assert loaded["minerva", "test"][0]["answer"] == "1.6"
    assert loaded["olympiadbench", "test"][1]["answer"] == "\\frac{1}{2 n+2}"


# ---------------------------------------------------------------- prompts
CHAT = ("{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}</s>\n{% endfor %}"
        "{% if add_generation_prompt %}<|assistant|>\n{% endif %}")


def bpe_tokenizer(corpus: list[str]):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    specials = ["<unk>", "<s>", "</s>", "<|user|>", "<|assistant|>"]
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(corpus, trainer)
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", tok.token_to_id("<s>"))])
    hf = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>")
    hf.chat_template = CHAT
    return hf


PROMPTS = ["What is 47 + 85?", "Please reason step by step, and put your final answer",
           "Question: Answer: Let's think step by step. \\boxed{}"]


@pytest.fixture(scope="module")
def tokenizer():
    return bpe_tokenizer(PROMPTS + [FEWSHOT])  # with merges that hold a line break: "}.\n", "?\n"


def test_chat_prompt(tokenizer):
    prompt = build_prompt(tokenizer, "What is 47 + 85?")
    assert prompt.startswith("<s><|user|>\nWhat is 47 + 85?\n")
    assert "Please reason step by step, and put your final answer within \\boxed{}." in prompt
    assert prompt.endswith("</s>\n<|assistant|>\n")


def test_plain_prompt_and_bad_template(tokenizer):
    assert build_prompt(tokenizer, "What is 2 + 3?", "plain") == (
        "Question: What is 2 + 3?\nPlease reason step by step, and put your final answer within \\boxed{}.\n"
        "Answer: Let's think step by step.")
    with pytest.raises(ValueError, match="chat, plain"):
        build_prompt(tokenizer, "Q", "alpaca")
    tokenizer_no_chat = type("T", (), {"chat_template": None})()
    with pytest.raises(ValueError, match="template plain"):
        build_prompt(tokenizer_no_chat, "Q", "chat")


@pytest.mark.parametrize("template", ["chat", "plain", "fewshot"])
def test_tokenize_prompts_single_bos(tokenizer, template):
    questions = ["What is 47 + 85?", "What is 1 - 2?"]
    ids = tokenize_prompts(tokenizer, questions, template)
    bos = tokenizer.bos_token_id
    for q, seq in zip(questions, ids):
        assert seq[0] == bos and seq.count(bos) == 1
        text = build_prompt(tokenizer, q, template)
        assert tokenizer.decode(seq, skip_special_tokens=False) == "<s>" + text.removeprefix("<s>")


@pytest.mark.parametrize("template", ["chat", "plain", "fewshot"])
def test_prompt_tokens_bound_holds_every_prompt(tokenizer, template):
    rng = random.Random(0)
    questions = ["", "What is 47 + 85?", "x" * 300, "Solve: " + " ".join(str(rng.randint(0, 10**6)) for _ in range(80)),
                 "Ünïcode ∑ and \\frac{1}{2} " * 5, "trailing newline\n", " leading space"]
    lengths = [len(ids) for ids in tokenize_prompts(tokenizer, questions, template)]
    bound = prompt_tokens_bound(tokenizer, questions, template)
    assert max(lengths) <= bound <= max(lengths) + 16  # holds every prompt, and is not loose


def test_fewshot_shows_training_problems_and_stops_at_every_line_break(tokenizer):
    shown = re.findall(r"What is \d+ [-+] \d+\?", FEWSHOT)
    held_out = {r["question"] for r in load_rows("arithmetic:digits=1", split="test")}  # all 21
    assert len(shown) == 2 and not held_out & set(shown)  # no held-out problem in the prompt
    prompt = build_prompt(tokenizer, "What is 1 + 1?", "fewshot")
    assert prompt == FEWSHOT + "Question: What is 1 + 1?\nAnswer:"
    stops = set(stop_ids(tokenizer, "fewshot"))
    breaks = {i for i in range(len(tokenizer)) if "\n" in tokenizer.decode([i])}
    assert stops == breaks and len(breaks) > 1  # "\n" and the merges that hold one
    ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    assert "".join(tokenizer.decode([i]) for i in ids if i in stops).count("\n") == prompt.count("\n")
    assert stop_ids(tokenizer, "chat") == stop_ids(tokenizer, "plain") == []


# ---------------------------------------------------------------- batch order
def test_batch_indices_deterministic_and_epochs():
    assert batch_indices(10, 4, seed=0, step=3) == batch_indices(10, 4, seed=0, step=3)
    assert [batch_indices(10, 5, 0, s) for s in range(4)] != [batch_indices(10, 5, 1, s) for s in range(4)]
    epoch0 = batch_indices(10, 5, 0, 0) + batch_indices(10, 5, 0, 1)
    epoch1 = batch_indices(10, 5, 0, 2) + batch_indices(10, 5, 0, 3)
    assert sorted(epoch0) == sorted(epoch1) == list(range(10)) and epoch0 != epoch1
    with pytest.raises(ValueError):
        batch_indices(0, 4, 0, 0)


@pytest.mark.parametrize("num_rows,batch_size", [(7, 3), (3, 8), (6, 6)])
def test_batch_indices_wrap_and_resume(num_rows, batch_size):
    stream = [i for step in range(12) for i in batch_indices(num_rows, batch_size, seed=5, step=step)]
    assert all(len(batch_indices(num_rows, batch_size, 5, s)) == batch_size for s in range(12))
    for e in range(len(stream) // num_rows):  # every full epoch visits every row once
        assert sorted(stream[e * num_rows:(e + 1) * num_rows]) == list(range(num_rows))
    # No hidden state: a run resumed at step k (steps asked for in any order, other calls in
    # between) draws exactly what the uninterrupted run drew.
    for k in reversed(range(12)):
        batch_indices(num_rows + 1, batch_size, 6, k)
        assert batch_indices(num_rows, batch_size, 5, k) == stream[k * batch_size:(k + 1) * batch_size]


def test_arithmetic_max_draws_operands_from_zero_to_max_of_any_digit_count():
    train = load_rows("arithmetic:max=20,ops=+-*")
    test = load_rows("arithmetic:max=20,ops=+-*", split="test")
    assert len(train) + len(test) == 21 * 21 * 3  # the whole space, enumerated: every pair of 0..20 and operator
    assert not {r["id"] for r in train} & {r["id"] for r in test}
    seen = set()
    for row in train + test:
        a, op, b = row["question"].removeprefix("What is ").removesuffix("?").split()
        seen |= {int(a), int(b)}
        assert row["answer"] == str({"+": int(a) + int(b), "-": int(a) - int(b), "*": int(a) * int(b)}[op])
    assert seen == set(range(21))
    from common.errors import UsageError

    with pytest.raises(UsageError, match="max=.0. must be an integer in"):
        load_rows("arithmetic:max=0")
