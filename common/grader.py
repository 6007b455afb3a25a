"""The grading rules: final-answer extraction, a guard against hostile answers, equivalence through math-verify.

    math_reward("... so the answer is \\boxed{\\frac12}.", "0.5")        # -> 1.0

The trainer calls the batched, hang-proof form in common/reward.py.

Answer extraction (`extract_answer`): only the FINAL answer counts, so a completion that lists several
candidates earns nothing unless its last one is right, and a hedged final answer ("8 or 9") earns nothing.
A response that thinks first (`<think> ... </think>`) is read after its last `</think>`: a draft inside the
thinking is not the answer. In this order, the first rule that finds something decides:
  1. the last `\\boxed{...}` / `\\fbox{...}` (braces matched by a linear scan, escaped `\\{ \\}` skipped),
     or `\\boxed 5` (the token after the space); if that last box is empty, never closed (truncated)
     or over 1000 characters -> None. The boxes before it that are one answer with it (up to 20) join it:
     where only joiners separate them (",", ";", "and", `\\quad`, `\\text{and}`: `\\boxed{2}, \\boxed{4}` ->
     "2, 4"), where one statement holds them (a few words, no number, no end of sentence or line; markup such as
     `\\(`, `$`, `++++` is no word: `\\boxed{12} papers and \\boxed{5} bins` -> "12, 5"), or where each
     follows a part label ("(a)", "part (b)"), across lines; never across a word that takes a box back or hedges
     ("wrong", "but", "actually", "check", "answer": the last box counts). Boxes joined by "or" are a hedge -> None,
     unless each gives a value of one variable (`\\boxed{x = 2} or \\boxed{x = 3}`: the solution set "x = 2, x = 3");
  2. the last answer on the last GSM8K `#### <answer>` line;
  3. the first answer after the last "answer is" / "Answer:" / "**Answer:**" / "final answer is"
     (so "The answer is 18, checked with 2 methods" gives 18, "the answer is either 8 or 9" None); an answer
     that is the subject of "is" is skipped: "Final Answer: The smallest $m$ is 21." -> 21; a matrix named there
     ("the identity matrix") is the answer; unless two or more later lines hold answers: then the solution went
     on after an early "answer:" and rule 4 decides;
  4. the last answer in the text;
  5. else None.
An "answer" there is a whole math span (`$...$`, `\\(...\\)`, `\\[...\\]`, `$$...$$`; adjacent spans joined by
",", "and", "or" make one list: "$2$ and $-3$" -> "2, -3"), of which a chain `a = b = c` or `f(2) = 5` gives its
last side, while an equation in variables stays whole (`6x - 4y + 2z = 10`, `y = 2x + 3`) and a labelled point
`A(0, 5)` is its coordinates; or, in plain text, a number with its sign and form (`-12`, `.5`, `1,000`,
`12 500`, `12\\,500`, `3,75` as 3.75, `3/4`, `25%`, `3.2e5` and `1.5 \\times 10^{-3}` as powers of ten, a power
`2^3` or a whole tower `2^3^4`), an interval or pair of numbers (`[2, 5)`), a nested list (`[[1, 2], [3, 4]]`), a
relation (`x > 3`, `x = 0,5`) or a LaTeX atom (`-\\frac34`, `2\\sqrt3`, `\\frac{9}{4}\\pi`); numbers joined by
operators (+ - * × ÷ \\times \\cdot \\div =) are one answer, as in a span: "The answer is 3 + 4 = 7." -> 7,
"The answer is 7 - 0." -> "7 - 0". Never a digit run cut out of a larger number or expression:
`x \\ge 2` is the relation, not 2; `4th` is no number. A
`$...$` holding prose is two money amounts, not math ("costs $2.50, so 4 boxes cost $10" -> 10). Unicode minus and
times signs read as - and \\times.

Gold answers (`normalize_gold`) are tidied, not graded: a gold that is a worked solution (a box, a `####` line,
or sentences of prose) gives its answer by the rules above; a trailing backslash is dropped; `1,000` is 1000;
`0,25` is a decimal comma (no thousands group follows a lone 0), while `0,1` stays a list of two values.

Equivalence (`is_equiv`) is math-verify's `verify` on both sides parsed as `\\boxed{...}`, so
0.5 == 1/2 == \\dfrac12, \\sqrt3 == \\sqrt{3}, \\left( \\right) and \\! are ignored, {1,2} == {2,1},
x=3 == 3, 1,000 == 1000, 27.0 == 27; floats compare after rounding to 6 decimals (3.14159265 == \\pi,
3.14 != \\pi, 0.333 != 1/3). Where the public graders differ, we follow math-verify:
  - percentages: "50\\%" == "50" (the sign is read as a unit, as in the Hendrycks MATH grader) and
    "50\\%" == "0.5" (the sign read as /100); a bare 50 != 0.5. The Qwen2.5-Math grader's
    `include_percentage` also accepts pred == gold/100 or gold*100 with no % sign anywhere; we don't,
    since it would pay 1000 for a gold answer of 10.
  - units and degrees: `\\text{ cm}`, `\\mbox{ inches}^2`, `^\\circ`, `\\$` are dropped (all three graders
    agree). Degrees are not converted to radians: 90^\\circ != \\frac{\\pi}{2}.
  - intervals and tuples: (1,2) is an open interval and != [1,2] (a closed one) or (2,1) (a tuple).
  - matrices: a nested list [[1, 2], [3, 4]] is the pmatrix with those rows ([[3], [-1]] a column); rows of
    unequal length are no matrix.
  - `\\mathrm{e}`, `\\operatorname{e}` and `\\text{e}` are Euler's number, `\\mathrm{i}` the imaginary unit.
Where the gold is a number (12, -3, 0.5, 3/4, \\frac{3}{4}), an answer whose value (the last side of a chain) still
holds a sum, difference or product of numbers scores 0 before math-verify sees it: `3 + 4 + 5` is the question of
an arithmetic task copied, not its answer (`is_undone_computation`); powers, fractions and powers of ten pass.
Where math-verify says no, the two sides are compared once more as expressions, parsed by math-verify's own LaTeX
parser (latex2sympy2_extended) without its answer rules: i is the imaginary unit ((1+i)^2 == 2i, 3+2i == 2i+3), a
run of letters is their product (3dc + 2ba == 2ab + 3cd; math-verify reads `dc` as one symbol and drops a final
h or d as hours or days: \\pi r^2 h == h r^2 \\pi), and the difference must expand to 0. Only where both sides
have a variable and no `\\text`: numbers were compared already, and words ("east", "seat") are no products.
Three more readings there: complex numbers by value, whatever their form (`2e^{i\\pi/3}` == `1 + \\sqrt{3}i`,
`e^{i\\pi}` == -1; 30 digits, where either side has the imaginary unit and no variable is left); a function
identity with its argument renamed (`f(n) = n^2` == `f(x) = x^2`; "for all x" after an identity is what it says);
a matrix named in words or by its symbol where the name fixes every entry at the gold's shape ("the identity
matrix", `I`, `I_2` for an identity gold; "the zero matrix", `0`, `\\mathbf{0}` for a zero gold; rows listed in
words are not read). Sums and products (`\\sum`, `\\prod`) are never evaluated: they are equal where their
parsed trees are (sympy orders the terms and factors: `\\sum_{k=1}^{n} k x_k` == `\\sum_{k=1}^{n} x_k k`; an equation
also with its sides swapped), so `\\sum_{k=1}^{n} k` != `\\frac{n(n+1)}{2}`.

Model text is hostile input. It is never eval'ed, and before sympy sees an answer `is_unsafe` rejects
(scores 0) what could blow up, above all in C code that no timeout interrupts: answers over 1000
characters or 20 nested brackets; integrals, limits, sums, products (sums and products only to evaluate); power towers (`9^{9^{9}}`,
`10**10**10`, `(9^{99})^{99}`); exponents or factorial/binomial arguments over 10^4; integers of more
than ~20,000 digits (`100000000!`); polynomials of total degree over 100 or over 200 terms once
expanded (`(x+y+z)^{50}`); and, once parsed, expressions whose expansion has over 200 terms (products of
sums: `(a+b+c+d+f)(g+h+j+k+l)...`, 8 such factors are 390,625 terms). Of the 14.8k gold answers of GSM8K,
MATH, MATH-500, AIME24, AMC23, OlympiadBench and Minerva it rejects one (a Minerva physics formula); none of
the 22.3k golds of those sets' splits expands to over 200 terms. In the main thread math-verify's own
signal.alarm timeouts (2 s a step) bound the rest. In other threads signals don't work and the guard is all there is, best effort: sympy's
simplify can still spend tens of seconds on contrived symbolic input (factorials of symbols next to
huge integers). Hence the batched form for the trainer, whose workers are killed on a deadline.
"""

