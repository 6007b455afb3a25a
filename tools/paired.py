"""Paired statistics over seeds: two variants run on the same seeds (data order, held-out problems, sampling seeds),
compared by their per-seed differences.

The interval is Student's t over seeds: with a handful of seeds (3-10) a bootstrap of the differences has too few
distinct resamples to reach its nominal coverage, while t is exact for normal differences and robust enough for
the near-symmetric ones of avg@N; it also says how many seeds a wanted width needs. The t quantile is computed here
(the density integrated by Simpson's rule, inverted by bisection) so that numpy and the standard library suffice.

A verdict compares the interval with the effect the paper expects and with a band +-delta of effects too small to
matter:
    agrees       the interval excludes 0 on the side the paper expects
    contradicts  it excludes 0 on the other side
    no_effect    it lies inside (-delta, +delta)
    unresolved   none of these (seeds_to_resolve says how many seeds would narrow it enough)
"""

import functools
import math
import statistics

VERDICTS = ("agrees", "contradicts", "no_effect", "unresolved")


def t_cdf(x: float, df: int) -> float:
    """P(T <= x) for Student's t with df degrees of freedom."""
    if x < 0:
        return 1.0 - t_cdf(-x, df)
    log_norm = math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(df * math.pi)
    density = lambda t: math.exp(log_norm - (df + 1) / 2 * math.log1p(t * t / df))  # noqa: E731
    n = 2000  # Simpson intervals (even): error far below 1e-9 for |x| < 50
    h = x / n
    total = density(0.0) + density(x) + sum((4 if i % 2 else 2) * density(i * h) for i in range(1, n))
    return 0.5 + total * h / 3


@functools.lru_cache(maxsize=None)
def t_quantile(p: float, df: int) -> float:
    """The x with P(T <= x) = p, by bisection on t_cdf."""
    if not 0 < p < 1 or df < 1:
        raise ValueError(f"t_quantile needs 0 < p < 1 and df >= 1, got p={p}, df={df}")
    if p < 0.5:
        return -t_quantile(1 - p, df)
    low, high = 0.0, 1.0
    while t_cdf(high, df) < p:
        high *= 2
    for _ in range(60):
        mid = (low + high) / 2
        low, high = (mid, high) if t_cdf(mid, df) < p else (low, mid)
    return (low + high) / 2


def paired_interval(a: list[float], b: list[float], level: float = 0.95) -> dict:
    """Mean of a[i] - b[i] over the seeds, its t interval at `level`, the differences' standard deviation and n.
    One seed has no interval: (-inf, inf)."""
    if len(a) != len(b) or not a:
        raise ValueError(f"paired_interval needs two equal, non-empty lists; got {len(a)} and {len(b)} values")
    diffs = [x - y for x, y in zip(a, b)]
    mean = statistics.fmean(diffs)
    if len(diffs) < 2:
        return {"mean": mean, "ci": [-math.inf, math.inf], "sd": math.nan, "n": 1}
    sd = statistics.stdev(diffs)
    half = t_quantile(0.5 + level / 2, len(diffs) - 1) * sd / math.sqrt(len(diffs))
    return {"mean": mean, "ci": [mean - half, mean + half], "sd": sd, "n": len(diffs)}


def verdict(ci: list[float], delta: float, expected_sign: int) -> str:
    """agrees / contradicts / no_effect / unresolved (module docstring); expected_sign: +1 if the paper expects the
    difference (a - b) to be positive, -1 if negative."""
    low, high = ci
    if low > 0 or high < 0:
        return "agrees" if (low > 0) == (expected_sign > 0) else "contradicts"
    if -delta < low and high < delta:
        return "no_effect"
    return "unresolved"


def seeds_to_resolve(sd: float, mean: float, delta: float, level: float = 0.95, most: int = 100) -> int | None:
    """The fewest seeds at which a study with this spread of differences (sd) and this mean would end resolved:
    its interval clear of 0 or inside +-delta, taking the mean and sd as they are; None if not within `most`."""
    if not math.isfinite(sd):
        return None
    for n in range(2, most + 1):
        half = t_quantile(0.5 + level / 2, n - 1) * sd / math.sqrt(n)
        if abs(mean) > half or abs(mean) + half < delta:
            return n
    return None
