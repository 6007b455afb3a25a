"""Grader suite for common/grader.py and common/reward.py: equivalence, near misses, extraction, hostile input, batched form."""

import os
import threading
import time

import pytest

from common.grader import extract_answer, is_equiv, math_reward, normalize_gold
from common.reward import batch_math_reward, shutdown_pool

# ------------------------------------------------------------------------------------------------
# Equivalence: (prediction, gold)
# ------------------------------------------------------------------------------------------------
EQUIVALENT = [
    # fractions and decimals
    ("0.5", "\\frac12"),
    ("\\frac{1}{2}", "0.5"),
    ("1/2", "\\frac{1}{2}"),
    ("\\dfrac{1}{2}", "0.5"),
    ("\\tfrac12", "1/2"),
    ("0.75", "3/4"),
    ("-0.5", "-\\frac12"),
    ("\\frac{-1}{2}", "-\\frac{1}{2}"),
    ("0.333333", "\\frac13"),  # floats are rounded to 6 decimals
    ("3.14159265", "\\pi"),
    ("10^{-3}", "0.001"),
    ("0.1", ".1"),
    ("12.50", "12.5"),
    ("27.0", "27"),  # AMC gold answers are floats
    ("27", "27.0"),
    ("-7", "-7.0"),
    # radicals and LaTeX variants
    ("\\sqrt3", "\\sqrt{3}"),
    ("\\frac{\\sqrt3}{2}", "\\frac{\\sqrt{3}}{2}"),
    ("2\\sqrt{2}", "\\sqrt{8}"),
    ("\\sqrt{2}/2", "\\frac{\\sqrt{2}}{2}"),
    ("\\pi/3", "\\frac{\\pi}{3}"),
    ("2\\pi", "2 \\pi"),
    ("\\left( 3, \\frac{\\pi}{2} \\right)", "(3,\\pi/2)"),
    ("1,\\!000,\\!000", "1000000"),
    # sets, intervals, tuples, matrices
    ("[1,2]", "[1, 2]"),
    ("(-\\infty, 3]", "(-\\infty,3]"),
    ("(-\\infty,0)\\cup(1,\\infty)", "(-\\infty, 0) \\cup (1, \\infty)"),
    ("\\{1,2\\}", "\\{2,1\\}"),
    ("1,2", "2,1"),  # a bare list is a set
    ("(1,2,3)", "(1, 2, 3)"),
    ("(-1, 4)", "\\left(-1,4\\right)"),
    ("x \\in [1,2]", "[1,2]"),
    ("\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}", "\\begin{pmatrix}1\\\\2\\end{pmatrix}"),
    ("\\infty", "\\infty"),
    # equations and expressions
    ("x=3", "3"),
    ("3", "x=3"),
    ("y=2x+1", "2x+1"),
    ("x^2+2x+1", "(x+1)^2"),
    ("\\frac{x+1}{2}", "\\frac{x}{2}+\\frac{1}{2}"),
    ("2^{10}", "1024"),
    ("5!", "120"),
    ("\\binom{5}{2}", "10"),
    # plain-text numbers, units, degrees, currency
    ("1,000", "1000"),
    ("1000", "1,000"),
    ("5\\text{ cm}", "5"),
    ("440\\text{ cm}^2", "440"),
    ("864 \\mbox{ inches}^2", "864"),
    ("30^\\circ", "30"),
    ("30", "30^{\\circ}"),
    ("\\$18", "18"),
    ("18", "\\$18.00"),
    # percentages: the sign is a unit (50% == 50) or /100 (50% == 0.5), see the module docstring
    ("50\\%", "50"),
    ("50", "50\\%"),
    ("0.5", "50\\%"),
    ("10\\%", "0.1"),
    # multiple choice and text
    ("\\text{(B)}", "B"),
    ("\\text{Evelyn}", "\\text{Evelyn}"),
]