from __future__ import annotations

import functools
import math
import re
import threading

import sympy
from sympy.core.function import AppliedUndef
from latex2sympy2_extended.latex2sympy2 import ConversionConfig, latex2sympy  # math-verify's LaTeX parser
from math_verify import parse, verify

MAX_ANSWER_CHARS = 1000  # no real answer is longer; sympy on 1 MB of LaTeX is slow
MAX_BOXES = 20  # boxes joined into one answer: "\\boxed{2}, \\boxed{4}" (a longer run keeps its last 20)
MAX_DEPTH = 20  # nested brackets; the deepest gold answer in our 7 data sets has 3
MAX_ARG = 10_000  # largest literal allowed in an exponent or a factorial/binomial argument
MAX_DIGITS = 20_000  # rough digits of the integers sympy may compute exactly (gold: 2004!, 2^{4950})
MAX_DEGREE = 100  # total degree of the symbolic powers in an answer (gold answers reach 96)
MAX_TERMS = 200  # terms of their expansions: (x+1)^{100} has 101, (x+y+z)^{50} 1326 (20 s)
ANSWERED_LATER = 2  # lines with an answer after an "answer is" line: then it was no final statement, the last answer is
MV_TIMEOUT_S = 2  # math-verify's per-step alarm (main thread only); whole seconds (signal.alarm).
# A cold ANTLR parser takes 0.4 s on a first \left( \right) with 8 processes on 2 cores: 1 s is too tight.


def clean_text(s: object) -> str:
    """Any input -> a str without NUL bytes or lone surrogates (which break encoding downstream)."""
    s = s if isinstance(s, str) else str(s)
    return s.replace("\x00", "").encode("utf-8", "replace").decode("utf-8")


# ---------------------------------------------------------------------------------------------
# Extraction
# ---------------------------------------------------------------------------------------------
def last_boxed(text: str, max_chars: int | None = None) -> str | None:
    """Content of the last `\\boxed{...}` / `\\fbox{...}` in `text` (or of `\\boxed 5`: the token after the space),
    braces matched, escaped `\\{ \\}` skipped; None if there is no box, or the last one does not close (within
    `max_chars`). The one box reader: completions here, data sets' worked solutions in common/data.py."""
    box = _last_box(text, len(text), max_chars)
    return box[0] if box else None


def _last_box(text: str, before: int, max_chars: int | None) -> tuple[str, int, int] | None:
    """(content, start, end) of the last box that starts before `before`, `end` the index just past it; None as in
    last_boxed."""
    k = _box_start(text, before)
    if k == -1:
        return None
    start = k + (6 if text.startswith("\\boxed", k) else 5)
    j = start
    while j < len(text) and text[j] in " \t":
        j += 1
    if text.startswith("{", j):
        content = _braced(text, j, max_chars)
        return (content, k, j + len(content) + 2) if content is not None else None
    token = _TOKEN.match(text, start)  # "\boxed 5"
    return (token.group(1), k, token.end()) if token else None


def _box_start(text: str, end: int) -> int:
    """Where the last \\boxed / \\fbox before `end` starts, or -1."""
    return max(text.rfind("\\boxed", 0, end), text.rfind("\\fbox", 0, end))


def _braced(text: str, i: int, max_chars: int | None) -> str | None:
    """Content of the brace group opening at text[i] == '{', or None if it does not close within `max_chars`
    (for a completion, MAX_ANSWER_CHARS: a longer answer would be rejected anyway; this keeps the scan short)."""
    depth, j, stop = 0, i, len(text) if max_chars is None else min(len(text), i + max_chars + 2)
    while j < stop:
        c = text[j]
        if c == "\\":  # \{ and \} are literal braces (sets), not grouping
            j += 2
            continue
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                return text[i + 1 : j]
        j += 1
    return None


_TOKEN = re.compile(r" +([^\s$]+)")

