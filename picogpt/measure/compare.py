"""The one comparison behind every verdict picogpt prints ("block verification is faster", "the
best K is 3", "one call of 5 positions is cheaper than 5 calls of one"): two methods measured in
pairs, a statistic per pair, an interval at a stated confidence, and a verdict only where the
interval allows one.

- Pairs: each repeat runs both methods with the same seed, next to each other, the order
  alternated from one repeat to the next (A B, then B A: speedup.interleaved_runs), so a slow
  stretch of a shared machine slows both and a drift in its speed cancels.
- The statistic of a pair is a ratio, oriented so that above 1 means A did better: B's seconds /
  A's seconds when less is better (a time), A's / B's when more is better (tokens per call).
- The interval is the distribution-free interval for the median ratio from order statistics, the
  one a sign test inverts (Hollander, Wolfe & Chicken, *Nonparametric Statistical Methods*, chapter
  3, the one-sample location problem): with n pairs sorted, [r_(k), r_(n+1-k)] covers the median with probability
  1 - 2 P(Binomial(n, 1/2) <= k - 1), and k is the largest rank that keeps this at or above the
  stated confidence. It assumes nothing about the shape of the noise (heavy tails, a burst of
  another job), only that the pairs are independent; its binomial sums are computed here (math's
  lgamma), so the command line needs NumPy alone. tests/test_compare.py checks them against scipy.
- A verdict ("A faster than B") only when the interval excludes 1. At 95% the sign test needs 6
  pairs: with 5, even five of five agreeing happens by chance once in 16 comparisons of two equal
  methods, so 5 pairs resolve nothing at 95% and the sentence says so.
- "Not resolved" says about how many pairs would resolve a difference of the size seen: the log
  ratios' spread (1.4826 x their median absolute deviation, the normal scale) and median give the
  chance p that one pair favours the same method; the number of pairs is about the smallest n at
  which the sign test resolves with probability 0.8 when each pair favours it with chance p (exact
  binomial sums, searched from Noether's normal approximation, JASA 1987).

tests/test_compare.py shows how often the rule is wrong: on 2,000 simulated comparisons of a
method against itself (this machine's spread, heavy tails, a drift across repeats) it resolves at
most at its stated rate, and a true 10% difference with the pairs it recommends resolves in at
least 80%.
"""

import functools
import math
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

from ..errors import PicoGPTError

CONFIDENCE = 0.95  # every verdict picogpt prints is at this confidence
POWER = 0.8  # "would need about n pairs": the pairs that resolve a difference this size 8 times in 10
MAX_PAIRS = 10_000  # beyond this, "more than 10,000 pairs"


# ---------------------------------------------------------------------------------------------
# The sign test's interval, from binomial sums
# ---------------------------------------------------------------------------------------------

def binomial_tail(n, m, p=0.5):
    """P(Binomial(n, p) >= m), summed in log space (n up to MAX_PAIRS)."""
    if m <= 0:
        return 1.0
    if m > n or p == 0:
        return 0.0
    if p == 1:
        return 1.0
    log_p, log_q, log_n = math.log(p), math.log1p(-p), math.lgamma(n + 1)
    return min(1.0, sum(math.exp(log_n - math.lgamma(i + 1) - math.lgamma(n - i + 1) + i * log_p + (n - i) * log_q)
                        for i in range(m, n + 1)))


@functools.lru_cache(maxsize=4096)
def interval_rank(n, confidence=CONFIDENCE):
    """The rank k of the interval [r_(k), r_(n+1-k)] for the median of n pairs at `confidence`
    (the largest k whose coverage 1 - 2 P(Binomial(n, 1/2) <= k - 1) is at least it); 0 when n
    pairs are too few for any interval at that confidence (at 95%: fewer than 6)."""
    k, below = 0, 0.0  # below: P(Binomial(n, 1/2) <= k - 1)
    while k + 1 <= (n + 1) // 2:
        below += math.exp(math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1) - n * math.log(2))
        if 1 - 2 * below < confidence - 1e-12:
            break
        k += 1
    return k