NOT_EQUIVALENT = [
    ("2", "1/2"),
    ("1/2", "2"),
    ("[1,2]", "(1,2)"),  # closed vs open interval
    ("(1,2)", "[1,2]"),
    ("(2,1)", "(1,2)"),  # a tuple is ordered
    ("(3,2,1)", "(1,2,3)"),
    ("(0,\\infty)", "[0,\\infty)"),
    ("3.14", "\\pi"),  # too coarse at 6 decimals
    ("0.333", "\\frac13"),
    ("\\frac{1}{3}", "0.33"),
    ("1.5", "1.50001"),
    ("10", "100"),
    ("100", "10"),
    ("1000", "10"),  # Qwen2.5-Math's include_percentage would accept these two
    ("0.1", "10"),
    ("0.5", "50"),  # no % sign anywhere: no /100
    ("5000", "50\\%"),
    ("-3", "3"),  # sign errors
    ("3", "-3"),
    ("x+1", "x-1"),
    ("\\{1,2\\}", "\\{1,3\\}"),  # wrong or missing set member
    ("\\{1,2\\}", "\\{1,2,3\\}"),
    ("1,2", "1,2,3"),
    ("2x+1", "y=2x+2"),
    ("x=3", "x=4"),
    ("x^2+1", "(x+1)^2"),
    ("\\frac{\\pi}{2}", "90^\\circ"),  # degrees are not converted to radians
    ("\\sqrt{2}", "2"),
    ("\\sqrt{3}", "\\sqrt{2}"),
    ("A", "B"),
    ("\\text{(A)}", "\\text{(B)}"),
    ("", "5"),
    ("5", ""),
]


@pytest.mark.parametrize("pred,gold", EQUIVALENT)
def test_equivalent(pred, gold):
    assert is_equiv(pred, gold)
    assert math_reward(f"So the answer is $\\boxed{{{pred}}}$.", gold) == 1.0


@pytest.mark.parametrize("pred,gold", NOT_EQUIVALENT)
def test_not_equivalent(pred, gold):
    assert not is_equiv(pred, gold)
    assert math_reward(f"So the answer is $\\boxed{{{pred}}}$.", gold) == 0.0


# ------------------------------------------------------------------------------------------------
# Completions: only the final answer counts
# ------------------------------------------------------------------------------------------------
COMPLETIONS = [
    ("Step 1... so $x = \\boxed{\\frac{3}{4}}$", "0.75", 1.0),
    ("Maybe \\boxed{5}. Wait, I made an error: \\boxed{6}.", "5", 0.0),  # first candidate right, final wrong
    ("The answer is 18. Double-checking, the total is \\boxed{20}.", "18", 0.0),  # right only mid-text
    ("Candidates: \\boxed{3}, \\boxed{4}, \\boxed{5}", "3", 0.0),
    ("First \\boxed{3}, on reflection \\boxed{4}.", "4", 1.0),
    ("She pays 3 * 6 = 18 dollars.\n#### 18", "18", 1.0),
    ("Janet sells 16 - 3 - 4 = <<16-3-4=9>>9 eggs.\n#### 1,000", "1000", 1.0),
    ("In total she has 42 apples.", "42", 1.0),  # last-number fallback
    ("She had 42, then gave away 2", "42", 0.0),
    ("The answer is 3 or maybe 4", "3", 0.0),
    ("\\fbox{7}", "7", 1.0),
    ("so the result is \\boxed 7 indeed", "7", 1.0),
    ("the value is \\boxed{\\{1, 2\\}}", "\\{2,1\\}", 1.0),
    ("\\boxed{1,000}", "#### 1,000", 1.0),  # a whole GSM8K solution as gold
    ("The answer: \\boxed{27}", 27.0, 1.0),  # AMC golds are floats in the json
    ("no answer at all", "5", 0.0),
    ("\\boxed{5", "5", 0.0),  # truncated: the final box never closes
    ("I think \\boxed{}", "5", 0.0),
]


@pytest.mark.parametrize("completion,gold,expected", COMPLETIONS)
def test_math_reward_completions(completion, gold, expected):
    assert math_reward(completion, gold) == expected


