"""The grader suite: realistic final statements of model answers, mostly without a box, each with the verdict the
public graders give for its FINAL answer (tests/test_grader_suite.py checks ours; benchmarks/bench_grader.py
reports ours and math-verify's default side by side, per kind).

CASES: list of (kind, completion, gold, expected reward is 1, note). Written for this project after reading the test
suites of math-verify, the Hendrycks MATH equivalence tests, MARIO_EVAL, NeMo-Skills' math_equal tests and the
Qwen2.5-Math grader; the cases are new (numbers and phrasings of our own).

Verdict policy:
  * the expected verdict is what the best public graders give for the final answer of the text;
  * only the final answer counts: a later box / anchored answer / final number overrides earlier ones, and a
    hedged final statement ("8 or 9") is not an answer;
  * where graders disagree, the note says which side is taken and why. "DESIRED:" marks verdicts no public
    grader gives (they read a bare number out of plain text) that our extractor does give.
Gold answers are written as MATH / GSM8K store them (MATH: LaTeX without $, e.g. "\\frac{3}{4}", "12,\\!500",
"[2,5)"; GSM8K: the bare number after ####).
"""

from __future__ import annotations

CASES: list[tuple[str, str, str, bool, str]] = []


def C(kind: str, text: str, gold: str, expected: bool, note: str = "") -> None:
    CASES.append((kind, text, gold, expected, note))


# ------------------------------------------------------------------------------------------------
# boxed: the strong path; the last box counts
# ------------------------------------------------------------------------------------------------
C("boxed", r"Adding the two areas gives $18 + 24 = 42$, so the total area is $\boxed{42}$.", "42", True,
  "plain last box")
C("boxed", r"Cross-multiplying, $3x = 7$, hence $x = \boxed{\dfrac{7}{3}}$.", r"\frac{7}{3}", True,
  "dfrac inside box vs frac gold")
C("boxed", r"Adding the two areas gives $18 + 23 = 41$, so the total area is $\boxed{41}$.", "42", False,
  "wrong boxed value")
C("boxed", r"First I got \boxed{15}, but the corner square was counted twice, so the count is \boxed{14}.",
  "14", True,
  "two boxes, last counts (Hendrycks last_boxed_only_string, Qwen, NeMo search_boxed all take the last). "
  "math-verify joins boxes separated by a comma-containing gap of <70 chars into a set {15,14} and fails; "
  "picked the majority / project rule")
C("boxed", r"First I got \boxed{15}, but the corner square was counted twice, so the count is \boxed{14}.",
  "15", False, "earlier box must not count")
C("boxed", r"Substituting back, the only root is $\boxed{x = 3}$.", "3", True,
  "assignment inside box: x=3 == 3 (math-verify, Hendrycks 'k = ' rule, Qwen)")
C("boxed", r"The perimeter is $4 \cdot 5 = \boxed{20\text{ cm}}$.", "20", True, "unit text inside box dropped")
C("boxed", r"Therefore the remainder is \fbox{9}.", "9", True, "\\fbox is a box too (Hendrycks last_boxed_only_string, NeMo search_boxed). math-verify only handles "
  "\\fbox inside an already matched \\boxed/latex span; its regexes look for \\boxed{ only, so it extracts nothing")
C("boxed", r"Hence the smallest such $n$ is $\boxed 7$.", "7", True, "box without braces (Qwen: token up to $)")
C("boxed", r"Collecting terms, the final value is $\boxed{4", "4", False,
  "truncated box: Hendrycks/NeMo return None, math-verify extracts nothing; Qwen would take '4'. "
  "Picked 0: an unclosed box means a cut-off generation")
C("boxed", r"The answer is $\boxed{}$.", "5", False, "empty box")

# ------------------------------------------------------------------------------------------------
# sign: the minus belongs to the answer
# ------------------------------------------------------------------------------------------------
C("sign", r"Dividing the rise by the run, the slope of the line is $-\frac{3}{5}$.", r"-\frac{3}{5}", True,
  "minus in front of \\frac (our regex drops it)")
C("sign", r"Dividing the rise by the run, the slope of the line is $-\frac{3}{5}$.", r"\frac{3}{5}", False,
  "sign matters: -3/5 != 3/5 (a grader that drops the sign would pay this)")
C("sign", "Overnight the temperature changed by -12 degrees.", "-12", True, "plain negative integer")
C("sign", r"Plugging in, $f(2) = 3 - 8 = -5$.", "-5", True, "negative after '='")
C("sign", r"So the product equals $-0.25$.", r"-\frac{1}{4}", True, "negative decimal vs negative fraction")
C("sign", r"Completing the square, the minimum value is $-\dfrac{9}{4}$.", r"-\frac94", True,
  "negative dfrac vs shorthand gold")
C("sign", r"Simplifying the radical, $y = -\sqrt{3}$.", r"-\sqrt{3}", True, "negative root")
C("sign", r"Evaluating at the left endpoint, $g(-1) = 4$.", "4", True, "a minus inside the argument is not the answer's")
C("sign", r"The two negatives cancel: $-(-6) = 6$.", "6", True, "double negation, final value positive")
C("sign", r"Thus $a - b = 2 - 9$, which is $-7$.", "-7", True, "negative in its own math span")

# ------------------------------------------------------------------------------------------------
# leading_dot: .5 means 0.5
# ------------------------------------------------------------------------------------------------
C("leading_dot", "After simplifying, the probability of drawing red is .5", r"\frac{1}{2}", True,
  "'.5' (Hendrycks/Qwen strip_string add the 0; math-verify number regex has a decimal-only form)")
C("leading_dot", "So his batting average rounds to .375.", "0.375", True, "leading dot, trailing period")
C("leading_dot", r"Solving the proportion gives $x = .25$.", r"\frac14", True, "leading dot inside math")
C("leading_dot", "So the fraction of defective bulbs is .05.", r"\frac{1}{20}", True, "small leading-dot decimal")
C("leading_dot", "Taking the difference, the ratio comes to -.75.", "-0.75", True,
  "DESIRED: signed leading-dot decimal in plain text; math-verify's expr regex has no sign on the "
  "decimal-only form and extracts nothing, our regex reads 75")
C("leading_dot", "So the fraction of defective bulbs is .05.", "0.5", False, ".05 != .5")

# ------------------------------------------------------------------------------------------------
# thousands: separators inside one number
# ------------------------------------------------------------------------------------------------
C("thousands", "Altogether the school collected 12 500 cans.", "12500", True,
  "space as thousands separator (math-verify number regex accepts '[ ,]ddd' groups; Qwen reads 500)")
C("thousands", "Multiplying out, the population after a decade is 1,000,000.", "1000000", True, "comma groups")
C("thousands", r"Adding the three deposits, the balance is $\$3,\!250$.", "3250", True,
  "MATH-style ',\\!' grouping (math-verify drops \\!); our regex reads 250")
C("thousands", "He earns 2,400 dollars each month.", "2400", True, "GSM8K style comma")
C("thousands", "So the number of arrangements is 40320.", r"40,\!320", True,
  "gold in MATH style with ',\\!', completion without separator")
C("thousands", "The sum of the two numbers is 1,234.", "1234", True,
  "1,234 is a thousands group, not a decimal comma (math-verify: groups of exactly 3 win)")
C("thousands", "The sum of the two numbers is 1,234.", "1.234", False, "same, the other reading must fail")
C("thousands", "There are 10 000 grains in the jar.", "10000", True, "space-grouped round number")
C("thousands", "At the end of the year the account is at -4,500 dollars.", "-4500", True, "negative grouped")
C("thousands", r"The total is $12\,500$.", "12500", True,
  "LaTeX thin space as separator. DESIRED: math-verify parses '12\\,500' as 512 (wrong); MARIO "
  "string_normalize removes '\\,'; strip '\\,' between digit groups before parsing")

# ------------------------------------------------------------------------------------------------
# decimal_comma: 3,75 means 3.75 when the group after the comma is not 3 digits
# ------------------------------------------------------------------------------------------------
C("decimal_comma", "Der Preis beträgt also 3,75 Euro.", "3.75", True,
  "math-verify number regex form 2 '[.,]\\d+' reads 3,75 as 3.75 (tests: '1000,99', '2,74 $'); "
  "Qwen deletes all commas (375), Hendrycks has no rule. Picked math-verify")