# ---- the final answer of a completion without a box (rule in the module docstring)
# a number: sign (not a subtraction: "3-5" -> 5), thousands groups (",", a space, "\,", ",\!"; the first group 1-3
# digits), a decimal point or a decimal comma ("3,75": not 3 digits after it, not a list "1,2,3"), ".5", "3/4", "%"
_SIGN = r"(?:(?<![\w)\]}^_])-\s?)?"  # a minus that is a sign, not a subtraction ("3-5")
_NUM = (_SIGN + r"(?<![\w.,\\/^_])"
        r"(?:(?:\d{1,3}(?:(?:,|\\,|,\\!| )\d{3})+(?![\d,])|\d+)(?:\.\d+|,\d{1,2}(?![\d,])|,\d{4,}(?![\d,]))?|\.\d+)"
        r"(?:\s*/\s*\d+(?![\d.]))?(?!(?:st|nd|rd|th)\b)(?:\s*(?:\\?%|\s?percent\b))?")  # not an ordinal: 4th
_ATOM = (r"(?:(?<![\w)\]}])-\s?)?(?:\d+(?:\.\d+)?\s*)?\\(?:[dt]?frac(?:\{[^{}$]{1,40}\}\{[^{}$]{1,40}\}|\d\d?|\d\{[^{}$]{1,40}\})"
         r"|sqrt(?:\{[^{}$]{1,40}\}|\d+)|pi\b)(?:\s*\\?pi\b)?")
_PLAIN = re.compile(
    r"(?P<matrix>\[\s*\[[^\[\]$]{1,200}\](?:\s*,\s*\[[^\[\]$]{1,200}\])*\s*\])"  # a nested list [[1, 2], [3, 4]]
    rf"|(?P<pair>[\[(]\s*{_NUM}\s*,\s*{_NUM}\s*[\])])"  # an interval or a pair: [2, 5), (-1, 4)
    rf"|(?P<relation>(?<![\w\\])[a-zA-Z]\s*(?:<=|>=|<|>|≤|≥|\\[lg]eq?\b|\\neq\b|=)\s*)(?P<rhs>{_ATOM}|{_NUM})"  # x > 3
    r"|(?P<sci>(?<![\w.])\d+(?:\.\d+)?(?:[eE][+-]?\d+|\s*(?:\\times|\\cdot)\s*10\^\{?-?\d+\}?)(?!\w|\.\d))"  # 3.2e5
    rf"|(?P<power>{_SIGN}(?<![\w.^])\d+(?:\.\d+)?(?:\^(?:\{{[-\d^{{}}]{{1,40}}\}}|-?\d+))+(?![\w^{{]|\.\d))"  # 2^3, 2^3^4
    rf"|(?P<atom>{_ATOM})|(?P<number>{_NUM})")
_SEPARATOR = re.compile(r"(?<=\d)(?:,\\!|\\,|,| )(?=\d{3}(?!\d))")  # thousands: 1,000  12 500  12\,500  12,\!500
_DECIMAL_COMMA = re.compile(r"(?<=\d),(?=\d+$)")
_EQUALS = re.compile(r"(?<![<>!\\])=(?!=)")  # an equals sign, not <=, >=, !=, ==, \\=
_RELATION = re.compile(r"<|>|≤|≥|\\[lg]eq?\b|\\neq?\b|\\ne\b")
# math spans: $$...$$, \[...\], \(...\), $...$ (escaped \$ inside is money, not a delimiter)
_SPAN = re.compile(r"\$\$(.+?)\$\$|\\\[(.+?)\\\]|\\\((.+?)\\\)|(?<![\\$])\$(?!\$)((?:\\.|[^$\\\n])+?)(?<!\\)\$", re.S)
_WORDS = re.compile(r"(?<![\\a-zA-Z])[a-zA-Z]{2,}\s+[a-zA-Z]{2,}(?![a-zA-Z])")  # prose, not math: "$2.50, so 4 boxes cost $"
_TEXT_CMD = re.compile(r"\\(?:text|mbox|mathrm|textbf)\s*\{[^{}]*\}")
_JOINER = re.compile(r"\s*(?:,|,?\s*(?:and|or))\s*")  # "$2$ and $-3$": one answer of two values
_ANCHOR = re.compile(r"\banswer\b\s*(?:\*\*)?\s*(?:is\b|:|=|\*\*)\s*(?:\*\*)?:?", re.I)  # the answer is / Answer: / **Answer**
_HEDGE = re.compile(r"\s*,?\s*or\b", re.I)
_SUBJECT = re.compile(r"\s*(?:is|are|was|equals|becomes)\b", re.I)
_CALLS = re.compile(r"\\[a-zA-Z]+|[a-zA-Z]\s*\([^()]*\)")  # commands and function calls f(2): not variables
_LETTER = re.compile(r"[a-zA-Z]")
_UPRIGHT = re.compile(r"\\(?:mathrm|operatorname|text|textrm)\s*\{\s*([ei])\s*\}")  # \mathrm{e}, \mathrm{i}
_IDENTITY = re.compile(r"\s*[a-zA-Z]\s*\(\s*[a-zA-Z](?:\s*,\s*[a-zA-Z])*\s*\)\s*=")  # f(x) = ..., g(x, y) = ...
_LATEX_THOUSANDS = re.compile(r"(?<=\d)(?:\\,|,\\!)(?=\d{3})")  # 12\,500, 12,\!500 in a math span


def _candidates(text: str) -> list[tuple[int, int, str]]:
    """(start, end, answer) of every answer-like piece of `text`, in order: whole math spans (adjacent ones joined:
    "$2$ and $-3$" -> "2, -3"), and, outside them, plain numbers, intervals, relations and LaTeX atoms."""
    spans: list[tuple[int, int, list[str]]] = []  # start, end, the contents of one span or of joined ones
    for m in _SPAN.finditer(text):
        content = next(g for g in m.groups() if g is not None).strip()
        if not content or _WORDS.search(_TEXT_CMD.sub("", content)):
            continue  # empty, or prose between two money signs
        if spans and _JOINER.fullmatch(text[spans[-1][1] : m.start()]) and all(map(_joinable, spans[-1][2] + [content])):
            start, _, contents = spans.pop()  # "$2$ and $-3$", "$1$ or $6$": one list, never equal to a single value
            spans.append((start, m.end(), contents + [content]))
        else:
            spans.append((m.start(), m.end(), [content]))
    out, pos = [], 0
    for start, end, contents in spans + [(len(text), len(text), [])]:
        out += _plain_chains(text, pos, start)
        if contents:
            out.append((start, end, ", ".join(map(_span_answer, contents))))
        pos = end
    return out