# ------------------------------------------------------------------------------------------------
# Extraction
# ------------------------------------------------------------------------------------------------
EXTRACTION = [
    ("so \\boxed{\\frac{1}{\\sqrt{2}}} done", "\\frac{1}{\\sqrt{2}}"),  # nested braces
    ("\\boxed{\\{1,2\\}}", "\\{1,2\\}"),  # escaped braces don't close the box
    ("\\boxed{1} then \\boxed{2} then \\boxed{3}", "3"),  # multiple -> last
    ("\\boxed{\\boxed{9}}", "9"),
    ("\\boxed{ 12 }", "12"),
    ("\\boxed 5.", "5."),
    ("\\fbox{x+1}", "x+1"),
    ("\\boxed{4} ... #### 7", "4"),  # a box beats ####
    ("work\n#### 72", "72"),
    ("#### $1,234.", "1234"),  # thousands separators dropped (so is_equiv reads one number)
    ("The change is -7 degrees", "-7"),
    ("3-5 is two", "3 - 5"),  # a subtraction, whole: not -5, and not 5 cut out of it
    ("The answer is 3 + 4 = 7.", "7"),  # a chain in plain text: its last side
    ("The answer is 7 - 0.", "7 - 0"),  # a computation left undone, whole
    ("about 3.75 km", "3.75"),
    ("population 1,234,567 people", "1234567"),
    ("list 1, 2, 3", "3"),
    ("ratio 3/4", "3/4"),
    ("ratio $\\frac{3}{4}$", "\\frac{3}{4}"),  # a math span is taken whole
    # never a digit run cut out of a larger number or expression (the failure kinds of the old last-number rule)
    ("so the slope is $-\\frac{3}{4}$.", "-\\frac{3}{4}"),
    ("so the slope is -\\frac{3}{4}.", "-\\frac{3}{4}"),
    ("the probability is .5", ".5"),
    ("the town has 12 500 people", "12500"),
    ("der Preis ist 3,75 Euro", "3.75"),
    ("so $x \\ge 2$.", "x \\ge 2"),
    ("so x >= 2.", "x >= 2"),
    ("the domain is $[2, 5)$.", "[2, 5)"),
    ("the domain is [2, 5).", "[2, 5)"),
    ("the ratio is \\frac34.", "\\frac34"),
    ("the side is \\sqrt2", "\\sqrt2"),
    ("so $y \\approx 7$", "y \\approx 7"),
    ("so $f(2) = 3 - 8 = -5$", "-5"),  # a chain: its last side
    ("The answer is 18, which I checked with 2 methods.", "18"),  # the first answer after the last "answer is"
    ("**Answer:** 27", "27"),
    ("The answer is either 8 or 9.", None),  # hedged: no single final answer
    ("so it is \\boxed{3} or \\boxed{4}.", None),
    ("costs $2.50, so 4 boxes cost $10.", "10"),  # money signs, not math spans
    ("the roots are $2$ and $-3$.", "2, -3"),  # adjacent spans: one list
    ("so x = 7, the 4th prime", "x = 7"),  # "4th" is a word
    ("no digits here", None),
    ("", None),
    ("\\boxed{}", None),
    ("\\boxed{unclosed", None),
    ("\\boxed{" + "1" * 2000 + "}", None),  # too long to be an answer
]


@pytest.mark.parametrize("text,expected", EXTRACTION)
def test_extract_answer(text, expected):
    assert extract_answer(text) == expected


@pytest.mark.parametrize(
    "gold,expected",
    [
        ("Natalia sold 48/2 = <<48/2=24>>24 clips.\n#### 1,000", "1000"),
        ("1,000", "1000"),
        ("$\\frac{1}{2}$", "\\frac{1}{2}"),
        ("\\boxed{5}", "5"),
        (27.0, "27.0"),
        ("(1,2)", "(1,2)"),
        ("1,2", "1,2"),
    ],
)
def test_normalize_gold(gold, expected):
    assert normalize_gold(gold) == expected


def test_gold_side_tidying():
    assert math_reward("\\boxed{(-\\infty, 0) \\cup \\{1\\}}", "$(-\\infty, 0) \\cup\\{1\\}$.") == 1.0
    assert is_equiv("\\frac12", "0.5") and is_equiv("0.5", "\\frac12")  # eval's majority vote groups both ways


# ------------------------------------------------------------------------------------------------
# Hostile input: every case scores 0.0 in bounded time, in the main thread and in another one
# ------------------------------------------------------------------------------------------------
HOSTILE = {
    "power tower": "\\boxed{9^{9^{9^{9^{9}}}}}",
    "short tower": "\\boxed{9^{9^{9}}}",
    "python tower": "\\boxed{10**10**10}",
    "bare python tower": "the answer is 10**10**10**10",
    "nested base tower": "\\boxed{(9^{9999})^{9999}}",
    "huge exponent": "\\boxed{9^{99999999}}",
    "huge factorial": "\\boxed{100000000!}",
    "factorial of a power": "\\boxed{(10^{9})!}",
    "huge binomial": "\\boxed{\\binom{10^{9}}{5 \\cdot 10^{8}}}",
    "huge sum": "\\boxed{\\sum_{i=1}^{10^{9}} i^i}",
    "integral": "\\boxed{\\int_0^1 e^{x^2} dx}",
    "multinomial": "\\boxed{(x+y+z)^{50}}",
    "polynomial degree": "\\boxed{\\frac{y}{e x^{999}}}",
    "symbolic binomial": "\\boxed{\\binom{99}{x}}",
    "nested parens": "\\boxed{" + "(" * 5000 + "1" + ")" * 5000 + "}",
    "nested braces": "\\boxed{" + "{" * 5000 + "1" + "}" * 5000 + "}",
    "nested boxes": "\\boxed{" * 3000 + "1" + "}" * 3000,
    "open brackets": "[" * 100_000,
    "megabyte box": "\\boxed{" + "1+" * 500_000 + "1}",
    "megabyte digits": "1" * 1_000_000,
    "megabyte boxes": "\\boxed{" * 200_000,
    "megabyte text": "lorem ipsum " * 100_000,
    "NUL bytes": "\x00" * 10_000 + "\\boxed{\x00}",
    "surrogates": "\ud800\\boxed{\udfff}\udc00",
    "control chars": "\\boxed{\x01\x02\x1b[31m}",
    "unicode": "\\boxed{１２３}" + "😀" * 1000,
    # the no-box extraction's patterns on long runs of what they look for
    "spaced digits": "1 " * 500_000,
    "comma digits": "1," * 500_000,
    "money signs": "$1 " * 300_000,
    "open pairs": "[1, " * 300_000,
    "anchors": "the answer is " * 100_000,
    "percents": "7%" * 500_000,
    "relations": "x > " * 300_000,
    "thin spaces": "1\\," * 500_000,
    "joined boxes": "\\boxed{1}, " * 100_000,
    "nested lists": "[[1], " * 300_000,
    "one long row": "[[" + "1, " * 300_000 + "1]]",
    # simplify expands a product of sums: these 8 factors of 5 letters are 390,625 terms, 90 s
    "product of sums": "\\boxed{" + "".join(f"({'+'.join(f'x_{{{5 * j + k}}}' for k in range(5))})" for j in range(8)) + "}",
}