C("decimal_comma", "Donc x = 0,5.", r"\frac{1}{2}", True, "decimal comma after '='")
C("decimal_comma", "La moyenne est donc 12,25.", "12.25", True, "two decimals after comma")
C("decimal_comma", "Das Ergebnis ist -1,5.", "-1.5", True, "negative decimal comma")
C("decimal_comma", "The answer is 1,250.", "1250", True, "3 digits after the comma: thousands, not decimal")
C("decimal_comma", "The answer is 1,250.", "1.25", False, "same, the decimal reading must fail")
C("decimal_comma", "Das Ergebnis ist 3,75.", "375", False, "decimal comma is not a thousands separator")

# ------------------------------------------------------------------------------------------------
# inequality: the answer is a relation, not the number in it
# ------------------------------------------------------------------------------------------------
C("inequality", r"Dividing both sides by 3, the solution set is $x \ge 2$.", r"x \ge 2", True,
  "relation vs relation (math-verify sympy_compare_relational)")
C("inequality", r"Subtracting 4, we need $x > 3$.", "x > 3", True, "strict inequality")
C("inequality", r"Dividing both sides by 3, the solution set is $x \ge 2$.", "2", False,
  "an inequality is not its bound: math-verify compares x>=2 with 2 -> False. Our last-number rule pays it")
C("inequality", r"Multiplying by $-1$ flips the sign, so $x < -1$.", "x < -1", True, "negative bound")
C("inequality", r"So $5 \ge x$.", r"x \le 5", True, "flipped relation (math-verify flip support)")
C("inequality", r"Therefore $x \le 3$.", r"x \ge 3", False, "wrong direction")
C("inequality", r"Both conditions hold exactly when $-1 < x < 4$.", "-1 < x < 4", True, "chained inequality")
C("inequality", r"Dividing both sides by 3, the solution set is $x \geq 2$.", r"[2,\infty)", False,
  "relation vs interval gold: math-verify converts only a relation *gold* to a set (allow_set_relation_comp "
  "defaults to False, tests/test_all.py test_set_rel_assymetry); Qwen/Hendrycks compare strings. "
  "Picked 0: the question asked for interval notation")
C("inequality", "Subtracting 4, we need x > 3.", "x > 3", True,
  "DESIRED: plain-text relation without $; math-verify's plain extractor only reads numbers/arithmetic "
  "(gets 3), so every public grader gives 0")

# ------------------------------------------------------------------------------------------------
# interval: bracket kinds matter
# ------------------------------------------------------------------------------------------------
C("interval", r"The square root needs $x \ge 2$ and the denominator $x < 5$, so the domain is $[2, 5)$.",
  "[2,5)", True, "half-open interval (our last-number rule reads 5)")
C("interval", r"The function is defined for $(-\infty, 3]$.", r"(-\infty,3]", True, "infinite endpoint")
C("interval", r"So the domain is $(2, 5]$.", "[2,5)", False,
  "wrong brackets. Qwen math_equal compares the parts of [a,b] / (a,b) and ignores the bracket kind "
  "(would pay); math-verify and MARIO build sympy Intervals (0). Picked strict")
C("interval", r"The inequality holds on $(-\infty, -2) \cup (1, \infty)$.", r"(-\infty,-2)\cup(1,\infty)", True,
  "union of intervals")
C("interval", r"Hence $x \in [0, 4]$.", "[0,4]", True, "'x \\in' prefix dropped (MARIO, Qwen, math-verify)")
C("interval", r"So the range is $[-2, 7]$.", "[-2,7)", False, "closed vs half-open")
C("interval", r"Thus $t$ must lie in $\left[ \frac{1}{2}, 3 \right)$.", r"\left[\frac12,3\right)", True,
  "\\left[ \\right) wrappers")
C("interval", "The range of the sine of this angle is [-1, 1].", "[-1,1]", True,
  "DESIRED: interval in plain text; math-verify's '\\s[...]\\s' pattern needs a space after ']', "
  "so it falls back to the number 1, as does Qwen's last number")

# ------------------------------------------------------------------------------------------------
# shorthand: \frac34, \sqrt2, \dfrac12
# ------------------------------------------------------------------------------------------------
C("shorthand", r"Reducing, the ratio of the areas is $\frac34$.", r"\frac{3}{4}", True,
  "\\frac34 (Hendrycks _fix_fracs, math-verify malformed operators); ours finds no number")
C("shorthand", r"So the probability is $\dfrac12$.", r"\frac{1}{2}", True, "\\dfrac12")
C("shorthand", r"The diagonal of the unit square is $\sqrt2$.", r"\sqrt{2}", True, "\\sqrt2 (_fix_sqrt)")
C("shorthand", r"The height is $2\sqrt3$.", r"2\sqrt{3}", True, "coefficient times shorthand root")
C("shorthand", r"So the fraction simplifies to $\tfrac{5}{8}$.", r"\frac58", True, "tfrac vs shorthand gold")
C("shorthand", r"Hence $\sin 60^\circ = \frac{\sqrt3}{2}$.", r"\frac{\sqrt{3}}{2}", True, "shorthand root in fraction")
C("shorthand", r"The area of the sector is $\frac94\pi$.", r"\frac{9\pi}{4}", True,
  "shorthand fraction times pi (math-verify test '\\frac94\\pi')")
C("shorthand", r"Reducing, the ratio of the areas is $\frac43$.", r"\frac{3}{4}", False, "digits swapped")
C("shorthand", r"So the answer is $-\frac34$.", r"-\frac{3}{4}", True, "negative shorthand")
C("shorthand", r"The altitude is \(\sqrt5\).", r"\sqrt{5}", True, "shorthand in \\( \\)")

# ------------------------------------------------------------------------------------------------
# answer_is: an explicit anchor beats a later stray number
# ------------------------------------------------------------------------------------------------
C("answer_is", "The answer is 5.", "5", True, "bare anchor")
C("answer_is", "The answer is 18, which I verified with 2 different methods.", "18", True,
  "anchor beats a later number (math-verify priority 200 'answer' pattern over 300 plain numbers); ours reads 2")
C("answer_is", "Adding everything up:\n\nFinal answer: 42", "42", True, "'Final answer:'")
C("answer_is", "Therefore Maria has 27 stickers.\n\n**Answer:** 27", "27", True, "markdown bold anchor")
C("answer_is", r"Final Answer: The final answer is $\frac{5}{6}$. I hope it is correct.", r"\frac56", True,
  "Minerva format (math-verify priority 0, Qwen 'final answer is $...$. I hope')")
C("answer_is", "The final answer is 64 square units.", "64", True, "anchor with unit words")
C("answer_is", r"Answer: $x = 9$", "9", True, "anchor with assignment")
C("answer_is", r"So the answer is $\frac{11}{4}$ (from step 2).", r"\frac{11}{4}", True,
  "anchor beats a parenthetical reference; ours reads 2")
C("answer_is", "So the answer is 3.", "4", False, "wrong anchored answer")
C("answer_is", "**Final Answer**\n\n12", "12", True, "heading then the value on its own line")
C("answer_is", "Thus, the answer is: 150 km.", "150", True, "anchor, colon, unit")
C("answer_is", "The answer is 7 (since 3 + 4 = 7).", "7", True,
  "explanation after the anchored answer repeats it; any rule gets 7")

# ------------------------------------------------------------------------------------------------
# equation: x = 5, y \approx 7
# ------------------------------------------------------------------------------------------------
C("equation", r"Solving the linear equation, we get $x = 5$.", "5", True, "assignment vs number")
C("equation", r"Rounding to the nearest integer, $y\approx7$.", "7", True,
  "approx with no spaces; math-verify takes the value after \\approx; our regex finds no number")
C("equation", r"So $x = \frac{22}{7} \approx 3.14$.", r"\frac{22}{7}", True,
  "exact value followed by its approximation: math-verify keeps the exact side (test '$x=1/3\\approx1.3$'); "
  "ours reads 3.14")
