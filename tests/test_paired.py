"""Paired statistics (tools/paired.py) against numbers worked by hand and Student's t table."""

import math
import random

import pytest

from tools.paired import (benjamini_hochberg, judge, paired_interval, seeds_to_resolve, simulate_study, t_cdf,
                          t_pvalue, t_quantile, verdict)

# two-sided 95% quantiles t_{0.975, df}, from the printed table (Abramowitz & Stegun 26.7 / any statistics text)
TABLE = {1: 12.7062047, 2: 4.3026527, 4: 2.7764451, 9: 2.2621572, 29: 2.0452296}


@pytest.mark.parametrize("df", TABLE)
def test_t_quantiles_match_the_table(df):
    assert t_quantile(0.975, df) == pytest.approx(TABLE[df], abs=1e-6)
    assert t_quantile(0.025, df) == pytest.approx(-TABLE[df], abs=1e-6)
    assert t_cdf(TABLE[df], df) == pytest.approx(0.975, abs=1e-8)


def test_t_cdf_of_one_degree_is_the_cauchy_cdf():
    for x in (-3.0, -0.5, 0.0, 0.7, 4.0):
        assert t_cdf(x, 1) == pytest.approx(0.5 + math.atan(x) / math.pi, abs=1e-9)


def test_paired_interval_by_hand():
    # differences 0.1, 0.0, 0.15: mean 1/12; sd^2 = ((1/60)^2 + (1/12)^2 + (1/15)^2) / 2 = 0.0058333...
    out = paired_interval([0.4, 0.3, 0.5], [0.3, 0.3, 0.35])
    sd = math.sqrt(((0.1 - 1 / 12) ** 2 + (1 / 12) ** 2 + (0.15 - 1 / 12) ** 2) / 2)
    half = TABLE[2] * sd / math.sqrt(3)
    assert out["n"] == 3 and out["mean"] == pytest.approx(1 / 12)
    assert out["sd"] == pytest.approx(0.0763763, abs=1e-7)
    assert out["ci"] == pytest.approx([1 / 12 - half, 1 / 12 + half], abs=1e-7)
    assert out["ci"] == pytest.approx([-0.106396, 0.273063], abs=1e-6)
    # pairing is what makes it narrow: the same shift on every seed, whatever the seeds' own spread
    shifted = paired_interval([0.2, 0.5, 0.9, 0.1], [0.18, 0.47, 0.88, 0.07])
    assert shifted["ci"][0] > 0.015 and shifted["ci"][1] < 0.035
    assert paired_interval([0.3], [0.2])["ci"] == [-math.inf, math.inf]
    with pytest.raises(ValueError, match="equal"):
        paired_interval([0.1, 0.2], [0.1])


def test_verdicts():
    assert verdict([0.01, 0.05], 0.03, +1) == "agrees"
    assert verdict([0.01, 0.05], 0.03, -1) == "contradicts"
    assert verdict([-0.05, -0.01], 0.03, -1) == "agrees"
    assert verdict([-0.02, 0.025], 0.03, +1) == "no_effect"
    assert verdict([-0.04, 0.02], 0.03, +1) == "unresolved"
    assert verdict([-0.03, 0.01], 0.03, +1) == "unresolved"  # the band's edge is not inside it


def test_seeds_to_resolve():
    # a mean far from 0 with a small spread resolves at once; one of 0 resolves as no effect once the interval fits
    assert seeds_to_resolve(sd=0.01, mean=0.1, delta=0.03) == 2
    # no effect, sd = delta: resolved once t_{0.975, n-1} < sqrt(n): t_5 = 2.5706 > sqrt(6) = 2.449, t_6 = 2.4469 < 2.646
    assert seeds_to_resolve(sd=0.03, mean=0.0, delta=0.03) == 7
    assert seeds_to_resolve(sd=0.2, mean=0.0, delta=0.03, most=10) is None
    assert seeds_to_resolve(sd=math.nan, mean=0.0, delta=0.03) is None


def test_the_interval_covers_the_true_mean_at_its_level():
    rng = random.Random(0)
    trials, covered = 2000, 0
    for _ in range(trials):
        b = [rng.gauss(0.3, 0.05) for _ in range(5)]
        a = [x + 0.02 + rng.gauss(0, 0.03) for x in b]
        low, high = paired_interval(a, b)["ci"]
        covered += low < 0.02 < high
    assert 0.93 < covered / trials < 0.97  # 95% nominal; a z interval at n = 5 would cover ~88%


