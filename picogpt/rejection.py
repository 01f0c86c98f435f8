"""The modified rejection sampling step of speculative sampling (Chen et al. 2023, Theorem 1).

The draft proposes x ~ p. We keep it with probability min(1, q(x)/p(x)); otherwise we sample
a replacement from the residual (q - p)+, where (f)+ = max(0, f) / sum max(0, f). Theorem 1:
the token this step emits is distributed exactly as q, whatever p is. Everything is float64.

    P(emit y) = p(y) min(1, q(y)/p(y)) + P(reject) (q - p)+(y)
              = min(p(y), q(y))        + (1 - sum min(p, q)) max(0, q(y) - p(y)) / sum max(0, q - p)
              = min(p(y), q(y))        + max(0, q(y) - p(y))            (the two sums are equal)
              = q(y).
"""

import math

import numpy as np

from .errors import PicoGPTError, echo
from .sampling import is_finite_number, is_whole, sample

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


# ---------------------------------------------------------------------------------------------
# Many candidates for one token (a token tree's node): the step tried again on what is missing
# ---------------------------------------------------------------------------------------------
#
# Candidates c_1 .. c_m for the same token, c_i drawn from p_i. Try them in turn: keep c_i with
# probability min(1, q_i(c_i) / p_i(c_i)); after a rejection the next candidate is judged against
# what is still missing, q_{i+1} = (q_i - p_i)+; if all m are rejected, sample from q_{m+1}.
# q_1 = q. (SpecInfer's multi-step speculative sampling, Miao et al. 2023, arXiv 2305.09781;
# recursive rejection sampling, Jeon et al. 2024, arXiv 2402.14160.)
#
# Exact when each c_i is drawn from p_i *given the candidates before it* (and not from the
# uniforms r): by Theorem 1 at q_i, round i emits min(p_i, q_i) through acceptance and passes
# P(reject) (q_i - p_i)+ = max(0, q_i - p_i) on to the rounds after it, which (by induction from
# the last, a plain sample from q_{m+1}) emit that as q_{i+1}; together q_i. q_{i+1} depends on
# p_i and q_i only, not on which c_i was rejected, so the induction holds for both drawings:
# - independent draws from one p (p_i = p: SpecInfer with one draft model); the same token may
#   come twice, and the second time it is rejected for sure (q_{i+1}(c_i) = 0);
# - draws without replacement (p_i = p without c_1 .. c_{i-1}, renormalised: Jeon et al.), the
#   drawing picogpt/tree.py uses: no candidate is wasted on a token already rejected.

def accept_among(candidates, p, q, rng):
    """The multi-candidate step: candidates c_1 .. c_m, p [m, n_vocab] (row i: the distribution
    c_i was drawn from, given c_1 .. c_{i-1}), q [n_vocab]. Returns the token emitted: an accepted
    candidate, or a sample from the last residual. With one candidate it is accept_or_resample;
    with none, a sample from q (a leaf of a tree: the extra token)."""
    q = np.asarray(q, np.float64)
    for x, p_i in zip(candidates, p):
        if rng.random() < accept_probability(p_i, q, x):  # r ~ U[0, 1) against min(1, q_i(x) / p_i(x))
            return int(x)
        q = residual(p_i, q)  # q_{i+1} = (q_i - p_i)+: what the next candidate must supply
    return sample(q, rng)


def output_distribution_among(candidates, p, q):
    """The exact distribution [n_vocab] of the token accept_among emits for these candidates:
    P(keep c_i) = P(reach round i) min(1, q_i(c_i) / p_i(c_i)), plus P(reject all) q_{m+1}.
    Averaged over the candidates' drawing, it is q (see above)."""
    q = np.asarray(q, np.float64)
    emitted, reached = np.zeros_like(q), 1.0
    for x, p_i in zip(candidates, p):
        kept = accept_probability(p_i, q, x)
        emitted[x] += reached * kept
        reached *= 1.0 - kept
        q = residual(p_i, q)
    return emitted + reached * q


