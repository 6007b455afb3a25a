"""Evaluation: pass@k and maj@n by hand, evaluate() on a scripted engine, eval.py on the tiny model."""

import itertools
import json
import math
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import eval as eval_script
from common.evaluation import default_pass_k, evaluate, majority_vote, pass_at_k
from common.generation import Completion, SamplingConfig
from common.grader import is_equiv
from common.precision import resolve_precision, untimed

ROOT = Path(__file__).resolve().parents[1]


# ---------------------------------------------------------------- pass@k
@pytest.mark.parametrize("n, c, k, expected", [
    (4, 1, 2, 0.5),   # 1 - C(3,2)/C(4,2) = 1 - 3/6
    (5, 2, 2, 0.7),   # 1 - C(3,2)/C(5,2) = 1 - 3/10
    (4, 1, 1, 0.25),  # pass@1 = c/n
    (8, 0, 4, 0.0),   # nothing correct
    (5, 4, 2, 1.0),   # n - c < k: every pair holds a correct sample
    (4, 4, 4, 1.0),
    (4, 1, 4, 1.0),
])
def test_pass_at_k_by_hand(n, c, k, expected):
    assert pass_at_k(n, c, k) == pytest.approx(expected, abs=1e-12)


def test_pass_at_k_is_the_subset_average_and_stable():
    for n in range(1, 8):
        for c in range(n + 1):
            for k in range(1, n + 1):
                subsets = list(itertools.combinations([1] * c + [0] * (n - c), k))
                assert pass_at_k(n, c, k) == pytest.approx(sum(map(any, subsets)) / len(subsets), abs=1e-12)
    # large n: the product form neither overflows nor loses the small miss probability
    assert pass_at_k(1024, 1, 1) == pytest.approx(1 / 1024)
    assert pass_at_k(1024, 512, 256) == pytest.approx(1 - math.comb(512, 256) / math.comb(1024, 256), rel=1e-9)
    with pytest.raises(ValueError):
        pass_at_k(4, 1, 5)
    with pytest.raises(ValueError):
        pass_at_k(4, 5, 1)


def test_default_pass_k():
    assert default_pass_k(1) == [1]
    assert default_pass_k(4) == [1, 2, 4]
    assert default_pass_k(12) == [1, 2, 4, 8]


# ---------------------------------------------------------------- maj@n
def test_majority_vote_groups_equivalent_answers():
    # "3" appears twice as a string, but \frac12, 0.5 and 1/2 are one answer with three votes
    answers = ["3", "\\frac12", "0.5", "3", "1/2"]
    winner = majority_vote(answers)
    assert winner == 1
    assert is_equiv(answers[winner], "\\frac{1}{2}") and not is_equiv(answers[winner], "3")
    # string equality alone would have picked "3"
    assert majority_vote(answers, equiv=lambda a, b: a == b) == 0


def test_majority_vote_ties_and_abstentions():
    assert majority_vote(["2", "3", "3", "2"]) == 0  # tie: the class seen first
    assert majority_vote(["7", "2", "3", "3", "2"]) == 1
    assert majority_vote([None, None, None, "4", "7", "7"]) == 4  # no-answer samples don't vote
    assert majority_vote([None, "5", None]) == 1
    assert majority_vote([None, None]) is None
    assert majority_vote([]) is None


# ---------------------------------------------------------------- evaluate() on a scripted engine
class ScriptedEngine:
    """Returns fixed texts per question (cycled over samples), and records every call."""

    def __init__(self, texts: dict[int, list[str]], tokenizer):
        self.texts, self.tokenizer, self.calls = texts, tokenizer, []

    def generate(self, prompt_ids, n, sampling):
        self.calls.append((len(prompt_ids), n, sampling.seed))
        out = []
        for ids in prompt_ids:
            q = int(re.search(r"problem-(\d+)", self.tokenizer.decode(ids)).group(1))
            for j in range(n):
                text = self.texts[q][j]
                out.append(Completion(token_ids=list(range(len(text))), text=text, truncated=text.endswith("..."),
                                      logprobs=None))
        return out


class CharTokenizer:
    chat_template = None

    def __call__(self, texts, add_special_tokens=True):
        return {"input_ids": [[ord(c) for c in t] for t in texts]}

    def decode(self, ids):
        return "".join(map(chr, ids))