C("equation", r"Combining, $k = 2 + 3 = 5$.", "5", True, "chain of equalities, last side")
C("equation", r"Dividing the area by the base, $h = 4\sqrt{2}$.", r"4\sqrt2", True, "ours reads 2")
C("equation", r"The line through both points is $y = -3x + 2$.", "-3x+2", True,
  "line equation vs expression gold (math-verify unwraps y = ... when gold is not an equation)")
C("equation", r"So $x \approx 2.83$.", r"2\sqrt{2}", False,
  "an approximation is not the exact answer (math-verify rounds to 6 places; Qwen rel_tol 1e-4 also 0)")
C("equation", r"Since $x^2 = 16$ and $x > 0$, $x = 4$.", "4", True,
  "last assignment. math-verify joins math spans linked by 'and' / ',' into one set {x^2=16, x>0, x=4} "
  "and fails; a last-span rule (ours) gets 4. Picked 1")
C("equation", r"The line through both points is $y = 2x + 3$.", "y = 2x + 3", True, "equation vs equation gold")
C("equation", r"The line through both points is $y = 2x - 3$.", "y = 2x + 3", False, "wrong intercept")

# ------------------------------------------------------------------------------------------------
# fraction_decimal
# ------------------------------------------------------------------------------------------------
C("fraction_decimal", "Half of the outcomes are favourable, so the probability is 0.5.", r"\frac{1}{2}", True, "")
C("fraction_decimal", "Each of the 8 slices is equal, so p = 1/8", "0.125", True, "a/b fraction vs decimal gold")
C("fraction_decimal", "The answer is 0.333.", r"\frac13", False,
  "truncated decimal != 1/3: math-verify rounds to 6 decimals (0); MARIO pays it (EPSILON 1e-3 in "
  "latex_parser._diff_equal; its tests accept 1.732 for sqrt3); Qwen rel_tol 1e-4 says 0 for 0.333. Picked 0 "
  "(math-verify, project docstring: 0.333 != 1/3)")
C("fraction_decimal", r"So the ratio is $0.75$.", r"\frac{3}{4}", True, "")
C("fraction_decimal", "So the scale factor is 1.25.", r"\frac{5}{4}", True, "")
C("fraction_decimal", r"Without reducing, the probability is $\frac{6}{8}$.", r"\frac34", True,
  "unreduced fraction: Hendrycks string match says 0, math-verify/MARIO/Qwen sympy say 1. Picked 1 "
  "(value is right)")
C("fraction_decimal", "So the ratio is 0.2.", r"\frac{1}{4}", False, "wrong value")
C("fraction_decimal", r"So the mass ratio is $\frac{7}{2}$.", "3.5", True, "fraction vs decimal gold")

# ------------------------------------------------------------------------------------------------
# percent
# ------------------------------------------------------------------------------------------------
C("percent", "So the discount is 25%.", "25", True,
  "% read as a unit: Hendrycks strips \\%, math-verify 0.9 compares integer percentages by value")
C("percent", r"So the interest rate is $40\%$.", r"40\%", True, "")
C("percent", "So 12.5% of the students walk to school.", "12.5", True,
  "non-integer percent vs bare gold: Hendrycks, Qwen, NeMo strip the sign (1). math-verify's sympy value "
  "is 0.125 but it still pays, through its string fallback (both sides' fallback strings are '12.5')")
C("percent", "The answer is 0.3", r"30\%", True, "math-verify reads the gold % as /100: 30% == 0.3")
C("percent", "So the probability is 35.", "0.35", False,
  "bare 35 vs 0.35: Qwen include_percentage pays (gold*100), math-verify/Hendrycks don't. Picked 0 "
  "(it would also pay 350 for a gold of 3.5)")
C("percent", "The price went up by 20 percent.", "20", True, "the word 'percent'")
C("percent", "So the tax is 8%.", "9", False, "wrong percentage")

# ------------------------------------------------------------------------------------------------
# units
# ------------------------------------------------------------------------------------------------
C("units", "Each side of the square is 5 cm.", "5", True, "unit word after number")
C("units", r"So the angle measures $90^\circ$.", "90", True, "degree sign dropped (all graders)")
C("units", r"After buying lunch she has \$5 left.", "5", True,
  "escaped dollar in plain text: math-verify's currency prefix needs a space/'=' right before the sign, "
  "the backslash blocks it, so it extracts nothing; Hendrycks/Qwen strip \\$. Picked 1")
C("units", r"The area of the triangle is $15\text{ cm}^2$.", "15", True,
  "unit with exponent: our last-number rule reads the 2")
C("units", r"The ticket costs $\$12.50$.", "12.50", True, "currency with cents")
C("units", r"The volume is $36\pi \text{ cubic units}$.", r"36\pi", True, "pi times unit text; ours reads 36")
C("units", r"So the angle measures $90^\circ$.", r"\frac{\pi}{2}", False,
  "degrees vs radians: MARIO accepts (30^\\circ -> {30, pi/6}), math-verify (convert_degrees=False), "
  "Hendrycks, Qwen don't. Picked 0")
C("units", "Driving for 2 hours at 60 mph covers 120 miles.", "120", True, "numbers before, answer last")
C("units", "The floor area is 24 m^2.", "24", True, "plain-text unit with exponent; ours reads 2")
C("units", r"The speed is $45\text{ km/h}$.", "45", True, "unit with slash inside \\text")

# ------------------------------------------------------------------------------------------------
# sets_tuples
# ------------------------------------------------------------------------------------------------
C("sets_tuples", r"Factoring, the roots are $2$ and $-3$.", "-3, 2", True,
  "math-verify joins math spans linked by 'and'/'or'/',' into a set; MATH gold lists roots with commas")
C("sets_tuples", r"So the ordered pair is $(4, -1)$.", "(4,-1)", True, "tuple; ours reads -1")
C("sets_tuples", r"Hence the set of odd values is $\{1, 3, 5\}$.", r"\{5, 3, 1\}", True, "set order ignored")
C("sets_tuples", r"So the ordered pair is $(-1, 4)$.", "(4,-1)", False, "tuple order matters")
C("sets_tuples", r"The solutions are $x = 1$ or $x = 6$.", "1, 6", True, "assignments joined by 'or'")
C("sets_tuples", r"The vertex is at $(3, \frac{1}{2})$.", r"\left(3,\frac12\right)", True, "tuple with fraction")
C("sets_tuples", r"Hence the set is $\{1, 3\}$.", r"\{1, 3, 5\}", False, "missing element")
C("sets_tuples", r"So the integer roots are $-2, 1$.", "-2,1", True, "comma list in one span")
C("sets_tuples", r"So the integer roots are $-2, 1, 4$.", "-2,1", False, "extra element")

# ------------------------------------------------------------------------------------------------
# multiple_candidates: only the final answer counts
# ------------------------------------------------------------------------------------------------
C("multiple_candidates", "It could be 3 or 4. Checking, 3 fails the second condition, so it is 4.", "4", True,
  "final stated value wins")
C("multiple_candidates", "It could be 3 or 4. Checking, 3 fails the second condition, so it is 4.", "3", False,
  "a discarded candidate earns nothing")
C("multiple_candidates", "The answer is 6. Hmm, recounting the corners, the answer is actually 7.", "7", True,
  "two anchors: the last one counts (math-verify takes the rightmost match in a priority group)")
C("multiple_candidates", "The answer is 6. Hmm, recounting the corners, it is actually 7.", "7", False,
  "anchored 6 then an unanchored correction: math-verify reads 6 (the anchor outranks the later plain "
  "number), Qwen takes the whole tail after 'answer is' and fails. Picked 0 with the graders: keep "
  "'anchor beats stray number' (see answer_is), the model should restate its answer")
C("multiple_candidates", "The possible values are 2, 3, or 5; only 5 satisfies both, so the answer is 5.", "5", True,
  "candidates listed, then the final anchored answer")
C("multiple_candidates", "The answer is either 8 or 9.", "9", False,
  "hedged final statement: not a single answer. math-verify reads 8 (first number after the anchor), "
  "a last-number rule reads 9. Picked 0: paying hedges invites reward hacking")
C("multiple_candidates", r"So the answer is $\boxed{3}$ or $\boxed{4}$.", "4", False,
  "hedging with two boxes: math-verify joins them into {3,4} != 4; a last-box rule would pay. Picked 0")