# ---------------------------------------------------------------------------------------------
# A block of drafts judged together (block verification): the pieces of one position
# ---------------------------------------------------------------------------------------------
#
# Sun, Mendlovic, Leviathan, Aharoni, Ro, Beirami, Suresh 2025, "Block Verification Accelerates
# Speculative Decoding" (arXiv 2403.10444), their Algorithm 2. Theorem 1's step judges each draft
# on its own ratio q_t / p_t; block verification carries a running weight along the block,
#     w_0 = 1,   w_i = min(1, w_{i-1} q_i(x~_i) / p_i(x~_i)),
# the chance of keeping at least the first i drafts (a draft the target under-rates can be paid
# for by an earlier one it over-rates; capped at 1, so no credit is banked beyond certainty).
# The token after i kept drafts comes from the weighted residual (w_i q_{i+1} - p_{i+1})+, and
# position i is kept, given that no longer prefix was, with probability
#     h_i = Z_i / (Z_i + 1 - w_i),   Z_i = sum_x max(0, w_i q_{i+1}(x) - p_{i+1}(x)),   h_K = w_K.
# At w = 1 these are Theorem 1's min(1, q/p) and (q - p)+. The paper writes the running weight
# p_i; the course keeps p for the draft and calls it w_i. speculative.block_step puts them together.

def running_weight(weight, p, q, x):
    """w_i = min(1, w_{i-1} q(x) / p(x)): the running weight after the draft x, from the weight
    before it (w_{i-1}) and the rows p, q [n_vocab] x was judged with. With weight 1 it is
    accept_probability(p, q, x). (A drafted token has p(x) > 0; p(x) = 0 gives 1 if q(x) > 0.)
    What it reads is checked: a weight >= 0, x a token id of the rows, p(x) and q(x) in [0, 1]."""
    check_weight("running_weight", weight)
    if not is_whole(x) or not 0 <= x < min(len(p), len(q)):
        raise PicoGPTError(f"running_weight's x must be a token id of p and q (0..{min(len(p), len(q)) - 1}), "
                           f"got {echo(x, 40)}")
    p_x, q_x = float(p[x]), float(q[x])
    if not (0 <= p_x <= 1 and 0 <= q_x <= 1):  # False for NaN too
        raise PicoGPTError(f"running_weight's p(x) = {p_x!r} and q(x) = {q_x!r} must be probabilities, in [0, 1]")
    if p_x <= 0:
        return 1.0 if weight > 0 and q_x > 0 else 0.0
    return min(1.0, weight * q_x / p_x)


def check_weight(name, weight):
    """A running weight handed to `name`: a finite number >= 0, else one readable error (NaN would
    pass every comparison that rejects it, and keep every draft). Not capped at 1: a weight computed
    as h_i may round to 1 + 2e-16, and min(1, .) caps what follows anyway."""
    if not is_finite_number(weight) or weight < 0:
        raise PicoGPTError(f"{name}'s weight must be a finite number >= 0 (a running weight: w_0 = 1), "
                           f"got {echo(weight, 40)}")


def weighted_residual_mass(weight, p, q):
    """Z = sum max(0, weight q - p): what the target still wants at the next position, given a
    prefix kept with probability `weight`. [n_vocab], [n_vocab] -> float."""
    return float(np.maximum(0.0, weight * np.asarray(q, np.float64) - np.asarray(p, np.float64)).sum())


def weighted_residual(weight, p, q):
    """(weight q - p)+ = max(0, weight q - p) / Z: the distribution of the token that follows a
    kept prefix whose running weight is `weight`. [n_vocab], [n_vocab] -> [n_vocab]. With weight 1
    it is residual(p, q); with an empty mass (Z <= RESIDUAL_MASS_EPS) it is q, as there."""
    positive = np.maximum(0.0, weight * np.asarray(q, np.float64) - np.asarray(p, np.float64))
    mass = positive.sum()
    if mass <= RESIDUAL_MASS_EPS:
        return np.asarray(q, np.float64)
    return positive / mass


def block_keep_probability(weight, p_next, q_next):
    """h_i = Z / (Z + 1 - w_i), Z = weighted_residual_mass(w_i, p_next, q_next), for a position
    i < K: the chance that the prefix of i drafts is kept, given that no longer one was. p_next,
    q_next [n_vocab] are the rows of the next position (i + 1). The last position's is w_K itself.
    Z + 1 - w_i = 0 only where w_i = 1 and Z = 0: there any h keeps the output exact; it is 1.
    A weight that is not a number >= 0, or rows whose Z is NaN or inf, is one readable error."""
    check_weight("block_keep_probability", weight)
    mass = weighted_residual_mass(weight, p_next, q_next)
    if not math.isfinite(mass):
        raise PicoGPTError(f"block_keep_probability's rows give Z = {mass!r}: p_next and q_next must be "
                           "distributions (finite, >= 0)")
    denominator = mass + (1.0 - weight)  # >= mass, so h <= 1 in floating point too
    return mass / denominator if denominator > 0 else 1.0