_OPERATOR = re.compile(r"\s*(?:[-+*×÷=]|\\times|\\cdot|\\div)\s*")  # between two numbers of plain text


def _plain_chains(text: str, start: int, end: int) -> list[tuple[int, int, str]]:
    """The plain-text answers of text[start:end], where numbers joined by operators make one: a chain `3 + 4 = 7`
    gives its last side (7), a computation left undone (`7 - 0`, `3 + 4 + 5`) stays whole, never its first number."""
    out = []  # (start, end, answer, is it a number (open to an operator after it), was it joined)
    for p in _PLAIN.finditer(text, start, end):
        number, answer = p.lastgroup in ("number", "sci", "power", "atom"), _plain_answer(p)
        gap = text[out[-1][1] : p.start()] if out else ""
        sign = answer.startswith("-") and not gap.strip()  # "12 - 5": "- 5" read as a sign is a subtraction
        if out and out[-1][3] and number and (sign or _OPERATOR.fullmatch(gap)):
            op, answer = ("-", answer[1:].lstrip()) if sign else (gap.strip(), answer)
            first, _, chain, _, _ = out.pop()
            out.append((first, p.end(), f"{chain} {op} {answer}", True, True))
        else:
            out.append((p.start(), p.end(), answer, number, False))
    return [(a, b, _EQUALS.split(answer)[-1].strip() if joined else answer) for a, b, answer, _, joined in out]


def _tidy_number(number: str) -> str:
    """A plain number as math-verify reads it: 12 500 -> 12500, 3,75 -> 3.75, 20 percent -> 20\\%."""
    number = _SEPARATOR.sub("", number.strip())
    percent = re.search(r"\s*(?:\\?%|percent)$", number)
    if percent:
        number = number[: percent.start()]
    return _DECIMAL_COMMA.sub(".", number) + ("\\%" if percent else "")


def _plain_answer(m: re.Match) -> str:
    if m.group("sci"):  # 3.2e5 -> 3.2\times10^{5} (math-verify reads the e of 3.2e5 as Euler's number)
        return re.sub(r"[eE]([+-]?\d+)$", lambda e: f"\\times10^{{{int(e.group(1))}}}", m.group("sci"))
    if m.group("number"):
        return _tidy_number(m.group("number"))
    if m.group("relation"):
        return m.group("relation") + (_tidy_number(m.group("rhs")) if not m.group("rhs").lstrip("-").startswith("\\") else m.group("rhs"))
    return m.group()


def _joinable(content: str) -> bool:
    """A value, or `x = value`: what a list of answers is made of ("$x = 1$ or $x = 6$"), unlike `x^2 = 16` or `x > 0`."""
    sides = _EQUALS.split(content)
    return not _RELATION.search(content) and (len(sides) == 1 or (len(sides) == 2 and re.fullmatch(r"\s*[a-zA-Z]\s*", sides[0])))


def _sides(content: str) -> list[str]:
    """The sides of a chain `a = b = c`, split at the equals signs outside braces (`\\sum_{k=1}^{n} k = S` has two)."""
    depth, cuts = 0, [-1]
    for m in re.finditer(r"[{}]|" + _EQUALS.pattern, content):
        depth += {"{": 1, "}": -1}.get(m.group(), 0)
        if m.group() == "=" and depth == 0:
            cuts.append(m.start())
    return [content[a + 1 : b] for a, b in zip(cuts, cuts[1:] + [len(content)])]


def _span_answer(content: str) -> str:
    """The answer a math span states: the last right-hand side of a chain `a = b = c` (or of
    `f(2) = 5`, whose left side is no variable), else the whole span (`x = 5`, `y = 2x + 3`, `x \\ge 2`)."""
    content = _LATEX_THOUSANDS.sub("", content)  # 12\,500 -> 12500 (math-verify reads 12\,500 as 512)
    if point := re.fullmatch(r"\s*[A-Z]\s*(\(.*\))\s*", content):
        return point.group(1)  # a labelled point A(0, 5): the label is no factor
    sides = _sides(content)
    if len(sides) == 2 and (_LETTER.search(_CALLS.sub("", sides[0])) or _IDENTITY.match(content)):
        return content  # an equation in its variables (6x - 4y + 2z - 10 = 0, f(t) = 2t + 1), not a computation (4 \cdot 5 = 20)
    if len(sides) > 2 or (len(sides) == 2 and not re.fullmatch(r"\s*[a-zA-Z](?:_\{?\w+\}?)?\s*", sides[0])):
        return sides[-1].strip()
    return content


def _final_answer(text: str) -> str | None:
    """The final answer of a completion that has no box (tiers in the module docstring)."""
    k = text.rfind("####")
    if k != -1:  # GSM8K: "#### 1,000", "#### $18."
        found = _candidates(text[k + 4 :].split("\n", 1)[0])
        if found:
            return found[-1][2]
    anchors = list(_ANCHOR.finditer(text))
    if anchors and (named := _NAMED_MATRIX.match(text, anchors[-1].end())):
        return named.group().strip(" .")  # "The answer is the identity matrix."
    if anchors:  # the last "the answer is ...": its first answer-like piece, unless it hedges ("8 or 9")
        phrase = text[anchors[-1].end() : anchors[-1].end() + 300]
        found = _candidates(phrase)
        while len(found) > 1 and _SUBJECT.match(phrase, found[0][1]):
            found = found[1:]  # "The smallest $m$ is 21": $m$ is what the sentence is about, 21 the answer
        if found and found[0][0] < 150 and not _answered_later(text, anchors[-1].end() + found[0][1]):
            start, end, answer = found[0]
            if _HEDGE.match(phrase, end) and len(found) > 1:
                return None
            return answer
    found = _candidates(text)
    return found[-1][2] if found else None


def _answered_later(text: str, pos: int) -> bool:
    """Do ANSWERED_LATER lines after the one holding `pos` have answers? Then the solution went on after it."""
    line_end, later = text.find("\n", pos), 0
    for line in text[line_end:].split("\n") if line_end != -1 else []:
        later += bool(_candidates(line))
        if later >= ANSWERED_LATER:
            return True
    return False