C("multiple_candidates", "My first count gave 12, but that double counts the ends; the correct count is 10.",
  "10", True, "correction, last value")
C("multiple_candidates", "My first count gave 12, but that double counts the ends; the correct count is 10.",
  "12", False, "the discarded value")
C("multiple_candidates", "So x = 2 or x = -2, but x must be positive, so x = 2.", "2", True, "case analysis, last value")
C("multiple_candidates", "Final answer: 15. (An earlier draft said 14.)", "15", True,
  "anchor beats a later parenthetical number (math-verify); Qwen/ours read 14")
C("multiple_candidates", r"So the result is $\boxed{5}$. Wait, I dropped a term: $2 + 4 = 6$.", "6", False,
  "a box outranks later unboxed text in every grader (math-verify boxed priority 50 < plain 300). "
  "Picked 0 with them: the box is the declared final answer")

# ------------------------------------------------------------------------------------------------
# latex_wrappers
# ------------------------------------------------------------------------------------------------
C("latex_wrappers", r"The intersection point is \[ \left( 2, \frac{1}{3} \right) \]", r"\left(2,\frac13\right)", True,
  "display math with \\left( \\right)")
C("latex_wrappers", r"Therefore the sum is $$\frac{15}{4}$$", r"\frac{15}{4}", True, "$$ display")
C("latex_wrappers", r"The distance is \( 2\sqrt{5} \).", r"2\sqrt5", True, "\\( \\) inline; ours reads 5")
C("latex_wrappers", r"The meeting falls on $\text{Tuesday}$.", r"\text{Tuesday}", True,
  "text answer (math-verify compares symbols/strings); ours finds no number")
C("latex_wrappers", r"So the count is $\mathbf{12}$.", "12", True, "\\mathbf wrapper")
C("latex_wrappers", r"Therefore the probability is $\displaystyle \frac{1}{6}$.", r"\frac16", True, "\\displaystyle")
C("latex_wrappers", r"\[ x = \left| -4 \right| = 4 \]", "4", True, "absolute value, last side")
C("latex_wrappers", r"So $t \in \left[ 1, 3 \right)$.", "[1,3)", True, "\\left[ \\right) interval")
C("latex_wrappers", "Counting the remaining tiles gives **12**.", "12", True, "markdown bold")
C("latex_wrappers", r"The answer is $\text{(B)}$, which is $2\sqrt{2}$.", r"2\sqrt{2}", True,
  "choice letter then the value. DESIRED: math-verify's 'answer' anchor (priority 200) takes the first "
  "parsable thing within 50 chars after the word, here the fragment 2; ours reads the last number 2")

# ------------------------------------------------------------------------------------------------
# no_answer: nothing to grade -> 0
# ------------------------------------------------------------------------------------------------
C("no_answer", "I'm not sure how to solve this problem.", "5", False, "no number at all")
C("no_answer", "Let me think step by step about the triangle.", "3", False, "no number")
C("no_answer", "First, we compute the discriminant, which is", "0", False, "truncated mid-sentence, no number")
C("no_answer", "We need more information to determine the value of x.", "2", False, "refusal")
C("no_answer", "We know that 5 apples cost $10. Next we need to find the cost of", "10", False,
  "DESIRED: truncated generation whose only numbers are givens; every last-number fallback (math-verify, "
  "Qwen, ours) pays it if a given equals the gold. Picked 0: restrict the fallback to the last "
  "sentence / a finished response")
C("no_answer", "", "7", False, "empty completion")

# ------------------------------------------------------------------------------------------------
# gsm8k: '#### N' line
# ------------------------------------------------------------------------------------------------
C("gsm8k", "She sells 16 - 3 - 4 = 9 eggs and earns 9 * 2 = 18 dollars.\n#### 18", "18", True, "")
C("gsm8k", "The total is 617 + 617 = 1,234 dollars.\n#### 1,234", "1234", True, "comma after ####")
C("gsm8k", "The total is 5 * 12 = 60 minutes.\n#### 60", "60", True, "")
C("gsm8k", "So the answer is 45.\n#### 44", "44", True,
  "the #### line is the final answer (GSM8K format; lm-eval-harness strict match reads '#### N'). "
  "math-verify has no #### rule and its 'answer' anchor reads 45. Picked ####")
C("gsm8k", "So the answer is 45.\n#### 44", "45", False, "same, the earlier value must fail")
C("gsm8k", "He ends up 15 dollars short.\n#### -15", "-15", True, "negative after ####")
C("gsm8k", "So Janet makes $18 every day at the farmers' market.", "18", True, "no #### line, currency sign")
C("gsm8k", "Each box costs $2.50, so 4 boxes cost $10.\n#### $10", "10", True, "dollar sign after ####")

# ------------------------------------------------------------------------------------------------
# matrix_or_vector
# ------------------------------------------------------------------------------------------------
C("matrix_or_vector", r"So the projection is $\begin{pmatrix} 3 \\ -1 \end{pmatrix}$.",
  r"\begin{pmatrix} 3 \\ -1 \end{pmatrix}", True, "column vector; ours reads -1")
C("matrix_or_vector", r"Thus $M = \begin{pmatrix} 1 & 2 \\ 3 & 4 \end{pmatrix}$.",
  r"\begin{bmatrix} 1 & 2 \\ 3 & 4 \end{bmatrix}", True, "pmatrix vs bmatrix (NeMo test, Qwen strip_string)")
C("matrix_or_vector", r"The vector is $\begin{pmatrix} 1/2 \\ 0 \end{pmatrix}$.",
  r"\begin{pmatrix} \frac12 \\ 0 \end{pmatrix}", True, "entry a/b vs shorthand frac")
C("matrix_or_vector", r"Thus $M = \begin{pmatrix} 1 & 2 \\ 3 & 5 \end{pmatrix}$.",
  r"\begin{pmatrix} 1 & 2 \\ 3 & 4 \end{pmatrix}", False, "one wrong entry")
C("matrix_or_vector", r"So the direction vector is $\begin{pmatrix} 2 \\ -5 \\ 1 \end{pmatrix}$.",
  r"\begin{pmatrix} 2 \\ -5 \\ 1 \end{pmatrix}", True, "3-vector")

# ------------------------------------------------------------------------------------------------
# plain_text_numbers: the answer amid other numbers
# ------------------------------------------------------------------------------------------------
C("plain_text_numbers", "So she buys 12 apples. (Checked in step 3.)", "12", False,
  "a trailing reference number without an anchor: math-verify and Qwen read 3, as do we. Kept 0 with the "
  "graders: skipping parentheticals would also skip real corrections; the model should end on its answer")
C("plain_text_numbers", "So the answer is 12 apples. (Checked in step 3.)", "12", True,
  "same with an anchor: the anchor wins (math-verify); ours reads 3")
C("plain_text_numbers", "Tom is 14 years old, as of 2023.", "14", False,
  "trailing year: all last-number graders read 2023. Kept 0 with them")
C("plain_text_numbers", "The train arrives 45 minutes later.", "45", True, "")
C("plain_text_numbers", "In 2019 there were 340 members, so now there are 340 + 60 = 400 members.", "400", True,
  "earlier year and numbers, answer last")
C("plain_text_numbers", "Therefore she needs 8 more cups.", "8", True, "")
C("plain_text_numbers", "It takes 3 workers 4 hours, so one worker alone takes 12 hours.", "12", True, "")
C("plain_text_numbers", "So x = 7, which is the 4th prime.", "7", True,
  "an ordinal after the answer: math-verify and Qwen read 4 ('4th' needs no suffix boundary there). We take the "
  "other side: '4th' is a word, not a number, so the final answer is x = 7")
C("plain_text_numbers", "The answer is twelve.", "12", False,
  "number word: only Qwen (word2number on the extracted string) converts; math-verify, Hendrycks, NeMo "
  "don't. Picked 0: rare in math outputs, and w2n turns any phrase with a number word into a number")
C("plain_text_numbers", "Adding 3.5 and 4.25 gives 7.75 liters in total.", "7.75", True, "decimals, answer last")