ROWS = [{"id": f"p{q}", "question": f"problem-{q}", "answer": gold} for q, gold in enumerate(["1/2", "7", "10"])]
TEXTS = {
    0: ["\\boxed{0.5}", "so \\boxed{\\frac12}", "\\boxed{3}", "no idea..."],  # 2 correct; maj 1/2: right
    1: ["\\boxed{8}", "\\boxed{8}", "\\boxed{7}", "\\boxed{9}"],                 # 1 correct; maj 8: wrong
    2: ["...", "...", "...", "\\boxed{10}"],                                     # 1 correct, 3 abstain; maj right
}


def test_evaluate_metrics_by_hand():
    engine = ScriptedEngine(TEXTS, CharTokenizer())
    sampling = SamplingConfig(max_new_tokens=8, seed=5)
    metrics, records = evaluate(engine, CharTokenizer(), ROWS, template="plain", sampling=sampling, n=4,
                                batch_samples=8)
    assert metrics["accuracy"] == pytest.approx(4 / 12)
    assert metrics["pass@1"] == pytest.approx(4 / 12)
    # pass@2: (1 - C(2,2)/C(4,2)) + 2 * (1 - C(3,2)/C(4,2)) = 5/6 + 1/2 + 1/2
    assert metrics["pass@2"] == pytest.approx((5 / 6 + 0.5 + 0.5) / 3)
    assert metrics["pass@4"] == pytest.approx(1.0)
    assert metrics["maj@4"] == pytest.approx(2 / 3)
    lengths = [len(t) for q in range(3) for t in TEXTS[q]]
    assert metrics["response_len_mean"] == pytest.approx(sum(lengths) / 12)
    assert metrics["truncated_frac"] == pytest.approx(4 / 12)
    assert list(metrics) == ["accuracy", "pass@1", "pass@2", "pass@4", "maj@4", "response_len_mean", "truncated_frac"]
    # per-sample records, problems in order, samples contiguous
    assert [(r["id"], r["sample"]) for r in records] == [(f"p{q}", j) for q in range(3) for j in range(4)]
    assert [r["extracted"] for r in records[:4]] == ["0.5", "\\frac12", "3", None]
    assert [r["correct"] for r in records[:4]] == [1.0, 1.0, 0.0, 0.0]
    assert records[0]["gold"] == "1/2" and records[0]["completion"] == "\\boxed{0.5}"
    # chunks of 8 samples = 2 prompts, each chunk with its own seed derived from sampling.seed
    assert [c[:2] for c in engine.calls] == [(2, 4), (1, 4)]
    assert len({c[2] for c in engine.calls}) == 2
    # n = 1 (training's periodic eval): accuracy only, pass@k on request
    metrics1, _ = evaluate(ScriptedEngine(TEXTS, CharTokenizer()), CharTokenizer(), ROWS, template="plain",
                           sampling=sampling)
    assert metrics1["accuracy"] == pytest.approx(1 / 3) and set(metrics1) == {"accuracy", "response_len_mean",
                                                                             "truncated_frac"}
    with pytest.raises(ValueError, match="pass@k"):
        evaluate(engine, CharTokenizer(), ROWS, template="plain", sampling=sampling, n=2, pass_k=[4])


class TwoProcessAccelerator:
    """Stands in for one of 2 processes: reduce adds the other process's sums (captured beforehand)."""

    def __init__(self, rank: int, other: torch.Tensor | None = None):
        self.process_index, self.num_processes, self.device, self.other, self.sent = rank, 2, "cpu", other, None

    def reduce(self, tensor, reduction):
        assert reduction == "sum"
        self.sent = tensor.clone()
        return tensor + self.other if self.other is not None else tensor


def test_evaluate_splits_rows_over_processes_and_sums_metrics():
    sampling = SamplingConfig(max_new_tokens=8)
    kw = dict(template="plain", sampling=sampling, n=4)
    single, _ = evaluate(ScriptedEngine(TEXTS, CharTokenizer()), CharTokenizer(), ROWS, **kw)
    acc1 = TwoProcessAccelerator(1)
    _, records1 = evaluate(ScriptedEngine(TEXTS, CharTokenizer()), CharTokenizer(), ROWS, accelerator=acc1, **kw)
    acc0 = TwoProcessAccelerator(0, other=acc1.sent)
    merged, records0 = evaluate(ScriptedEngine(TEXTS, CharTokenizer()), CharTokenizer(), ROWS, accelerator=acc0, **kw)
    assert {r["id"] for r in records0} == {"p0", "p2"} and {r["id"] for r in records1} == {"p1"}
    assert merged == pytest.approx(single)


