"""Paired statistics (tools/paired.py) against numbers worked by hand and Student's t table."""

import math
import random

import pytest

from tools.paired import paired_interval, seeds_to_resolve, t_cdf, t_quantile, verdict

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