# ------------------------------------------------------------------------------------------------
# matrix_or_vector, more forms: array, bmatrix without spaces, nested lists
# ------------------------------------------------------------------------------------------------
C("matrix_or_vector", r"Hence $A^{-1} = \left[\begin{array}{cc} 1 & 0 \\ 0 & 1 \end{array}\right]$.",
  r"\begin{pmatrix} 1 & 0 \\ 0 & 1 \end{pmatrix}", True, "array environment inside brackets (MARIO_EVAL, Qwen)")
C("matrix_or_vector", "So the product is [[1, 2], [3, 4]].", r"\begin{pmatrix} 1 & 2 \\ 3 & 4 \end{pmatrix}", True,
  "a nested list is a matrix, row by row (Qwen's math_equal, NeMo)")
C("matrix_or_vector", "So the product is [[1, 2], [4, 3]].", r"\begin{pmatrix} 1 & 2 \\ 3 & 4 \end{pmatrix}", False,
  "rows in another order")
C("matrix_or_vector", r"The midpoint vector is $\begin{bmatrix} 0.5 \\ 2 \end{bmatrix}$.",
  r"\begin{pmatrix} \frac{1}{2} \\ 2 \end{pmatrix}", True, "decimal entry vs fraction")
C("matrix_or_vector", r"Therefore $B = \begin{pmatrix} 2 & -1 \\ 0 & 3 \end{pmatrix}$.",
  r"\begin{bmatrix}2&-1\\0&3\end{bmatrix}", True, "gold without spaces")
C("matrix_or_vector", r"Therefore $B = \begin{pmatrix} 2 & -1 \end{pmatrix}$.",
  r"\begin{pmatrix} 2 \\ -1 \end{pmatrix}", False, "a row is not a column: shapes differ")
C("matrix_or_vector", r"The normal is $\begin{pmatrix} \sqrt{2} \\ 1 \\ 0 \end{pmatrix}$.",
  r"\begin{pmatrix} \sqrt2 \\ 1 \\ 0 \end{pmatrix}", True, "shorthand root in an entry")
C("matrix_or_vector", r"So $\mathbf{v} = \begin{array}{c} 4 \\ -2 \end{array}$.",
  r"\begin{pmatrix} 4 \\ -2 \end{pmatrix}", True, "bare array column")
C("matrix_or_vector", "The reflected vector is [[3, -1]].", r"\begin{pmatrix} 3 \\ -1 \end{pmatrix}", False,
  "one row is not a column")
C("matrix_or_vector", "So the product is $[[1, 2], [3]]$.", r"\begin{pmatrix} 1 & 2 \\ 3 & 0 \end{pmatrix}", False,
  "rows of unequal length are no matrix")
C("matrix_or_vector", "The reflected vector is [[3], [-1]].", r"\begin{pmatrix} 3 \\ -1 \end{pmatrix}", True,
  "nested list of one-element rows: a column")
C("matrix_or_vector", r"Thus $M = \begin{bmatrix} 1 & 0 \\ 0 & -1 \end{bmatrix}$.",
  r"\begin{pmatrix} 1 & 0 \\ 0 & 1 \end{pmatrix}", False, "one sign differs")

# ------------------------------------------------------------------------------------------------
# multi_box: several boxes that together are the answer; a hedge between boxes is still no answer
# ------------------------------------------------------------------------------------------------
C("multi_box", r"So the pairs are $\boxed{(3, 1)} \quad \text{and} \quad \boxed{(5, 4)}$.", "(3, 1), (5, 4)", True,
  "two boxes joined by \\quad \\text{and} \\quad: one answer of two pairs (math-verify joins close boxes)")
C("multi_box", r"The even roots are $\boxed{2}, \boxed{4}, \boxed{6}$.", r"\{2,4,6\}", True,
  "three boxes separated by commas are the set")
C("multi_box", r"Hence $\boxed{a = 12}$ and $\boxed{b = 7}$.", "a = 12, b = 7", True, "two boxed assignments")
C("multi_box", r"The solutions are \boxed{-1} and \boxed{5}.", "-1, 5", True, "")
C("multi_box", r"The solutions are \boxed{-1} and \boxed{5}.", "5", False, "a list is not one of its values")
C("multi_box", r"It is either $\boxed{3}$ or $\boxed{4}$.", "3", False, "boxes joined by 'or': a hedge, no answer")
C("multi_box", r"So the pairs are $\boxed{(3, 1)}$ and $\boxed{(5, 5)}$.", "(3, 1), (5, 4)", False, "one pair wrong")
C("multi_box", r"First I tried $\boxed{7}$; after fixing the sign error, the result is $\boxed{9}$.", "9", True,
  "boxes with prose between them are not joined: the last one counts")
C("multi_box", r"The roots are $\boxed{\frac{1}{2}}$ and $\boxed{-2}$.", r"-2, \frac12", True, "order of a list ignored")
C("multi_box", r"$\boxed{1}, \boxed{2}, \boxed{3}$", "1,2,3", True, "boxes alone")
C("multi_box", r"$\boxed{1}, \boxed{2}, \boxed{3}$", "1,2", False, "an extra value")
C("multi_box", r"$\boxed{2}$ is wrong, $\text{so}$ the answer is $\boxed{4}$.", "2, 4", False,
  "words between boxes (one of them in \\text) are no joiner: the last box counts")
C("multi_box", r"$\boxed{2}$ is wrong, $\text{so}$ the answer is $\boxed{4}$.", "4", True, "")

# ------------------------------------------------------------------------------------------------
# final_line: "Final Answer:" followed by a sentence whose subject is math
# ------------------------------------------------------------------------------------------------
C("final_line", "Final Answer: The smallest $m$ is 21.", "21", True,
  "the subject $m$ comes before 'is': the answer is what the sentence says it is")
C("final_line", "Final Answer: The smallest $m$ is 22.", "21", False, "")
C("final_line", r"Final answer: the value of $x + y$ is $\frac{7}{2}$.", r"\frac72", True, "")
C("final_line", r"**Final Answer:** The area of triangle $ABC$ is $24\sqrt{3}$.", r"24\sqrt3", True, "")
C("final_line", r"Final Answer: The largest $k$ is 9, since $k = 10$ fails.", "9", True,
  "the value after the subject, not the later check")
C("final_line", r"Final Answer: The minimum of $f(x)$ is $-4$.", "-4", True, "")
C("final_line", r"Final Answer: The sum of the roots $r_1 + r_2$ equals 11.", "11", True, "'equals' like 'is'")
C("final_line", r"Final Answer: The probability that $X > 2$ is $\frac{3}{8}$.", r"\frac38", True,
  "a relation as the subject")
C("final_line", r"Final Answer: The probability that $X > 2$ is $\frac{3}{8}$.", r"\frac58", False, "")
C("final_line", "Final Answer: $n = 15$", "15", True, "the value alone (no subject)")

# ------------------------------------------------------------------------------------------------
# gold_solution: a gold that is a whole worked solution, or carries a stray trailing backslash
# ------------------------------------------------------------------------------------------------
C("gold_solution", r"So the answer is $\boxed{12}$.", r"We have $3 \cdot 4 = 12$, so the answer is $\boxed{12}$.", True,
  "the gold's own box is its answer (read as a completion)")
C("gold_solution", r"So the answer is $\boxed{13}$.", r"We have $3 \cdot 4 = 12$, so the answer is $\boxed{12}$.", False,
  "")
C("gold_solution", r"$\boxed{12}$", "Adding the two groups gives 5 + 7 = 12. The answer is 12.", True,
  "an unboxed worked solution: its final answer, as from a completion")
C("gold_solution", r"$\boxed{7}$", "Adding the two groups gives 5 + 7 = 12. The answer is 12.", False,
  "a number the gold's solution mentions is not its answer")
C("gold_solution", r"Since $x^2 = 9$ and $x > 0$, the root is $\boxed{3}$.",
  r"Squaring gives $x^2 = 9$; the positive root is $x = 3$.", True, "a solution ending on an assignment")
