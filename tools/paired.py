"""Paired statistics over seeds: two variants run on the same seeds (data order, held-out problems, sampling seeds),
compared by their per-seed differences.

The interval is Student's t over seeds: with a handful of seeds (3-10) a bootstrap of the differences has too few
distinct resamples to reach its nominal coverage, while t is exact for normal differences and robust enough for
the near-symmetric ones of avg@N; it also says how many seeds a wanted width needs. The t distribution is computed
here (its cdf is a regularized incomplete beta, by its continued fraction; the quantile by bisection) so that the
standard library suffices.

A verdict compares the interval with the effect the paper expects and with a band +-delta of effects too small to
matter:
    agrees       the interval excludes 0 on the side the paper expects
    contradicts  it excludes 0 on the other side
    no_effect    it lies inside (-delta, +delta)
    unresolved   none of these (seeds_to_resolve says how many seeds would narrow it enough)

A study makes many comparisons, and adds seeds to each until it is resolved (`ablate.py --until-resolved`): both
would turn chance into verdicts. So a sign verdict (agrees, contradicts) also needs the comparison to survive two
corrections (`judge`): its two-sided p-value is multiplied by the number of looks the design allows (Bonferroni
over looks: seeds min_seeds..max_seeds, each a look at which adding seeds could stop), then the family's adjusted
p-values are Benjamini-Hochberg's at q = 0.05 (the false discovery rate: of the sign verdicts, at most a share q
are expected false). BH rather than Holm: Holm bounds the chance of even one false verdict in a family of ~40 and
would need t > 8 on a handful of seeds; the study reports many verdicts and a known share of error among them is
what a reader can use. `simulate_study` checks the whole procedure on synthetic outcomes (tests/test_paired.py).
"""

import functools
import math
import statistics

VERDICTS = ("agrees", "contradicts", "no_effect", "unresolved")
Q = 0.05  # the false discovery rate of the sign verdicts


def _betacf(a: float, b: float, x: float) -> float:
    """The continued fraction of the regularized incomplete beta (modified Lentz), as in Numerical Recipes 6.4."""
    tiny, c, d = 1e-300, 1.0, 1.0 - (a + b) * x / (a + 1)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        for numerator in (m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
                          -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + numerator / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-15:
            break
    return h


def _betainc(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta I_x(a, b)."""
    if x <= 0.0 or x >= 1.0:
        return 0.0 if x <= 0.0 else 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1) / (a + b + 2):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def t_cdf(x: float, df: int) -> float:
    """P(T <= x) for Student's t with df degrees of freedom: P(|T| > |x|) = I_{df / (df + x^2)}(df / 2, 1 / 2)."""
    tail = 0.5 * _betainc(df / 2, 0.5, df / (df + x * x))
    return 1.0 - tail if x > 0 else tail


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


def t_pvalue(mean: float, sd: float, n: int) -> float:
    """Two-sided p-value of the paired t test of a zero mean difference (1 where it cannot be computed)."""
    if n < 2 or not math.isfinite(sd):
        return 1.0
    if sd == 0:
        return 0.0 if mean else 1.0
    t = abs(mean) / (sd / math.sqrt(n))
    return 2 * (1.0 - t_cdf(t, n - 1))


def benjamini_hochberg(pvalues: list[float]) -> list[float]:
    """BH-adjusted p-values (q-values): reject those <= q to control the false discovery rate at q."""
    m = len(pvalues)
    order = sorted(range(m), key=lambda i: pvalues[i])
    adjusted, running = [1.0] * m, 1.0
    for rank in range(m, 0, -1):  # from the largest p down: q_(k) = min over j >= k of p_(j) m / j
        i = order[rank - 1]
        running = min(running, pvalues[i] * m / rank)
        adjusted[i] = min(1.0, running)
    return adjusted


def judge(comparisons: list[dict], delta: float, looks: int = 1, q: float = Q) -> list[dict]:
    """Each comparison {"a": [...], "b": [...], "expected_sign": +1/-1} (a and b paired by seed) with its paired
    interval, p-value, adjusted p-value (looks x p, then BH over the family) and verdict (module docstring)."""
    judged = []
    for c in comparisons:
        stats = paired_interval(c["a"], c["b"])
        stats["p"] = t_pvalue(stats["mean"], stats["sd"], stats["n"])
        judged.append(c | stats)
    for c, adjusted in zip(judged, benjamini_hochberg([min(1.0, c["p"] * looks) for c in judged])):
        c["p_adjusted"] = adjusted
        plain = verdict(c["ci"], delta, c["expected_sign"])
        if plain in ("agrees", "contradicts") and adjusted > q:  # apart from 0, but not beyond chance in this family
            plain = "no_effect" if -delta < c["ci"][0] and c["ci"][1] < delta else "unresolved"
        c["verdict"] = plain
    return judged


def simulate_study(effects: list[float], sd: float, delta: float, min_seeds: int, max_seeds: int, trials: int,
                   seed: int = 0) -> list[dict[str, float]]:
    """The study's procedure (`ablate.py --until-resolved`) on synthetic outcomes: one comparison per entry of
    `effects` (the true mean difference, the paper's expected sign +1), each seed's difference drawn from N(effect,
    sd). Every comparison starts with min_seeds; then, round by round, the family is judged and each comparison still
    unresolved gets one more seed, up to max_seeds. Per comparison, the share of trials ending in each verdict."""
    import random

    rng, looks = random.Random(seed), max_seeds - min_seeds + 1
    counts = [dict.fromkeys(VERDICTS, 0) for _ in effects]
    for _ in range(trials):
        diffs = [[rng.gauss(effect, sd) for _ in range(min_seeds)] for effect in effects]
        while True:
            judged = judge([{"a": d, "b": [0.0] * len(d), "expected_sign": 1} for d in diffs], delta, looks)
            more = [i for i, c in enumerate(judged) if c["verdict"] == "unresolved" and len(diffs[i]) < max_seeds]
            if not more:
                break
            for i in more:
                diffs[i].append(rng.gauss(effects[i], sd))
        for count, c in zip(counts, judged):
            count[c["verdict"]] += 1
    return [{k: v / trials for k, v in count.items()} for count in counts]