def test_t_pvalue_by_hand():
    # t = 2.7764451 at df 4 is the two-sided 5% point; t = 1 at df 1: P(|T| > 1) = 1 - 2 atan(1) / pi = 0.5
    sd, n = 0.1, 5
    assert t_pvalue(TABLE[4] * sd / math.sqrt(n), sd, n) == pytest.approx(0.05, abs=1e-8)
    assert t_pvalue(0.5, 0.5 * math.sqrt(2), 2) == pytest.approx(0.5, abs=1e-12)
    assert t_pvalue(0.1, math.nan, 1) == 1.0 and t_pvalue(0.0, 0.0, 3) == 1.0 and t_pvalue(0.1, 0.0, 3) == 0.0


def test_benjamini_hochberg_by_hand():
    # p sorted 0.01, 0.02, 0.03, 0.5 (m = 4): p m / rank = 0.04, 0.04, 0.04, 0.5; the running minimum from the top
    assert benjamini_hochberg([0.03, 0.5, 0.01, 0.02]) == pytest.approx([0.04, 0.5, 0.04, 0.04])
    # 0.001 x 3 = 0.003; 0.04 x 3 / 2 = 0.06; 0.045 x 3 / 3 = 0.045, which also caps the second
    assert benjamini_hochberg([0.001, 0.04, 0.045]) == pytest.approx([0.003, 0.045, 0.045])
    assert benjamini_hochberg([0.9]) == [0.9] and benjamini_hochberg([]) == []


def test_judge_needs_the_family_and_the_looks():
    clear = {"a": [0.40, 0.42, 0.45, 0.41], "b": [0.30, 0.33, 0.34, 0.30], "expected_sign": +1}  # diffs .10 .09 .11 .11
    nothing = {"a": [0.30, 0.32, 0.31, 0.30], "b": [0.31, 0.31, 0.30, 0.31], "expected_sign": -1}  # mean 0, sd .0115
    # diffs .05 .02 .06 .03: mean 0.04, sd sqrt(0.001 / 3) = 0.018257, t = 0.04 / (0.018257 / 2) = 4.3818 at df 3
    marginal = {"a": [0.35, 0.30, 0.36, 0.33], "b": [0.30, 0.28, 0.30, 0.30], "expected_sign": -1}
    out = judge([clear, nothing, marginal], delta=0.03)
    assert out[2]["p"] == pytest.approx(0.022006, abs=1e-6)
    # BH over the three: p sorted 0.000223 (clear), 0.022006 (marginal), 1 (nothing): marginal's q = 0.022006 x 3 / 2
    assert out[2]["p_adjusted"] == pytest.approx(0.022006 * 3 / 2, abs=1e-6)
    assert [c["verdict"] for c in out] == ["agrees", "no_effect", "contradicts"]
    # two looks: 0.044012 x 3 / 2 = 0.066 > 0.05, and its interval [0.011, 0.069] is not inside +-0.03: unresolved
    assert [c["verdict"] for c in judge([clear, nothing, marginal], delta=0.03, looks=2)] == \
        ["agrees", "no_effect", "unresolved"]
    # beside two comparisons of no effect, the marginal one is the family's only discovery: 0.022006 x 3 = 0.066
    assert judge([nothing, nothing, marginal], delta=0.03)[2]["verdict"] == "unresolved"
    assert judge([marginal], delta=0.03)[0]["verdict"] == "contradicts"  # alone, no correction applies


@pytest.mark.parametrize("sd", [0.026, 0.035])
def test_simulated_study_finds_twice_delta_and_no_chance_verdicts(sd):
    # the study's design: delta 0.03, seeds 3 to 10, a family of 24 comparisons, half with no effect and half with
    # 2 x delta; sd of the per-seed paired differences: 0.026 as the first edition's (0.034 x sqrt(2 (1 - 0.7))),
    # 0.035 as if pairing took a third less of the spread than it did there
    effects = [0.0] * 12 + [0.06] * 12
    shares = simulate_study(effects, sd, delta=0.03, min_seeds=3, max_seeds=10, trials=150)
    null_sign = sum(s["agrees"] + s["contradicts"] for s in shares[:12]) / 12
    found = sum(s["agrees"] for s in shares[12:]) / 12
    assert null_sign <= 0.05 and found >= 0.80
    assert sum(s["contradicts"] for s in shares[12:]) == 0  # a true 2 x delta is never called the other way


def test_simulated_study_with_no_effect_anywhere_gives_few_sign_verdicts():
    # the global null, where BH's control is at its weakest point (every discovery false): <= 5% of comparisons
    shares = simulate_study([0.0] * 16, 0.035, delta=0.03, min_seeds=3, max_seeds=10, trials=150, seed=1)
    assert sum(s["agrees"] + s["contradicts"] for s in shares) / 16 <= 0.05