_BOX_JOINER = re.compile(r"(?:\s|\$|,|;|\\[,;: ]|\\q?quad\b|\\text\{\s*(?:and|,)?\s*\}|\band\b)*")
_MARKUP = re.compile(r"\\text\{([^{}]*)\}|\\[()\[\]]|\$|\\q?quad\b|\\[,;: !]|\++")  # \text{and} -> and; \( \) $ \quad ++++ -> ""
_OR_GAP = re.compile(r"[\s,]*(?:either\s+)?or[\s,]*", re.I)
_STATEMENT_END = re.compile(r"[.?!:](?=\s|$)|\n")
_NOT_ONE_ANSWER = re.compile(  # between two boxes: they are no single answer (a hedge, a correction, a new claim)
    r"\b(?:or|either|maybe|perhaps|possibly|probably|not|no|but|wrong|incorrect|instead|actually|rather|mistake|"
    r"error|tried|try|check|checking|verify|wait|answer|answers|final|finally|then|so|hence|thus|therefore|first|"
    r"next|now|after|later|again|reflection|reconsider|recheck|correct|corrected|correction|revised|gives|yields)\b",
    re.I)
_PART = re.compile(r"\bpart\s*\(?\s*(?:[a-h]|[ivx]{1,4}|\d)\b\s*\)?|(?<![\w\\^_])\(\s*(?:[a-h]|[ivx]{1,4})\s*\)", re.I)
_SET_BEFORE = re.compile(r"(?<![\\a-zA-Z])([a-zA-Z])\s*=\s*$")  # "$x = \boxed{2}$": the box is x's value
_SET_INSIDE = re.compile(r"\s*([a-zA-Z])\s*=(?!=)")  # "\boxed{x = 2}"
MAX_JOIN_WORDS = 6  # "papers and", "for part (a) and": a statement's words between its boxes


def _box_variable(text: str, box: tuple[str, int, int]) -> tuple[str | None, str]:
    """(the variable a box gives a value of, the box's content with `x = ` in front where the variable stands before it)."""
    if m := _SET_INSIDE.match(box[0]):
        return m.group(1), box[0].strip()
    if m := _SET_BEFORE.search(_MARKUP.sub("", text[max(0, box[1] - 12) : box[1]])):
        return m.group(1), f"{m.group(1)} = {box[0].strip()}"
    return None, box[0].strip()


def _joins(text: str, previous: tuple[str, int, int], box: tuple[str, int, int], before: int) -> bool | None:
    """Do two consecutive boxes make one answer (docstring of _final_boxes)? True, False, or None: a hedge."""
    gap = text[previous[2] : box[1]]
    if _BOX_JOINER.fullmatch(gap):
        return True
    words = _SET_BEFORE.sub("", _MARKUP.sub(lambda m: m.group(1) or " ", gap))  # "x =" before a box is its own
    if _OR_GAP.fullmatch(words):  # "x = 2 or x = 3" is a solution set; "3 or 4" a hedge
        var = _box_variable(text, previous)[0]
        return var is not None and var == _box_variable(text, box)[0] or None
    if re.search(r"\d", gap) or _NOT_ONE_ANSWER.search(words):
        return False
    if _PART.search(words) and _PART.search(_MARKUP.sub(" ", text[before : previous[1]])):
        return True  # a box per labelled part: "(a) ... \boxed{3} ... (b) ... \boxed{7}"
    return not _STATEMENT_END.search(words) and len(re.findall(r"[a-zA-Z]+", words)) <= MAX_JOIN_WORDS


def _final_boxes(text: str) -> str | None:
    """The final answer of a completion with a box: the last box's content, with the boxes before it that are one
    answer with it (up to MAX_BOXES), ", "-joined; None if the last box is unclosed or too long, or a hedge.

    Consecutive boxes are one answer where only joiners separate them (",", ";", "and", "\\quad", "\\text{and}":
    "\\boxed{2}, \\boxed{4}" -> "2, 4"); where they are one statement: a few words (MAX_JOIN_WORDS), no number,
    no end of sentence or line ("\\boxed{12} papers and \\boxed{5} bins" -> "12, 5"; math markup between them, as
    `\\(\\boxed{2}\\) and \\(\\boxed{3}\\)` or `++++`, is no word); or where each box follows a part label of its own
    ("(a)", "part (b)"), across sentences. Never where a word between them takes a box back or hedges ("wrong",
    "but", "actually", "check", "answer", ...: the last box counts). Boxes joined by "or" are a hedge (None), unless
    each gives a value of the same variable: `\\boxed{x = 2} or \\boxed{x = 3}`, `$p = \\boxed{-1}$ or
    $p = \\boxed{2}$` state a solution set ("x = 2, x = 3"); a box whose variable stands before it gets it back
    (`x = ` before its content) when it is joined."""
    box = _last_box(text, len(text), MAX_ANSWER_CHARS)
    if box is None:
        return None
    boxes, previous = [box], _last_box(text, box[1], MAX_ANSWER_CHARS)
    while len(boxes) < MAX_BOXES and previous and previous[2] <= boxes[0][1]:
        earlier = _last_box(text, previous[1], MAX_ANSWER_CHARS)
        joined = _joins(text, previous, boxes[0], earlier[2] if earlier and earlier[2] <= previous[1] else 0)
        if joined is None:
            return None  # "\boxed{3} or \boxed{4}": no single final answer
        if not joined:
            break
        boxes.insert(0, previous)
        previous = earlier
    if len(boxes) == 1:
        return box[0].strip() or None
    return ", ".join(c for c in (_box_variable(text, b)[1] for b in boxes) if c) or None


def extract_answer(text: str) -> str | None:
    """The final answer of a completion (rule in the module docstring), or None."""
    if not isinstance(text, str):
        return None
    text = text.replace("\u2212", "-").replace("\u00d7", "\\times ")  # Unicode minus and times signs
    think = text.rfind("</think>")
    if think != -1:  # the answer follows the thinking; a draft inside it is not the answer
        text = text[think + len("</think>") :]
    if "\\boxed" in text or "\\fbox" in text:
        return _final_boxes(text)
    answer = _final_answer(text[-20_000:])  # the final answer is at the end; a bound keeps hostile text fast
    return (answer.strip() or None) if answer is not None else None