C("gold_solution", r"The answer is $\boxed{5}$.", "5\\", True, "a stray trailing backslash in the gold")
C("gold_solution", r"So the ratio is $\frac13$.", r"\frac{1}{3}\\", True, "a trailing LaTeX line break in the gold")
C("gold_solution", r"The side is $\boxed{2\sqrt3}$.", r"2\sqrt{2}\\", False, "")
C("gold_solution", "So the answer is 96.",
  "First, 8 * 6 = <<8*6=48>>48 cupcakes.\nThen 48 * 2 = <<48*2=96>>96 cupcakes.\n#### 96", True,
  "a GSM8K worked answer")
C("gold_solution", r"The perimeter is $\boxed{28}$.",
  r"Each side is $7$, so the perimeter is $4 \cdot 7 = \boxed{28}$ units.", True, "box not at the start of the gold")

# ------------------------------------------------------------------------------------------------
# think: the answer follows the thinking
# ------------------------------------------------------------------------------------------------
C("think", "<think>Try 4: too small. Try 5: works.</think>\nThe answer is $\\boxed{5}$.", "5", True, "")
C("think", "<think>First guess \\boxed{8}, but 2 * 3 = 6.</think> The product is 6.", "6", True,
  "a box inside the thinking is a draft, not the answer (R1-style graders split at </think>)")
C("think", "<think>First guess \\boxed{8}, but 2 * 3 = 6.</think> The product is 6.", "8", False, "")
C("think", "<think>Maybe the answer is 7.</think>\nSo the final answer is 9.", "9", True, "")
C("think", "<think>Maybe the answer is 7.</think>\nSo the final answer is 9.", "7", False, "")
C("think", "<think>\nx = 2 or x = 3?\n</think>\n\nThe solutions are $x = 2$ and $x = 3$.", "2, 3", True, "")
C("think", "<think>The sum is 10.</think>\n**Answer:** 11", "11", True, "")
C("think", "<think>The sum is 10.</think>\n**Answer:** 11", "10", False, "")
C("think", "<think>So it is 12, I am sure.</think>", "12", False,
  "nothing after the thinking: no final answer (the thinking is not the response)")
C("think", "<think>\\boxed{3}</think>\n\\boxed{4}", "4", True, "")

# ------------------------------------------------------------------------------------------------
# equation_factor: an equation equals another scaled by a nonzero constant (planes, lines, conics)
# ------------------------------------------------------------------------------------------------
C("equation_factor", r"The plane is $6x - 4y + 2z - 10 = 0$.", "-3x+2y-z+5=0", True, "scaled by -2")
C("equation_factor", r"The plane is $6x - 4y + 2z - 8 = 0$.", "-3x+2y-z+5=0", False, "another plane")
C("equation_factor", r"The circle is $2x^2 + 2y^2 = 50$.", "x^2+y^2=25", True, "both sides doubled")
C("equation_factor", r"The ellipse is $9x^2 + 4y^2 = 36$.", r"\frac{x^2}{4}+\frac{y^2}{9}=1", True,
  "denominators cleared")
C("equation_factor", r"The line is $3x + 2y = 6$.", r"y = -\frac{3}{2}x + 3", True, "rearranged and scaled")
C("equation_factor", r"The circle is $x^2 + y^2 = 25$.", "(x-1)^2+y^2=25", False, "another center")
C("equation_factor", r"So $2x - 2y = 0$.", "x-y=0", True, "")
C("equation_factor", r"The line is $4x - 2y + 6 = 0$.", "2x - y + 3 = 0", True, "")
C("equation_factor", r"The line is $4x - 2y + 3 = 0$.", "2x - y + 3 = 0", False, "a parallel line")
C("equation_factor", r"The locus is $x(6x - 4y + 2z - 10) = 0$.", "-3x+2y-z+5=0", False,
  "the factor must be a constant: x is not")

# ------------------------------------------------------------------------------------------------
# euler_e: \mathrm{e} is Euler's number
# ------------------------------------------------------------------------------------------------
C("euler_e", r"So the limit is $\boxed{\mathrm{e}^{2}}$.", "e^2", True, "upright e (ISO style)")
C("euler_e", r"So the limit is $\boxed{\mathrm{e}^{2}}$.", "2e", False, "")
C("euler_e", r"The minimum is $\frac{1}{\mathrm{e}}$.", "e^{-1}", True, "")
C("euler_e", r"The tangent meets the axis at $2\mathrm{e}$.", "2e", True, "")
C("euler_e", r"Hence the value is $\mathrm{e} - 1$.", "e-1", True, "")
C("euler_e", r"Hence the value is $\mathrm{e} - 1$.", "e+1", False, "")
C("euler_e", r"Thus the ratio is $\mathrm{e}^{\pi}$.", r"e^\pi", True, "")
C("euler_e", r"The growth factor is $\operatorname{e}^{3}$.", "e^3", True, "\\operatorname{e}")
C("euler_e", r"The growth factor is $\mathrm{e}^{3}$.", r"\approx 20.0855", False,
  "a rounded value is not the exact answer")

# ------------------------------------------------------------------------------------------------
# ambiguous_comma: a gold number whose comma is a decimal comma, not a thousands separator
# ------------------------------------------------------------------------------------------------
C("ambiguous_comma", r"So the probability is $\boxed{0.25}$.", "0,25", True, "0,25 is a quarter, not 25")
C("ambiguous_comma", r"So the probability is $\boxed{\frac14}$.", "0,25", True, "")
C("ambiguous_comma", r"So the probability is $\boxed{25}$.", "0,25", False, "a thousands reading would give 25")
C("ambiguous_comma", r"The solutions are $0$ and $5$.", "0,5", True,
  "one digit after '0,': a list, as MATH's golds '0,1' and '0,4' (two solutions) are")
C("ambiguous_comma", r"The fraction is $\frac{1}{2}$.", "0,50", True, "")
C("ambiguous_comma", r"The slope is $-\frac{3}{4}$.", "-0,75", True, "")
C("ambiguous_comma", r"So the probability is $\boxed{0.52}$.", "0,25", False, "")
C("ambiguous_comma", r"So the share is $0.125$.", "0,125", True,
  "three digits after '0,': still a decimal comma (a thousands group never follows a lone 0)")
C("ambiguous_comma", r"So the share is $125$.", "0,125", False, "")
C("ambiguous_comma", r"The cost is $\boxed{1000}$.", "1,000", True, "a real thousands separator stays one")

# ------------------------------------------------------------------------------------------------
# complex: i, \mathrm{i}, a + bi in any order
# ------------------------------------------------------------------------------------------------
C("complex", r"So $z = 3 + 4i$.", "4i + 3", True, "terms in another order")
C("complex", r"So $z = 3 + 4\mathrm{i}$.", "3+4i", True, "upright i")
C("complex", r"The quotient is $-2i + 1$.", "1-2i", True, "")
C("complex", r"The quotient is $1 + 2i$.", "1-2i", False, "the conjugate")
C("complex", r"Therefore $w = \frac{1 + i}{2}$.", r"\frac12 + \frac12 i", True, "")
C("complex", r"So the product is $i^2 = -1$.", "-1", True, "")
C("complex", r"The root is $2\mathrm{i}$.", "2i", True, "")
C("complex", r"Expanding, $(1+i)^2$ is the result: $\boxed{(1+i)^2}$.", "2i", True, "i squared is -1")
C("complex", r"So the other root is $\boxed{i}$.", "-i", False, "")
C("complex", r"So $z = \boxed{5 - i\sqrt{3}}$.", r"5-\sqrt{3}i", True, "")

# ------------------------------------------------------------------------------------------------
# trig: trigonometric expressions equal as functions
# ------------------------------------------------------------------------------------------------
C("trig", r"Simplifying, the expression is $2\sin x \cos x$.", r"\sin 2x", True, "double angle")
C("trig", r"Simplifying, the expression is $\sin x \cos x$.", r"\sin 2x", False, "half of it")
C("trig", r"So it equals $1 - 2\sin^2\theta$.", r"\cos 2\theta", True, "")
C("trig", r"So it equals $\frac{\sin x}{\cos x}$.", r"\tan x", True, "")
C("trig", r"The value is $\sin\frac{\pi}{3}$.", r"\frac{\sqrt{3}}{2}", True, "a trig value")
C("trig", r"So it is $\sin\left(\frac{\pi}{2} - x\right)$.", r"\cos x", True, "co-function")
C("trig", r"Hence the derivative is $1 + \tan^2 x$.", r"\sec^2 x", True, "")
C("trig", r"So it equals $\cos 2x$.", r"2\cos^2 x - 1", True, "")
C("trig", r"So it equals $\cos^2 x - 1$.", r"2\cos^2 x - 1", False, "")
C("trig", r"By the addition formula it is $\sin x\cos y + \cos x \sin y$.", r"\sin(x+y)", True, "")
C("trig", r"By the addition formula it is $\sin x\cos y - \cos x \sin y$.", r"\sin(x+y)", False, "")