def coverage(n, k):
    """The exact coverage of [r_(k), r_(n+1-k)] for the median of n pairs."""
    return 1 - 2 * binomial_tail(n, n - k + 1)


def fewest_pairs(confidence=CONFIDENCE):
    """The fewest pairs that can resolve anything at `confidence` (6 at 95%): n such that all n
    pairs on one side happen by chance at most 1 - confidence, 2 / 2**n <= 1 - confidence."""
    return max(1, math.ceil(1 - math.log2(1 - confidence) - 1e-9))


def resolving_chance(n, p, confidence=CONFIDENCE):
    """The chance that n pairs, each favouring A with probability p, resolve A as better: the
    interval excludes 1 on A's side when at least n + 1 - k of the n ratios lie above 1."""
    k = interval_rank(n, confidence)
    return binomial_tail(n, n + 1 - k, p) if k else 0.0


def pairs_for(p, confidence=CONFIDENCE, power=POWER):
    """About the fewest pairs that resolve, with probability `power`, a difference whose pairs
    favour one method with chance p: the exact binomial chance, searched upward from 0.8 x the
    normal approximation (Noether's); None beyond MAX_PAIRS (or when p <= 1/2: nothing to resolve)."""
    if not p > 0.5:
        return None
    normal = NormalDist()
    approximate = ((normal.inv_cdf(1 - (1 - confidence) / 2) + normal.inv_cdf(power)) / (2 * (p - 0.5))) ** 2
    if approximate > 1.5 * MAX_PAIRS:
        return None
    n = max(fewest_pairs(confidence), int(0.8 * approximate))
    while resolving_chance(n, p, confidence) < power:
        n += 1 if n < 100 else max(1, n // 50)
        if n > MAX_PAIRS:
            return None
    return n


def favouring_chance(log_ratios):
    """The chance that one pair favours the method the median favours, from the pairs' spread: the
    normal model Phi(|median| / scale) of the log ratios, scale 1.4826 x their median absolute
    deviation (robust to a burst). 1 when every pair gave the same ratio away from 1; nan with
    fewer than 3 pairs (no spread to read)."""
    logs = np.asarray(log_ratios, np.float64)
    if len(logs) < 3:
        return float("nan")
    centre = float(np.median(logs))
    scale = 1.4826 * float(np.median(np.abs(logs - centre)))
    if scale == 0:
        return 1.0 if centre != 0 else 0.5
    return NormalDist().cdf(abs(centre) / scale)


# ---------------------------------------------------------------------------------------------
# One comparison
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Words:
    """How a quantity is named in a verdict: what it is, and the words for A doing better or worse."""
    quantity: str = "seconds"
    better: str = "faster"
    worse: str = "slower"
    lower_is_better: bool = True


TIME = Words()
SPEEDUP = Words("speedup", lower_is_better=False)  # the same pairs as TIME: speedup_a / speedup_b = B's seconds / A's
TOKENS_PER_CALL = Words("tokens per target call", "more tokens per target call", "fewer tokens per target call",
                        lower_is_better=False)


@dataclass(frozen=True)
class Comparison:
    """A against B over n pairs: the ratios (above 1: A did better), their median and the
    interval [low, high] for it at `confidence` (nan when the pairs are too few for one)."""
    a: str
    b: str
    ratios: tuple  # per pair, in repeat order
    median: float
    low: float
    high: float
    confidence: float  # the stated confidence
    achieved: float  # the interval's exact coverage (>= confidence; nan without an interval)
    words: Words = TIME

    @property
    def n(self):
        return len(self.ratios)

    @property
    def pairs_needed(self):
        """About how many pairs would resolve a difference of the size seen (None: no estimate)."""
        chance = favouring_chance(np.log(self.ratios))
        return pairs_for(chance, self.confidence) if math.isfinite(chance) else None

    @property
    def resolved(self):
        """The interval excludes 1 (no difference)."""
        return self.low > 1 or self.high < 1

    @property
    def a_better(self):
        """Resolved, with A the better."""
        return self.low > 1

    @property
    def winner(self):
        """A or B when resolved, else None."""
        if not self.resolved:
            return None
        return self.a if self.low > 1 else self.b


def median_interval(values, confidence=CONFIDENCE):
    """(median, low, high) of values: the sign test's interval [v_(k), v_(n+1-k)] for their median
    at `confidence` (nan bounds when the values are too few for one), and its exact coverage."""
    ordered, n = np.sort(np.asarray(values, np.float64)), len(values)
    k = interval_rank(n, confidence)
    if not k:
        return float(np.median(ordered)), float("nan"), float("nan"), float("nan")
    return float(np.median(ordered)), float(ordered[k - 1]), float(ordered[n - k]), coverage(n, k)


def compare(a, a_values, b, b_values, words=TIME, confidence=CONFIDENCE):
    """Compare method `a` with method `b` from their values pair by pair (a_values[i] and
    b_values[i] ran in the same repeat, with the same seed). Returns a Comparison."""
    a_values, b_values = np.asarray(a_values, np.float64), np.asarray(b_values, np.float64)
    if a_values.shape != b_values.shape or a_values.ndim != 1 or len(a_values) == 0:
        raise PicoGPTError(f"a comparison needs the same number of values of {a} and {b}, paired by repeat "
                           f"(got {a_values.shape} and {b_values.shape})")
    if not (np.all(np.isfinite(a_values)) and np.all(np.isfinite(b_values))
            and np.all(a_values > 0) and np.all(b_values > 0)):
        raise PicoGPTError(f"a comparison of {a} and {b} needs positive finite {words.quantity}")
    if not 0.5 < confidence < 1:
        raise PicoGPTError(f"a confidence lies between 0.5 and 1, got {confidence}")
    ratios = b_values / a_values if words.lower_is_better else a_values / b_values
    median, low, high, achieved = median_interval(ratios, confidence)
    return Comparison(a=a, b=b, ratios=tuple(float(r) for r in ratios), median=median, low=low, high=high,
                      confidence=confidence, achieved=achieved, words=words)


def best_of(values, words=TIME, confidence=CONFIDENCE, label=str):
    """The best of several methods measured in the same repeats, values {method: [one value per
    repeat]}: (the best by its median, {every other method: Comparison of the best against it}).
    Each comparison is made at 1 - 2 (1 - confidence) / m for m methods, so that the chance of
    naming a best among m methods that do not differ stays within 1 - confidence (one method wins
    against another by chance at most (1 - confidence) / m, one-sided, and any of the m can be the
    one picked). label(method) names a method in the comparisons' sentences."""
    if not values:
        raise PicoGPTError("best_of needs at least one method measured")
    pick = min if words.lower_is_better else max
    best = pick(values, key=lambda method: float(np.median(values[method])))
    each = 1 - 2 * (1 - confidence) / len(values) if len(values) > 2 else confidence
    return best, {other: compare(label(best), values[best], label(other), values[other], words, each)
                  for other in values if other != best}


# ---------------------------------------------------------------------------------------------
# The sentences
# ---------------------------------------------------------------------------------------------

def number(x, away_from=None):
    """x with 2 decimals, or more when 2 would print `away_from` (a resolved bound printed as 1.00
    would read as unresolved)."""
    for digits in (2, 3, 4, 6):
        text = f"{x:.{digits}f}"
        if away_from is None or float(text) != away_from:
            return text
    return repr(float(x))


def percent_text(confidence):
    return f"{100 * confidence:.{0 if round(100 * confidence, 6).is_integer() else 1}f}%"


def ratio_words(c):
    w = c.words
    return f"{c.b}'s {w.quantity} / {c.a}'s" if w.lower_is_better else f"{c.a}'s {w.quantity} / {c.b}'s"


# results saved before each repeat's figures were kept: nothing to pair
NOT_KEPT = ("not judged: these results were saved without each repeat's figures, so there are no pairs to "
            "compare (saving them again keeps them)")


def sentence(c):
    """The verdict of a Comparison (NOT_KEPT for None: results without their pairs), with everything it rests on:
    'K = 3 faster than K = 2: median ratio 1.08 (K = 2's seconds / K = 3's, pair by pair), 95%
    interval 1.03-1.12 over 10 pairs (sign test)', or 'not resolved: ...' with what would resolve it."""
    if c is None:
        return NOT_KEPT
    said = f"median ratio {number(c.median)} ({ratio_words(c)}, pair by pair)"
    stated = percent_text(c.confidence)
    if c.resolved:
        verb = c.words.better if c.winner == c.a else c.words.worse
        return (f"{c.a} {verb} than {c.b}: {said}, {stated} interval {number(c.low, 1.0)}-{number(c.high, 1.0)} "
                f"over {c.n} pairs (sign test)")
    if math.isnan(c.low):
        needs = fewest_pairs(c.confidence)
        agreeing = max(sum(r > 1 for r in c.ratios), sum(r < 1 for r in c.ratios))
        head = (f"not resolved: {c.n} pair{'s' if c.n != 1 else ''} cannot resolve {c.a} against {c.b} at {stated} "
                f"(the sign test needs {needs}: with {c.n}, all {c.n} on one side happens by chance once in "
                f"{2 ** (c.n - 1)} comparisons of two methods that do not differ); "
                f"{said}, {agreeing} of {c.n} on one side")
    else:
        head = (f"not resolved: {c.a} against {c.b}: {said}, {stated} interval {number(c.low)}-{number(c.high)} "
                f"over {c.n} pairs (sign test) includes 1")
    return f"{head}; {need_text(c)}"


def need_text(c):
    """About how many pairs would resolve a difference of the size seen."""
    if c.n < 3:
        return "too few pairs to read their spread"
    if c.median == 1 or c.pairs_needed is None and favouring_chance(np.log(c.ratios)) <= 0.5:
        return "no difference seen"
    if c.pairs_needed is None:
        return f"a difference this size would need more than {MAX_PAIRS:,} pairs"
    return f"a difference this size would need about {c.pairs_needed} pairs"


def best_sentence(best, comparisons, label=str):
    """The verdict of best_of: 'resolved: ...' when the best beat every other, else which cannot be
    told from it; label(choice) names one (the label best_of was given)."""
    if not comparisons:
        return f"nothing to resolve: {label(best)} is the only one measured"
    first = next(iter(comparisons.values()))
    each, overall = percent_text(first.confidence), percent_text(CONFIDENCE)
    if all(c.a_better for c in comparisons.values()):
        closest = min(comparisons.values(), key=lambda c: c.low)
        return (f"resolved: {label(best)} {first.words.better} than every other (each pair of choices at {each}, "
                f"{overall} overall); the closest, {sentence(closest)}")
    tied = [other for other, c in comparisons.items() if not c.a_better]
    closest = min((comparisons[other] for other in tied), key=lambda c: abs(math.log(c.median)))
    return (f"not resolved: {'; '.join(label(choice) for choice in [best, *tied])} cannot be told apart by these "
            f"pairs (each against the best median, {label(best)}, at {each}, {overall} overall); the closest, "
            f"{sentence(closest)}")


def best_line(runs, words=SPEEDUP, label=str):
    """best_of and best_sentence in one, for runs {choice: one value per repeat, the same repeats for
    every choice}; NOT_KEPT when some choice was saved without its repeats."""
    lengths = {len(values) for values in runs.values()}
    if not runs or 0 in lengths or len(lengths) > 1:
        return NOT_KEPT
    return best_sentence(*best_of(runs, words, label=label), label=label)
