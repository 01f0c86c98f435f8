"""Pearson's chi-square goodness-of-fit test, from scratch: does a histogram of samples fit an
exact distribution? The course's graders (check_speculative_step) and notebook 04's
whole-sequence demo use it; so do the statistical tests of Theorem 1 (tests/test_speculative.py).
"""

import math

import numpy as np


def regularized_gamma_q(a, x):
    """Q(a, x) = Gamma(a, x) / Gamma(a), the upper regularized incomplete gamma function, by
    its series (x < a + 1) or continued fraction (otherwise); Numerical Recipes 6.2."""
    if x <= 0:
        return 1.0
    log_prefactor = a * math.log(x) - x - math.lgamma(a)
    if x < a + 1:  # P(a, x) = e^-x x^a / Gamma(a + 1) * sum_n x^n / ((a+1)...(a+n))
        term = total = 1.0 / a
        n = a
        while abs(term) > abs(total) * 1e-15:
            n += 1
            term *= x / n
            total += term
        return 1.0 - total * math.exp(log_prefactor)
    # Lentz's method for the continued fraction of Q
    tiny = 1e-300
    b = x + 1 - a
    c, d = 1 / tiny, 1 / b
    h = d
    for i in range(1, 10_000):
        an = -i * (i - a)
        b += 2
        d = an * d + b
        d = tiny if abs(d) < tiny else d
        c = b + an / c
        c = tiny if abs(c) < tiny else c
        d = 1 / d
        delta = d * c
        h *= delta
        if abs(delta - 1) < 1e-15:
            break
    return math.exp(log_prefactor) * h


def chi_square_sf(statistic, dof):
    """P(chi^2_dof >= statistic): the p-value of a chi-square test (1 on no degrees of freedom:
    one cell, whose count is what it must be, holds no evidence)."""
    return regularized_gamma_q(dof / 2, statistic / 2) if dof > 0 else 1.0


def chi_square_test(counts, probs, min_expected=5.0):
    """Pearson's goodness-of-fit of observed `counts` to exact `probs` (same shape).

    Cells with probability 0 must have no counts (checked exactly, returned as p = 0 if not).
    Cells expected fewer than `min_expected` times are pooled into one, as the chi-square
    approximation needs. Returns (statistic, degrees of freedom, p-value)."""
    counts, probs = np.ravel(counts).astype(float), np.ravel(probs)
    n = counts.sum()
    if np.any(counts[probs == 0] > 0):
        return math.inf, 0, 0.0
    expected = n * probs
    big = expected >= min_expected
    observed_cells = list(counts[big])
    expected_cells = list(expected[big])
    if expected[~big].sum() > 0:
        observed_cells.append(counts[~big].sum())
        expected_cells.append(expected[~big].sum())
    observed_cells, expected_cells = np.array(observed_cells), np.array(expected_cells)
    statistic = float(np.sum((observed_cells - expected_cells) ** 2 / expected_cells))
    dof = len(expected_cells) - 1
    return statistic, dof, chi_square_sf(statistic, dof)