def test_products_of_sums_are_compared_up_to_200_expanded_terms():
    """The bound counts an expansion's terms: 8 x 5 x 5 = 200 are compared (equal in another factor order),
    9 x 5 x 5 = 225 are not (such products take minutes to expand in general: scored 0)."""
    def product(*factors):
        return "".join("(" + " + ".join(f) + ")" for f in factors)
    a, b, c = ([f"{x}_{{{k}}}" for k in range(n)] for x, n in (("x", 8), ("y", 5), ("z", 5)))
    assert is_equiv(product(a, b, c), product(c, a, b))
    assert not is_equiv(product(a + ["w"], b, c), product(c, a + ["w"], b))


@pytest.mark.timeout(120)
@pytest.mark.parametrize("name", list(HOSTILE))
def test_hostile_main_thread(name):
    t = time.monotonic()
    assert math_reward(HOSTILE[name], "5") == 0.0
    assert time.monotonic() - t < 3.0


@pytest.mark.timeout(120)
def test_hostile_other_thread():
    """No signal-based timeouts outside the main thread: the pre-guards alone must keep it fast."""
    times = {}

    def score_all():
        for name, completion in HOSTILE.items():
            t = time.monotonic()
            assert math_reward(completion, "5") == 0.0
            times[name] = time.monotonic() - t

    th = threading.Thread(target=score_all, daemon=True)
    th.start()
    th.join(timeout=60)
    assert not th.is_alive() and len(times) == len(HOSTILE)
    assert max(times.values()) < 3.0, times


@pytest.mark.timeout(60)
def test_hostile_gold_and_odd_types():
    assert math_reward("\\boxed{5}", "9^{9^{9^{9}}}") == 0.0
    assert math_reward(None, None) == 0.0
    assert math_reward(12, 12) == 1.0  # str() of anything
    assert math_reward("\\boxed{5}\x00", "5") == 1.0  # NUL bytes are dropped, not fatal
    assert math_reward("\\boxed{5}\ud800", "5") == 1.0
    t = time.monotonic()
    assert math_reward("x" * 1_000_000 + " so \\boxed{5}", "5") == 1.0  # long but honest
    assert time.monotonic() - t < 3.0


# ------------------------------------------------------------------------------------------------
# Batched form (worker processes)
# ------------------------------------------------------------------------------------------------
def _mixed_batch() -> tuple[list[str], list[str]]:
    completions, golds = [], []
    for pred, gold in EQUIVALENT[::4] + NOT_EQUIVALENT[::4]:
        completions.append(f"Thus \\boxed{{{pred}}}.")
        golds.append(gold)
    for completion, gold, _ in COMPLETIONS[:8]:
        completions.append(completion)
        golds.append(gold)
    for name in ("power tower", "huge factorial", "nested parens", "surrogates", "multinomial"):
        completions.append(HOSTILE[name])
        golds.append("5")
    return completions, golds


@pytest.fixture
def fresh_pool(monkeypatch):
    """A pool started from this test's environment, stopped afterwards."""
    shutdown_pool()
    yield monkeypatch
    shutdown_pool()