def normalize_gold(answer: str) -> str:
    """Tidy a data set's gold answer: GSM8K's '#### 1,000' -> '1000', '$x$' -> 'x', '\\boxed{x}' -> 'x'."""
    s = re.sub(r"\\+\s*$", "", clean_text(answer).strip())  # a stray trailing backslash or line break
    if "####" in s or "\\boxed" in s or "\\fbox" in s or _is_solution(s):  # a worked solution, a boxed answer
        s = extract_answer(s) or s
    s = s.strip().rstrip(".").strip("$").strip()
    if re.fullmatch(r"-?0,\d{2,}", s):  # 0,25: a decimal comma (no thousands group follows a lone 0); MATH's
        # "0,1" and "0,4" are lists of two solutions, so one digit after "0," stays a list
        s = s.replace(",", ".")
    elif re.fullmatch(r"-?\d{1,3}(,\d{3})+(\.\d+)?", s):
        s = s.replace(",", "")
    return s


def _is_solution(gold: str) -> bool:
    """A gold that is a worked solution in sentences, not an answer: 6+ words of prose outside math and \\text."""
    prose = _TEXT_CMD.sub("", _SPAN.sub(" ", gold))
    return bool(re.search(r"[.!?](\s|$)", prose)) and len(re.findall(r"(?<![\\\w])[a-zA-Z]{2,}\b", prose)) >= 6


# ---------------------------------------------------------------------------------------------
# Safety: reject answers that could make sympy compute astronomically large numbers
# ---------------------------------------------------------------------------------------------
_GROWER = re.compile(r"\^|\*\*|(?<!\\)!(?!=)|\\[dt]?binom|\\choose|\\Gamma")
_CALCULUS = re.compile(r"\\(?:[io]*int|lim|sum|prod)(?![a-zA-Z])")  # none in 14.8k gold answers
_POWER_NEXT = re.compile(r"\s*(\^|\*\*)")
_LETTERS, _DIGITS = re.compile(r"[a-zA-Z]*"), re.compile(r"[\d.]*")
_OPEN, _CLOSE = "([{", ")]}"


def _group_end(s: str, i: int) -> int:
    """Index just past the bracket group opening at s[i] (any bracket kind), or len(s)."""
    depth = 0
    for j in range(i, len(s)):
        depth += (s[j] in _OPEN) - (s[j] in _CLOSE)
        if depth == 0:
            return j + 1
    return len(s)


def _operand_after(s: str, i: int) -> tuple[str, int]:
    """The operand starting at s[i] (a bracket group, a \\command with its groups, a number, or a
    character) and the index after it."""
    while i < len(s) and s[i] == " ":
        i += 1
    if i >= len(s):
        return "", i
    if s[i] in _OPEN:
        j = _group_end(s, i)
    elif s[i] == "\\":
        j = _LETTERS.match(s, i + 1).end()
        while j < len(s) and s[j] == "{":
            j = _group_end(s, j)
    elif s[i].isdigit() or s[i] == "-":
        j = _DIGITS.match(s, i + 1).end()
    else:
        j = i + 1
    return s[i:j], j


def _operand_before(s: str, i: int) -> str:
    """The operand ending just before s[i]: a bracket group, a number, or a character."""
    j = i - 1
    while j >= 0 and s[j] == " ":
        j -= 1
    if j < 0:
        return ""
    if s[j] in _CLOSE:
        depth = 0
        for k in range(j, -1, -1):
            depth += (s[k] in _CLOSE) - (s[k] in _OPEN)
            if depth == 0:
                return s[k : j + 1]
        return s[: j + 1]
    k = j
    while k > 0 and (s[k - 1].isdigit() or s[k - 1] == "."):
        k -= 1
    return s[k : j + 1]


def _int_bound(s: str) -> float:
    """Crude upper bound on the value of an operand without powers: the product of its literals."""
    bound = 1.0
    for lit in re.findall(r"\d+", s):
        lit = lit.lstrip("0")
        bound *= float("inf") if len(lit) > 9 else max(1, int(lit or 0))
    return bound


def is_unsafe(ans: str) -> bool:
    """True if sympy could hang on `ans`: huge integers (in C code, where no timeout reaches),
    huge polynomial expansions, deep recursion."""
    if len(ans) > MAX_ANSWER_CHARS:
        return True
    if _CALCULUS.search(ans):  # a final answer is a value; sympy may integrate or sum for minutes
        return True
    depth = 0
    for c in ans:
        depth += (c in _OPEN) - (c in _CLOSE)
        if depth > MAX_DEPTH:
            return True
    digits = 0.0  # rough total of the digits of the big integers sympy may compute exactly
    degree, terms = 0.0, 1  # of the polynomials it may expand
    for m in _GROWER.finditer(ans):
        op = m.group()
        if op == "!":
            args = [_operand_before(ans, m.start())]
        elif op == "\\choose":  # {n \choose k}: no operand scan, judge the whole answer
            args = [ans.replace("\\choose", " ")]
        else:
            arg, end = _operand_after(ans, m.end())
            args = [arg]
            if op.endswith("binom"):
                args.append(_operand_after(ans, end)[0])
            elif op in ("^", "**") and _POWER_NEXT.match(ans, end):
                return True  # unbraced tower: a^b^c, 10**10**10
        if any(_GROWER.search(a) or _int_bound(a) > MAX_ARG for a in args):
            return True  # towers 9^{9^{9}}, (10^{9})!, huge exponents or factorials
        n = max(_int_bound(a) for a in args)
        if op in ("^", "**"):
            # (9^{999})^{999} nests powers through the base: multiply the exponents inside it too.
            base = _operand_before(ans, m.start())
            for b in _GROWER.finditer(base):
                if b.group() in ("^", "**"):
                    n *= _int_bound(_operand_after(base, b.end())[0])
            if _LETTER.search(base):
                # simplify() expands and factors polynomials: (x+1)^{1000} or x^{999} in a fraction
                # take seconds. Bound the total degree and the number of terms.
                degree += n
                k = 1 + base.count("+") + base[1:].count("-")  # terms in the base
                if degree <= MAX_DEGREE:  # terms of (a_1 + ... + a_k)^n; products of powers multiply
                    terms *= math.comb(int(n) + k - 1, k - 1)
                if degree > MAX_DEGREE or terms > MAX_TERMS:
                    return True
                continue
            digits += n * max(1, sum(c.isdigit() for c in base))
        elif any(_LETTER.search(a) for a in args):  # (n+999)!/n!, \binom{y}{999}: polynomials
            degree += 10 * n  # and slower ones than powers: simplify(\binom{99}{x}) takes 50 s
            if degree > MAX_DEGREE:
                return True
        else:  # n!, \Gamma(n), \binom{n}{k}: at most n * log10(n) digits
            digits += n * len(str(int(n)))
        if digits > MAX_DIGITS:
            return True
    return False