# ------------------------------------------------------------------------------------------------
# sci_notation: a times ten to the n, written every way
# ------------------------------------------------------------------------------------------------
C("sci_notation", "The speed is 320000 m/s.", r"3.2 \times 10^{5}", True, "")
C("sci_notation", r"The speed is $3.2 \times 10^5$ m/s.", "320000", True, "")
C("sci_notation", "The speed is 3.2e5 m/s.", r"3.2 \times 10^{5}", True, "E notation (e is not Euler's number here)")
C("sci_notation", r"There are $6.02 \cdot 10^{23}$ atoms.", r"6.02\times10^{23}", True, "\\cdot for \\times")
C("sci_notation", "The concentration is 0.0015 mol/L.", r"1.5 \times 10^{-3}", True, "")
C("sci_notation", "The concentration is 1.5e-3 mol/L.", r"1.5 \times 10^{-3}", True, "negative exponent")
C("sci_notation", r"The concentration is $1.5 \times 10^{-2}$ mol/L.", r"1.5 \times 10^{-3}", False, "")
C("sci_notation", "The count is 4E6.", r"4 \times 10^{6}", True, "capital E")
C("sci_notation", r"The count is $2.5 \times 10^{3}$.", r"2.5 \times 10^{4}", False, "")
C("sci_notation", "The count is 2.5 × 10^4.", r"2.5 \times 10^{4}", True, "a plain-text times sign")

# ------------------------------------------------------------------------------------------------
# coordinates: points, labels and parenthesis variants (MARIO_EVAL)
# ------------------------------------------------------------------------------------------------
C("coordinates", r"The intersection is $P = (2, -3)$.", "(2, -3)", True, "named point, last side")
C("coordinates", r"So $(x, y) = (2, -3)$.", "(2,-3)", True, "")
C("coordinates", r"So $(x, y) = (-3, 2)$.", "(2,-3)", False, "swapped")
C("coordinates", r"The center is $(0.5, 4)$.", r"\left( \frac{1}{2}, 4 \right)", True, "")
C("coordinates", r"The point is $(1,2,3)$.", "(1, 2, 3)", True, "")
C("coordinates", r"The point is $\left(2,-3\right)$.", "(2,-3)", True, "")
C("coordinates", "The coordinates are (2, \u22123).", "(2,-3)", True, "a Unicode minus sign")
C("coordinates", r"The vertex is $A(0, 5)$.", "(0, 5)", True, "a labelled point: the label is not a factor")
C("coordinates", r"The vertex is $A(0, 5)$.", "(5, 0)", False, "")
C("coordinates", r"The point is $( 3 , 4 )$.", "(3,4)", True, "spaces")
C("coordinates", "The coordinates are (2, 3).", "(2,-3)", False, "")

# ------------------------------------------------------------------------------------------------
# product_order: sums whose products are written in another order
# ------------------------------------------------------------------------------------------------
C("product_order", r"So the total is $3dc + 2ba$.", "2ab + 3cd", True, "")
C("product_order", r"So the total is $3ab + 2cd$.", "2ab + 3cd", False, "coefficients swapped")
C("product_order", r"The area is $2y \cdot 3x$.", "6xy", True, "")
C("product_order", r"It factors as $(x+1)x$.", "x(x+1)", True, "")
C("product_order", r"The result is $c + ba$.", "ab+c", True, "")
C("product_order", r"The volume is $h r^2 \pi$.", r"\pi r^2 h", True, "")
C("product_order", r"The length is $\pi \cdot 3\sqrt{2}$.", r"3\sqrt{2}\pi", True, "")
C("product_order", r"It factors as $(b+a)(a-b)$.", "(a+b)(a-b)", True, "")
C("product_order", r"It factors as $(b-a)(a+b)$.", "(a+b)(a-b)", False, "the sign of a factor")
C("product_order", r"So the volume is $\frac{4}{3} r^3 \pi$.", r"\frac{4\pi r^3}{3}", True, "")
C("product_order", r"The direction is $\text{seat}$.", r"\text{east}", False, "words are no products of letters")
C("product_order", r"So the total is $3dc + 2ba$.", "2ab + 3ce", False, "one letter of a product differs")

# ------------------------------------------------------------------------------------------------
# undone_computation: an answer that restates a computation where the gold is its value. math-verify evaluates it
# and calls it right; a base model trained on our arithmetic tasks learned to box the question ("3 + 4 + 5") for the
# reward (docs/grading.md). DESIRED: we score it 0; a power, a fraction and a power of ten stay numbers.
# ------------------------------------------------------------------------------------------------
UNDONE = "DESIRED: the question's computation, not its value (math-verify evaluates it: right)"
C("undone_computation", r"Answer: \boxed{3 + 4 + 5}.", "12", False, UNDONE)
C("undone_computation", r"Answer: \boxed{3 + 4 + 5} = 9.", "12", False, UNDONE + "; the wrong value after the box")
C("undone_computation", r"The answer is $2 \times 6$.", "12", False, UNDONE)
C("undone_computation", r"The answer is $3 \cdot 4$.", "12", False, UNDONE)
C("undone_computation", r"So the answer is \boxed{15 - 3}.", "12", False, UNDONE)
C("undone_computation", r"So the answer is \boxed{(3+4)+5}.", "12", False, UNDONE)
C("undone_computation", r"So \boxed{12 = 3 + 4 + 5}.", "12", False, UNDONE + ": the last side of the chain")
C("undone_computation", r"The answer is $3 - 7$.", "-4", False, UNDONE)
C("undone_computation", r"3 + 4 + 5 = 12. The answer is \boxed{12}.", "12", True, "the worked line, then the value")
C("undone_computation", r"So \boxed{3 + 4 + 5 = 12}.", "12", True, "a chain: its last side is the value")
C("undone_computation", r"The answer is $1.5 \times 10^{-3}$.", "0.0015", True, "a power of ten is a number form")
C("undone_computation", r"The answer is $2 \cdot 10^{3}$.", "2000", True, "a power of ten is a number form")
C("undone_computation", r"The answer is $2^{10}$.", "1024", True, "a power stays a number")
C("undone_computation", r"The answer is $-3$.", "-3", True, "a sign is no operation")
C("undone_computation", r"The answer is $1 + 2\sqrt{3}$.", r"2\sqrt{3}+1", True, "a symbolic gold: the rule is off")

# ------------------------------------------------------------------------------------------------
# plain_chain: numbers joined by operators in plain text are one answer: a chain gives its last side, a computation
# left undone stays whole (and scores 0 where the gold is its value), never its first number
# ------------------------------------------------------------------------------------------------
C("plain_chain", "The answer is 3 + 4 = 7.", "7", True, "a chain after the anchor: its last side, not 3")
C("plain_chain", "The answer is 12 - 5 = 7, done.", "7", True, "a subtraction's minus is no sign of 5")
C("plain_chain", "So 4 * 3 = 12 apples in all.", "12", True, "the last chain of the text")
C("plain_chain", "The answer is 7, and 3 - 2 = 1.", "7", True, "the anchor's first answer is the 7 before the comma")
C("plain_chain", "The answer is 7 - 0.", "7", False, "DESIRED: a computation left undone, not its first number")
C("plain_chain", "Answer: 3 + 4 + 5", "12", False, UNDONE)
C("plain_chain", "The answer is 8 \\div 2 = 4.", "4", True, "\\div between numbers")
C("plain_chain", "The answer is 2^3 = 8.", "8", True, "a power in plain text is one number: the chain's last side, not 2")
C("plain_chain", "The answer is 2^3.", "8", True, "a power stays a number, as $2^{10}$ does")
C("plain_chain", "The answer is 5 - 2^2 = 1.", "1", True, "a power inside a chain")
C("plain_chain", "The answer is 2^3^4.", "2", False, "a power tower is one answer (refused, as towers are), not its base")
C("plain_chain", "The answer is 2^{3^4}.", "81", False, "nor is a braced tower's exponent the answer")