# ---------------------------------------------------------------- eval.py on the tiny model (HF backend)
def write_jsonl(path: Path, rows: list[dict]) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


QUESTIONS = ["What is 3 + 4?", "What is 12 - 5?", "Compute 2 * 8.", "What is 40 + 2?", "Solve for x: x - 1 = 5."]


@pytest.fixture
def tiny_sets(tmp_path):
    a = write_jsonl(tmp_path / "a.jsonl", [{"question": q, "answer": "7"} for q in QUESTIONS])
    b = write_jsonl(tmp_path / "b.jsonl", [{"problem": "What is 1 + 1?", "answer": "2", "id": "b-one"}])
    return a, b


def run_eval(tiny_model_path, datasets, out, **kw):
    kw = dict(n=3, max_new_tokens=12, temperature=1.0, top_p=1.0, backend="hf") | kw
    args = eval_script.Args(model=tiny_model_path, datasets=datasets, output_dir=str(out), **kw)
    summary = eval_script.main(args)
    samples = [json.loads(line) for line in (Path(out) / "samples.jsonl").read_text().splitlines()]
    return summary, samples


def test_eval_script_outputs_and_determinism(tiny_model_path, tiny_sets, tmp_path, capsys):
    a, b = tiny_sets
    summary, samples = run_eval(tiny_model_path, f"{a},{b}", tmp_path / "run1")
    table = capsys.readouterr().out
    # table: a header with every metric, one row per data set
    header = next(line for line in table.splitlines() if line.startswith("dataset"))
    assert header.split() == ["dataset", "problems", "avg@3", "pass@1", "pass@2", "maj@3", "len", "trunc"]
    assert any(line.startswith(a) and line.split()[1] == "5" for line in table.splitlines())
    assert any(line.startswith(b) and line.split()[1] == "1" for line in table.splitlines())
    # summary.json: the same as returned, metrics per data set
    on_disk = json.loads((tmp_path / "run1" / "summary.json").read_text())
    assert on_disk == json.loads(json.dumps(summary))
    assert list(on_disk["results"]) == [a, b] and on_disk["backend"] == "hf"
    assert on_disk["results"][a]["problems"] == 5 and on_disk["results"][a]["n"] == 3
    assert set(on_disk["results"][a]["metrics"]) == {"accuracy", "pass@1", "pass@2", "maj@3", "response_len_mean",
                                                     "truncated_frac"}
    # samples.jsonl: every sample, with what a reader needs
    assert len(samples) == 5 * 3 + 1 * 3
    assert set(samples[0]) == {"dataset", "id", "sample", "completion", "extracted", "gold", "correct", "length",
                               "truncated"}
    assert [s["sample"] for s in samples[:6]] == [0, 1, 2, 0, 1, 2]
    assert [s["id"] for s in samples[-3:]] == ["b-one"] * 3 and samples[-1]["dataset"] == b
    assert all(1 <= s["length"] <= 12 and (s["length"] == 12 or not s["truncated"]) for s in samples)
    m = on_disk["results"][a]["metrics"]
    assert m["truncated_frac"] == pytest.approx(sum(s["truncated"] for s in samples[:15]) / 15)
    assert m["response_len_mean"] == pytest.approx(sum(s["length"] for s in samples[:15]) / 15)
    # same seed -> same samples; another seed -> other samples
    _, again = run_eval(tiny_model_path, f"{a},{b}", tmp_path / "run2")
    assert again == samples
    _, other = run_eval(tiny_model_path, f"{a},{b}", tmp_path / "run3", seed=1)
    assert [s["completion"] for s in other] != [s["completion"] for s in samples]