# ---------------------------------------------------------------------------------------------
# Equivalence
# ---------------------------------------------------------------------------------------------
def _in_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


_PARSED: dict[str, tuple] = {}  # gold answers repeat G times per prompt; eval re-checks answers


def _parse(s: str, use_alarm: bool) -> tuple:
    if s in _PARSED:
        return _PARSED[s]
    # Wrapped in \boxed{} so math-verify reads the whole string as one answer (its boxed rules strip
    # units, \text, \left/\right) instead of hunting for the last expression inside it.
    parsed = tuple(parse("\\boxed{" + s + "}", parsing_timeout=MV_TIMEOUT_S if use_alarm else None))
    if parsed:  # an empty result may be a timeout on a busy machine: don't remember it
        if len(_PARSED) >= 10_000:
            _PARSED.clear()
        _PARSED[s] = parsed
    return parsed


# A number as a gold answer states: 12, -3, 0.5, 3/4, \frac{3}{4}, -\frac34. Against such a gold, an answer that
# still holds a sum, difference or product of numbers is the computation left undone: 3 + 4 + 5, 2 \times 6, 15 - 3.
_NUMBER_GOLD = re.compile(r"-?(?:\d+(?:\.\d+)?|\.\d+|\d+/\d+|\\[dt]?frac\s*(?:\{\d+\}\{\d+\}|\d\d))")
_COMPUTATION = re.compile(r"\d[\s)}]*(?:[-+*×÷]|\\times|\\cdot|\\div)(?!\s*10\s*\^)[\s({]*[-+]?[\s({]*\d")  # not 1.5 \times 10^{-3}


def is_undone_computation(pred: str, gold: str) -> bool:
    r"""An answer that restates a computation instead of its value, where the gold is a number: "3 + 4 + 5" for 12.
    math-verify evaluates such an answer and calls it equal; on a task whose question is that computation (the
    built-in arithmetic tasks) a model then earns the reward by copying the question into a box, which a base model
    found in 16 steps (docs/grading.md). A power, a fraction and a power of ten stay numbers: 2^{10}, 6/2, 3 \cdot
    10^{5}."""
    value = _EQUALS.split(pred)[-1]  # of a chain "3 + 4 + 5 = 12", its last side is the answer
    return bool(_NUMBER_GOLD.fullmatch(gold.replace(" ", ""))) and bool(_COMPUTATION.search(value))


_ROW = re.compile(r"\[([^\[\]]*)\]")


def _as_matrix(s: str) -> str:
    """A nested list [[1, 2], [3, 4]] (rows of equal length) as the pmatrix it means; anything else unchanged."""
    if not re.fullmatch(r"\s*\[\s*\[.*\]\s*\]\s*", s, re.S):
        return s
    rows = [[c.strip() for c in row.split(",")] for row in _ROW.findall(s[s.index("[") + 1 : s.rindex("]")])]
    if not rows or len({len(r) for r in rows}) != 1 or not all(all(r) for r in rows):
        return s
    return "\\begin{pmatrix} " + " \\\\ ".join(" & ".join(r) for r in rows) + " \\end{pmatrix}"


_SYMBOLIC = re.compile(r"(?<![\\a-zA-Z])[a-zA-Z]")  # a variable, not a letter of a \command
_CONVERSION = ConversionConfig(lowercase_symbols=False)


@functools.lru_cache(maxsize=10_000)  # gold answers repeat G times per prompt
def _expression(s: str) -> object:
    """latex2sympy's reading of `s`, or None where it cannot read it."""
    try:
        return latex2sympy(s, conversion_config=_CONVERSION)
    except Exception:
        return None


def _as_products(e: sympy.Expr, source: str) -> sympy.Expr:
    """i as the imaginary unit, and a symbol named by a run of letters (`dc`, read as one) as their product."""
    subs = {}
    for x in e.free_symbols:
        name = getattr(x, "name", "")
        if name == "i":
            subs[x] = sympy.I
        elif re.fullmatch(r"[a-zA-Z]{2,4}", name) and "\\" + name not in source:
            subs[x] = sympy.Mul(*(sympy.Symbol(c) for c in name))
    return e.subs(subs) if subs else e


_SUMS = re.compile(r"\\(?:sum|prod)(?![a-zA-Z])")
_NOT_SUMS = re.compile(r"\\(?:[io]*int|lim)(?![a-zA-Z])")
_IMAGINARY = re.compile(r"(?<![\\a-zA-Z_])i(?![a-zA-Z])")  # the imaginary unit, not the i of a_i or \pi
_FOR_ALL = re.compile(r"\s*,?\s*(?:\\(?:text|mbox)\{\s*(?:for|holds for)\s+(?:all|every|each)\b[^{}]*\}|\\forall\b"
                      r"|\b(?:for|holds for)\s+(?:all|every|each)\b).*$", re.S)
_NAMED_MATRIX = re.compile(r"\s*(?:\\text\{\s*)?(?:the\s+)?(?:(?P<identity>identity)|zero|null)\s+matrix\s*\}?\s*", re.I)
_MATRIX_SYMBOL = re.compile(r"\s*(?:\\mathbf\{\s*|\\mathrm\{\s*)?(?:(?P<identity>I)|O|0)(?:_\{?\d+\}?)?\s*\}?\s*")


def _structure_equal(pred: str, gold: str) -> bool:
    """Sums and products (`\\sum`, `\\prod`) as written, never evaluated (sympy may sum for minutes): equal where
    their parsed trees are, which sympy builds with the terms and factors of each sum and product in one canonical
    order (`\\sum_{k=1}^{n} k x_k` == `\\sum_{k=1}^{n} x_k k`); an equation also with its sides swapped."""
    a, b = _expression(pred), _expression(gold)
    if not (isinstance(a, sympy.Basic) and isinstance(b, sympy.Basic)):
        return False
    a, b = _as_products(a, pred), _as_products(b, gold)
    if isinstance(a, sympy.Eq) and isinstance(b, sympy.Eq):
        return sympy.srepr(a.lhs - a.rhs) in (sympy.srepr(b.lhs - b.rhs), sympy.srepr(b.rhs - b.lhs))
    return sympy.srepr(a) == sympy.srepr(b)