@pytest.mark.timeout(180)
def test_batch_matches_single(fresh_pool):
    completions, golds = _mixed_batch()
    expected = [math_reward(c, g) for c, g in zip(completions, golds)]
    assert 0.0 < sum(expected) < len(expected)
    assert batch_math_reward(completions, golds, num_workers=2, timeout=10.0) == expected
    assert batch_math_reward(completions, golds, num_workers=2, timeout=10.0) == expected  # pool reused
    assert batch_math_reward(completions, golds, num_workers=0) == expected  # in-process
    assert batch_math_reward([], []) == []
    with pytest.raises(ValueError):
        batch_math_reward(["a"], [])


@pytest.mark.timeout(180)
def test_batch_from_a_thread(fresh_pool):
    completions, golds = _mixed_batch()
    expected = [math_reward(c, g) for c, g in zip(completions, golds)]
    results = []
    threads = [
        threading.Thread(target=lambda: results.append(batch_math_reward(completions, golds, timeout=10.0)))
        for _ in range(2)
    ]  # two threads at once: the pool serves one batch at a time
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=150)
    assert results == [expected, expected]


@pytest.mark.timeout(180)
def test_batch_survives_hung_and_dead_workers(fresh_pool):
    fresh_pool.setenv("REWARD_WORKER_TEST_HOOKS", "1")
    batch_math_reward(["\\boxed{1}"], ["1"], timeout=60.0)  # start the workers (imports take a while)
    completions = ["\\boxed{1}", "\\boxed{2}", "\\boxed{3}", "\\boxed{4}", "\\boxed{5}", "\\boxed{6}"]
    golds = ["1", "__hang__", "3", "__die__", "5", "7"]
    t = time.monotonic()
    rewards = batch_math_reward(completions, golds, num_workers=2, timeout=2.0)
    assert rewards == [1.0, 0.0, 1.0, 0.0, 1.0, 0.0]
    # The hang costs one timeout; the replacement workers start while the other one keeps scoring.
    assert time.monotonic() - t < 60
    assert batch_math_reward(["\\boxed{1}", "\\boxed{2}"], ["1", "2"], timeout=60.0) == [1.0, 1.0]


@pytest.mark.timeout(180)
def test_batch_survives_a_worker_killed_between_calls(fresh_pool):
    import common.reward as reward

    assert batch_math_reward(["\\boxed{1}"], ["1"], timeout=60.0) == [1.0]
    os.kill(reward._POOL.workers[0].proc.pid, 9)  # e.g. the OOM killer
    reward._POOL.workers[0].proc.wait(timeout=30)
    assert batch_math_reward(["\\boxed{1}", "\\boxed{2}", "\\boxed{3}"], ["1", "2", "3"], timeout=60.0) == [1.0] * 3


@pytest.mark.timeout(120)
def test_test_hooks_are_off_by_default(fresh_pool):
    fresh_pool.delenv("REWARD_WORKER_TEST_HOOKS", raising=False)
    t = time.monotonic()  # with the hooks on, "__hang__" would run into the 20 s timeout
    assert batch_math_reward(["\\boxed{1}", "\\boxed{2}"], ["__hang__", "__die__"], timeout=20.0) == [0.0, 0.0]
    assert time.monotonic() - t < 20


@pytest.mark.parametrize("digits,operands,ops", [(1, 2, "+-"), (1, 3, "+"), (1, 3, "+-*"), (2, 2, "+-*"), (2, 3, "*")])
def test_copying_an_arithmetic_question_into_the_box_earns_nothing(digits, operands, ops):
    """The reward hack a base model found on these tasks: box the question's computation, which math-verify
    evaluates and calls right. Every problem: the copy scores 0 (alone, or with a value after it), the value 1, the
    worked chain ending in the value 1."""
    from common.data import make_arithmetic

    for row in make_arithmetic(40, "train", seed=3, digits=digits, num_operands=operands, ops=ops):
        expr = row["question"].removeprefix("What is ").removesuffix("?")
        assert math_reward(f"Answer: \\boxed{{{expr}}}.", row["answer"]) == 0.0, expr
        assert math_reward(f"Answer: \\boxed{{{expr}}} = {row['answer']}.", row["answer"]) == 0.0, expr
        assert math_reward(f"The answer is ${expr}$.", row["answer"]) == 0.0, expr
        assert math_reward(f"Answer: \\boxed{{{row['answer']}}}.", row["answer"]) == 1.0, expr
        assert math_reward(f"Answer: {expr} = {row['answer']}. The answer is \\boxed{{{row['answer']}}}.",
                           row["answer"]) == 1.0, expr
        assert math_reward(f"So \\boxed{{{expr} = {row['answer']}}}.", row["answer"]) == 1.0, expr