def test_eval_script_scores_what_the_model_wrote(tiny_model_path, tiny_sets, tmp_path):
    # The random model is never right on real golds; make golds from its own (deterministic) answers
    # and check that correctness, pass@k and maj@n follow.
    a, _ = tiny_sets
    _, samples = run_eval(tiny_model_path, a, tmp_path / "probe", temperature=0.0)  # greedy: all 3 samples equal
    answered = [s for s in samples if s["sample"] == 0 and s["extracted"] is not None]
    assert answered, "the tiny model produced no extractable answer; cannot test scoring"
    rows = [{"question": q, "answer": "7"} for q in QUESTIONS]
    for s in answered:
        rows[int(s["id"].split(":")[-1]) - 1]["answer"] = s["extracted"]
    hits = write_jsonl(tmp_path / "a.jsonl", rows)  # same file name: same row ids
    summary, scored = run_eval(tiny_model_path, hits, tmp_path / "scored", temperature=0.0)
    assert [s["completion"] for s in scored] == [s["completion"] for s in samples]
    right = {s["id"] for s in answered}
    assert all(s["correct"] == (1.0 if s["id"] in right else 0.0) for s in scored)
    m = summary["results"][hits]["metrics"]
    assert m["accuracy"] == pytest.approx(len(right) / 5)
    assert m["pass@2"] == m["maj@3"] == pytest.approx(len(right) / 5)


def test_eval_script_checkpoint_folder(tiny_model_path, tmp_path):
    step = tmp_path / "checkpoints" / "step-4"
    step.mkdir(parents=True)
    (step / "model").symlink_to(tiny_model_path)
    assert eval_script.resolve_checkpoint(str(step)) == str(step / "model")
    assert eval_script.resolve_checkpoint(tiny_model_path) == tiny_model_path
    assert eval_script.resolve_checkpoint("Qwen/Qwen3-4B-Base") == "Qwen/Qwen3-4B-Base"


@pytest.fixture
def no_model_load(monkeypatch):
    def refuse(*a, **k):
        raise AssertionError("the model was loaded before the data sets were checked")
    monkeypatch.setattr(eval_script, "load_policy", refuse)
    monkeypatch.setattr(eval_script, "resolve_model", refuse)


def test_eval_script_missing_dataset_fails_before_model_load(tiny_model_path, tiny_sets, tmp_path, no_model_load):
    a, _ = tiny_sets
    missing = str(tmp_path / "nope" / "missing.jsonl")
    with pytest.raises(FileNotFoundError, match=re.escape(f"--datasets {missing}: ") + ".*no such file"):
        run_eval(tiny_model_path, f"{a},{missing}", tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_eval_script_row_without_gold_fails_before_model_load(tiny_model_path, tmp_path, no_model_load):
    bad = write_jsonl(tmp_path / "bad.jsonl", [{"question": "What is 1 + 1?", "answer": "2"},
                                               {"question": "What is 2 + 2?"}])
    with pytest.raises(ValueError, match=re.escape(f"--datasets {bad}: {bad}: row 2: missing answer")):
        run_eval(tiny_model_path, bad, tmp_path / "out")
    with pytest.raises(ValueError, match="pass-k"):
        run_eval(tiny_model_path, bad, tmp_path / "out", pass_k=(8,))


@pytest.mark.heavy
@pytest.mark.parametrize("backend", ["hf", "vllm"])
def test_eval_cli(tiny_model_path, tiny_sets, tmp_path, backend):
    # The command line as a user types it, in a fresh process (vLLM: its own engine, 30-60 s on CPU).
    a, _ = tiny_sets
    cmd = [sys.executable, str(ROOT / "eval.py"), "--model", tiny_model_path, "--datasets", f"{a},arithmetic",
           "--limit", "2", "--n", "2", "--pass-k", "1", "2", "--max-new-tokens", "8", "--backend", backend,
           "--output-dir", str(tmp_path / "cli")]
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "avg@2  pass@1  pass@2  maj@2" in out.stdout
    summary = json.loads((tmp_path / "cli" / "summary.json").read_text())
    assert summary["backend"] == backend and list(summary["results"]) == [a, "arithmetic"]
    precision = resolve_precision("auto")  # the machine's choice, printed and recorded (the probe's figure varies)
    assert untimed(str(precision)) in untimed(out.stdout) and summary["precision"] == precision.name
    assert len((tmp_path / "cli" / "samples.jsonl").read_text().splitlines()) == 2 * 2 * 2


def test_datasets_flag_keeps_arithmetic_settings_together():
    assert eval_script.split_datasets("math500, arithmetic:digits=1,operands=3,ops=+-* ,gsm8k") == [
        "math500", "arithmetic:digits=1,operands=3,ops=+-*", "gsm8k"]
    assert eval_script.split_datasets("gsm8k,,aime24") == ["gsm8k", "aime24"]