def _function_rule(e: object) -> tuple | None:
    """(name, arguments, rule) of a function identity `f(x) = rule`, or None."""
    if isinstance(e, sympy.Eq) and isinstance(e.lhs, AppliedUndef) and e.lhs.args \
            and all(isinstance(x, sympy.Symbol) for x in e.lhs.args) and len(set(e.lhs.args)) == len(e.lhs.args):
        return e.lhs.func.__name__, e.lhs.args, e.rhs
    return None


def _named_matrix(pred: str, gold: tuple) -> bool:
    """A matrix the answer names ("the identity matrix", `I`, `I_2`, "the zero matrix", `0`), equal to the gold
    matrix where the name fixes every entry at the gold's shape."""
    named = _NAMED_MATRIX.fullmatch(pred) or _MATRIX_SYMBOL.fullmatch(pred)
    matrix = next((x for x in gold if isinstance(x, sympy.MatrixBase)), None)
    if not named or matrix is None:
        return False
    if named.group("identity"):
        return matrix.is_square and matrix == sympy.eye(matrix.rows)
    return all(x == 0 for x in matrix)


def _algebra_equal(pred: str, gold: str) -> bool:
    """Equal as expressions by math-verify's own LaTeX parser without its answer rules: math-verify keeps i a symbol
    ((1+i)^2 != 2i), reads the `dc` of 3dc as one symbol and drops a trailing h or d as a unit (hours, days)."""
    imaginary = bool(_IMAGINARY.search(pred) or _IMAGINARY.search(gold))
    if not (_SYMBOLIC.search(pred) and _SYMBOLIC.search(gold) or imaginary) or _TEXT_CMD.search(pred + gold):
        return False  # real numbers compare in verify; words ("east" vs "seat") are no products
    a, b = _expression(pred), _expression(gold)
    rules = _function_rule(a), _function_rule(b)
    if all(rules) and rules[0][0] == rules[1][0] and len(rules[0][1]) == len(rules[1][1]):
        # f(n) = n^2 is f(x) = x^2: the same rule, its argument renamed
        a, b = rules[0][2].subs(dict(zip(rules[0][1], rules[1][1])), simultaneous=True), rules[1][2]
    if not (isinstance(a, sympy.Expr) and isinstance(b, sympy.Expr)):
        return False
    diff = _as_products(a, pred) - _as_products(b, gold)
    if _expanded_terms(diff) > MAX_TERMS:
        return False
    if imaginary and not diff.free_symbols:  # two complex numbers in any form (2e^{i\\pi/3}, 1 + \\sqrt{3}i): by value
        return abs(complex(sympy.N(diff, 30))) < 1e-20
    return sympy.expand(diff) == 0


def _expanded_terms(e: sympy.Basic) -> int:
    """An upper bound on the terms of `e` expanded: a product of sums multiplies them, a power of k terms to the
    n-th has comb(n + k - 1, k - 1). (a+b+c+d+f)(g+h+j+k+l)...: 8 such factors are 390,625 terms, 90 s to expand.)"""
    if e.is_Add:
        return sum(_expanded_terms(x) for x in e.args)
    if e.is_Mul:
        return math.prod(min(_expanded_terms(x), MAX_TERMS + 1) for x in e.args)
    if e.is_Pow and e.exp.is_Integer:  # is_unsafe bounded the exponent
        k = min(_expanded_terms(e.base), MAX_TERMS + 1)
        return math.comb(abs(int(e.exp)) + k - 1, k - 1)
    return sum(_expanded_terms(x) for x in e.args) or 1  # sin(...): its arguments are expanded too


def is_equiv(pred: str, gold: str) -> bool:
    """True if two answer strings are mathematically equivalent (decisions in the module docstring)."""
    try:
        pred, gold = clean_text(pred).strip().rstrip("."), clean_text(gold).strip().rstrip(".")
        pred, gold = (_FOR_ALL.sub("", x) if _IDENTITY.match(x) else x for x in (pred, gold))  # f(x) = x for all x
        if _SUMS.search(pred + gold) and not _NOT_SUMS.search(pred + gold):  # as written, never evaluated
            return not any(is_unsafe(_SUMS.sub(" ", x)) for x in (pred, gold)) and \
                (pred == gold or _structure_equal(pred, gold))
        if not pred or not gold or is_unsafe(pred) or is_unsafe(gold) or is_undone_computation(pred, gold):
            return False
        if pred == gold:
            return True
        pred, gold = (_as_matrix(_UPRIGHT.sub(r"\1", x)) for x in (pred, gold))  # \mathrm{e} is e; [[1, 2]] a matrix
        use_alarm = _in_main_thread()
        p, g = _parse(pred, use_alarm), _parse(gold, use_alarm)
        if any(isinstance(x[0], sympy.Basic) and _expanded_terms(x[0]) > MAX_TERMS for x in (p, g) if x):
            return False  # a product of sums that simplify would expand for minutes (is_unsafe bounds powers only)
        if p and g and verify(list(g), list(p), timeout_seconds=MV_TIMEOUT_S if use_alarm else None):
            return True
        if _algebra_equal(pred, gold) or (g and _named_matrix(pred, g)):
            return True
        # a percent sign on one side only is also read as a unit: 12.5% == 12.5 (as 50% == 50 above)
        unit = [re.sub(r"\s*\\?%$", "", x) for x in (pred, gold)]
        if ("%" in pred) != ("%" in gold) and unit != [pred, gold]:
            return is_equiv(*unit)
        return False
    except BaseException as e:  # math-verify's TimeoutException derives from BaseException
        if isinstance(e, (KeyboardInterrupt, SystemExit)):
            raise
        return False


def math_reward(completion: str, answer: str) -> float:
    """1.0 if the completion's final answer is equivalent to the gold answer, else 0.0. Never raises."""
    try:
        pred = extract_answer(clean_text(completion))
        return 1.0 if pred is not None and is_equiv(pred, normalize_gold(answer)) else 0.0
    except Exception:
        return 0.0
