"""The modified rejection sampling step of speculative sampling (Chen et al. 2023, Theorem 1).

The draft proposes x ~ p. We keep it with probability min(1, q(x)/p(x)); otherwise we sample
a replacement from the residual (q - p)+, where (f)+ = max(0, f) / sum max(0, f). Theorem 1:
the token this step emits is distributed exactly as q, whatever p is. Everything is float64.

    P(emit y) = p(y) min(1, q(y)/p(y)) + P(reject) (q - p)+(y)
              = min(p(y), q(y))        + (1 - sum min(p, q)) max(0, q(y) - p(y)) / sum max(0, q - p)
              = min(p(y), q(y))        + max(0, q(y) - p(y))            (the two sums are equal)
              = q(y).
"""

import numpy as np

from .sampling import sample

RESIDUAL_MASS_EPS = 1e-12  # below this, (q - p)+ is rounding noise: p == q


def residual(p, q):
    """(q - p)+ = max(0, q - p) / sum max(0, q - p), the distribution a rejected token is
    resampled from. [n_vocab], [n_vocab] -> [n_vocab].

    When p == q (within RESIDUAL_MASS_EPS of total mass) the residual is empty; it is then
    returned as q. That case is reached with probability P(reject) = sum max(0, q - p) < 1e-12,
    so this choice moves the emitted distribution by less than 2e-12.
    """
    p, q = np.asarray(p, np.float64), np.asarray(q, np.float64)
    positive = np.maximum(0.0, q - p)
    mass = positive.sum()
    if mass <= RESIDUAL_MASS_EPS:
        return q
    return positive / mass


def accept_probability(p, q, x):
    """min(1, q(x) / p(x)), the chance of keeping the drafted token x.

    A drafted token always has p(x) > 0; for completeness p(x) = 0 gives 1 if q(x) > 0, else 0.
    """
    p_x, q_x = float(p[x]), float(q[x])
    if p_x <= 0:
        return 1.0 if q_x > 0 else 0.0
    return min(1.0, q_x / p_x)


def accept_probabilities(p, q):
    """min(1, q(x) / p(x)) for every token x at once (1 where p(x) = 0: such x is never drafted).
    [n_vocab], [n_vocab] -> [n_vocab]"""
    p, q = np.asarray(p, np.float64), np.asarray(q, np.float64)
    return np.minimum(1.0, np.divide(q, p, out=np.ones_like(q), where=p > 0))


def accept_or_resample(p, q, x, rng):
    """One rejection step: draw r ~ U[0, 1); keep x if r < min(1, q(x)/p(x)), else sample from
    (q - p)+. Returns (accepted, token, r)."""
    r = float(rng.random())
    if r < accept_probability(p, q, x):
        return True, int(x), r
    return False, sample(residual(p, q), rng), r


def accept_or_resample_many(p, q, n, rng, resample_from=None):
    """accept_or_resample, n independent times at once (for Monte-Carlo figures): draft x̃ ~ p,
    keep it if r < min(1, q(x̃)/p(x̃)), else draw from (q - p)+. `resample_from` [n_vocab] replaces
    (q - p)+ (the course's "what if the residual were wrong" switch).
    Returns (tokens [n], accepted [n] bool)."""
    drafted = rng.choice(len(p), size=n, p=p)  # x̃ ~ p
    r = rng.random(n)  # r ~ U[0, 1]
    accepted = r < accept_probabilities(p, q)[drafted]
    tokens = drafted.copy()
    fallback = residual(p, q) if resample_from is None else resample_from
    tokens[~accepted] = rng.choice(len(q), size=int((~accepted).sum()), p=fallback)
    return tokens, accepted


def output_distribution(p, q, resample_from=None):
    """The exact distribution of the token one step emits when x ~ p, by enumerating x:
    sum_x p(x) min(1, q(x)/p(x)) 1[y = x]  +  P(reject) (q - p)+(y). Theorem 1: this is q.
    (`resample_from` replaces (q - p)+, as in accept_or_resample_many.)"""
    p, q = np.asarray(p, np.float64), np.asarray(q, np.float64)
    kept = p * accept_probabilities(p, q)  # P(draft x and keep it) [n_vocab]
    p_reject = 1.0 - kept.sum()
    return kept + p_reject * (residual(p, q) if resample_from is None else np.asarray(resample_from, np.float64))