# ------------------------------------------------------------------------------------------------
# The kinds below (2026-12-07) were written from descriptions of where math-verify won on public grader suites that
# this project does not test against: several boxes that one statement joins by words or markup, a box per part, an
# "or" between values of one variable, a long solution after an early "answer:", sums as written, complex numbers in
# polar form, function identities, and matrices named in words. The rules: docs/grading.md.
# ------------------------------------------------------------------------------------------------
C("box_statement", r"She needs \boxed{12} papers and \boxed{5} bins.", "12, 5", True,
  "a few words of one statement between the boxes: one answer")
C("box_statement", r"She needs \boxed{12} papers and \boxed{5} bins.", r"\boxed{12,5}", True, "")
C("box_statement", r"So \(\boxed{2}\) and \(\boxed{3}\).", r"\{2, 3\}", True, "each box in its own \\( \\)")
C("box_statement", r"\boxed{-1} ++++ \boxed{\frac{15}{8}}", r"p=-1,p=\frac{15}{8}", True, "markup between the boxes")
C("box_statement", r"She needs \boxed{12} papers and \boxed{5} bins.", "5", False, "a list is not one of its values")
C("box_statement", r"There are \boxed{12} apples. After lunch, \boxed{7} are left.", "12, 7", False,
  "a sentence ends between them: the last box counts")
C("box_statement", r"There are \boxed{12} apples. After lunch, \boxed{7} are left.", "7", True, "")
C("box_statement", r"We get \boxed{12}, but actually it is \boxed{7}.", "12, 7", False, "a correction: the last box")
C("box_statement", r"We get \boxed{12}, but actually it is \boxed{7}.", "7", True, "")
C("box_statement", r"\boxed{12} minus 5 is \boxed{7}.", "7", True, "a number between the boxes: a computation, not a list")
C("box_per_part", r"The answer is \boxed{3} for part (a) and \boxed{7} for part (b).", "3, 7", True, "")
C("box_per_part", r"For part (a) the answer is \boxed{3}, and for part (b) it is \boxed{7}.", "3, 7", True, "")
C("box_per_part", "(a) The speed is \\boxed{12} m/s.\n(b) The time taken is \\boxed{5} s.", "12, 5", True,
  "a part label before each box: one answer across lines")
C("box_per_part", "(a) The speed is \\boxed{12} m/s.\n(b) The time taken is \\boxed{5} s.", "5", False, "")
C("box_per_part", "(a) The speed is \\boxed{12} m/s.\n(b) The time taken is \\boxed{6} s.", "12, 5", False, "one part wrong")
C("solution_set_or", r"$p = \boxed{-1}$ or $p = \boxed{\frac{15}{8}}$", r"p=-1,p=\frac{15}{8}", True,
  "'or' between values of one variable states its solution set")
C("solution_set_or", r"\boxed{x = 2} \quad \text{or} \quad \boxed{x = 3}", "2, 3", True, "")
C("solution_set_or", r"\boxed{x = 2} \quad \text{or} \quad \boxed{x = 3}", "2", False, "a set is not one of its values")
C("solution_set_or", r"It is \boxed{3} or \boxed{4}.", "3", False, "bare values joined by 'or': a hedge, no answer")
C("solution_set_or", r"$x = \boxed{2}$ or $y = \boxed{3}$", "2, 3", False, "two variables: a hedge")
C("answer_then_work", "Let me work out the answer: first, 12 / 4 = 3.\nNext, 3 + 8 = 11.\nTherefore the total is 11.",
  "11", True, "an early 'answer:' that two later lines of work follow is no final statement: the last answer")
C("answer_then_work", "Let me work out the answer: first, 12 / 4 = 3.\nNext, 3 + 8 = 11.\nTherefore the total is 11.",
  "3", False, "")
C("answer_then_work", "The answer is 18.\nCheck: 18 \\times 2 = 36, as required.", "18", True,
  "one line of checking after the answer: the anchor still counts")
C("answer_then_work", "The answer is 18.\nCheck: 18 \\times 2 = 36, as required.", "36", False, "")
C("sum_order", r"$\sum_{k=1}^{n} k x_k = S$", r"\sum_{k=1}^{n} x_k k = S", True, "factors in another order")
C("sum_order", r"\boxed{\sum_{i=1}^{n} a_i b_i}", r"\sum_{i=1}^{n} b_i a_i", True, "")
C("sum_order", r"\boxed{\sum_{i=1}^{n} a_i}", r"\sum_{i=1}^{n} a_i", True, "the same sum, the same string")
C("sum_order", r"\boxed{\sum_{i=1}^{n} a_i}", r"\sum_{i=1}^{n} b_i a_i", False, "")
C("sum_order", r"\boxed{\sum_{k=1}^{n} k x_k}", r"\sum_{k=1}^{m} k x_k", False, "other bounds")
C("sum_order", r"\boxed{\sum_{k=1}^{n} k}", r"\frac{n(n+1)}{2}", False,
  "a sum is compared as written, never evaluated (math-verify may evaluate it; sympy can sum for minutes)")
C("complex_forms", r"\boxed{2e^{i\pi/3}}", r"1+\sqrt{3}i", True, "polar form against the algebraic form: by value")
C("complex_forms", r"\boxed{\sqrt{2} e^{i \pi/4}}", "1+i", True, "")
C("complex_forms", r"\boxed{-1}", r"e^{i\pi}", True, "")
C("complex_forms", r"\boxed{2e^{i\pi/6}}", r"1+\sqrt{3}i", False, "another angle")
C("complex_forms", r"\boxed{e^{i \pi/4}}", "1+i", False, "another modulus")
C("function_identity", r"\boxed{f(n) = n^2}", "f(x) = x^2", True, "the same rule with its argument renamed")
C("function_identity", r"\boxed{f(x) = x}", r"f(x)=x \text{ for all } x", True, "'for all x' is what the identity says")
C("function_identity", r"So $f(t) = 2t + 1$.", "f(x) = 2x+1", True, "")
C("function_identity", r"\boxed{f(n) = n^2 + 1}", "f(x) = x^2", False, "")
C("function_identity", r"\boxed{f(x) = 2x}", r"f(x)=x \text{ for all } x", False, "")
C("named_matrix", "The answer is the identity matrix.", r"\begin{pmatrix}1&0\\0&1\end{pmatrix}", True, "the name fixes every entry at the gold's shape")
C("named_matrix", r"\boxed{I}", r"\begin{pmatrix}1&0\\0&1\end{pmatrix}", True, "")
C("named_matrix", r"\boxed{\text{the zero matrix}}", r"\begin{pmatrix}0&0\\0&0\end{pmatrix}", True, "")
C("named_matrix", r"\boxed{\mathbf{0}}", r"\begin{pmatrix}0&0\\0&0\end{pmatrix}", True, "")
C("named_matrix", "The answer is the identity matrix.", r"\begin{pmatrix}1&1\\0&1\end{pmatrix}", False, "")
C("named_matrix", r"\boxed{I}", r"\begin{pmatrix}0&0\\0&0\end{pmatrix}", False, "")
C("named_matrix", "The matrix has rows 1, 0 and 0, 1.", r"\begin{pmatrix}1&0\\0&1\end{pmatrix}", False,
  "rows in words are not read (rows or columns? which list is which?): its last number counts")
C("answer_parenthesized", r"Answer \( (10) \)", "10", True, "an answer in parentheses after the word")
C("answer_parenthesized", r"Answer \( (12) \) cm", "12", True, "")
C("answer_parenthesized", "Answer (12)", "12", True, "")
C("answer_parenthesized", r"Answer \( (9+1) \)", "9+1", True, "")
C("answer_parenthesized", r"Answer \( (9+1) \)", "10", False, UNDONE + " (math-verify evaluates it and pays)")

assert all(len(c) == 5 and isinstance(c[3], bool) for c in CASES)
