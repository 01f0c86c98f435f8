"""Shared helpers for the sampling tests: instrumented model wrappers and a chi-square
goodness-of-fit test (scipy-free). The random models are helpers.random_gpt2."""

import copy
import math
from itertools import product

import numpy as np

from helpers import random_gpt2  # noqa: F401  only for tests/test_speedup.py's import: drop once it imports helpers
from picogpt.sampling import distribution


# ---------------------------------------------------------------------------------------------
# Wrappers that look like a GPT2 to the samplers
# ---------------------------------------------------------------------------------------------

class PrefixCache:
    """A stand-in KV cache that only remembers which tokens it holds."""

    def __init__(self):
        self.tokens = []

    def __len__(self):
        return len(self.tokens)

    def truncate(self, n):
        assert 0 <= n <= len(self.tokens), (n, len(self.tokens))
        del self.tokens[n:]


class MemoModel:
    """The same conditional distributions as `model`, memoised by prefix.

    A model is a deterministic function of the prefix, so looking its logits up in a table is
    the same model, only fast: this lets the statistical tests run tens of thousands of
    generations in seconds. (That the real KV-cached GPT2 gives these logits is tested
    separately.)"""

    def __init__(self, model):
        self.model, self.config, self.name = model, model.config, model.name
        self.table = {}  # prefix tuple -> logits [n_vocab] of the next token

    def new_cache(self):
        return PrefixCache()

    def next_logits(self, prefix):
        if prefix not in self.table:
            logits = self.model(list(prefix))  # [len(prefix), n_vocab]
            for i in range(len(prefix)):
                self.table[prefix[: i + 1]] = logits[i]
        return self.table[prefix]

    def __call__(self, ids, cache):
        cache.tokens.extend(ids)
        if len(ids) == 1:  # the common case, kept cheap
            return self.next_logits(tuple(cache.tokens))[None]  # [1, n_vocab]
        n = len(cache.tokens)
        return np.stack([self.next_logits(tuple(cache.tokens[:i])) for i in range(n - len(ids) + 1, n + 1)])


class RecordingCache:
    """A real KVCache plus the list of tokens it holds, checked after every roll-back."""

    def __init__(self, owner):
        self.owner, self.inner, self.tokens, self.snapshots = owner, owner.model.new_cache(), [], []

    def __len__(self):
        return len(self.inner)

    def truncate(self, n):
        self.inner.truncate(n)
        del self.tokens[n:]
        self.snapshots.append(list(self.tokens))
        self.owner.check_cache_after_rollback(self)


class InstrumentedModel:
    """Wraps a GPT2: logs every call in `log` (shared between draft and target), and checks
    that the KV cache always holds exactly the tokens fed to it and gives the logits of a
    fresh full forward pass, at every call and after every roll-back."""

    def __init__(self, model, label, log, atol=1e-5):
        self.model, self.label, self.log, self.atol = model, label, log, atol
        self.config, self.name = model.config, model.name
        self.caches = []
        self.max_abs_diff = 0.0

    def new_cache(self):
        self.caches.append(RecordingCache(self))
        return self.caches[-1]

    def compare(self, logits, tokens):
        full = self.model(tokens)[-len(logits):]  # a fresh forward pass, no cache
        diff = float(np.max(np.abs(logits - full)))
        self.max_abs_diff = max(self.max_abs_diff, diff)
        assert diff <= self.atol, f"{self.label}: cached logits differ from a full pass by {diff:g}"

    def __call__(self, ids, cache):
        assert len(cache.tokens) == len(cache.inner), "cache length and token record disagree"
        self.log.append((self.label, len(cache.tokens), [int(t) for t in ids]))
        logits = self.model(ids, cache.inner)
        cache.tokens.extend(int(t) for t in ids)
        self.compare(logits, cache.tokens)
        return logits

    def check_cache_after_rollback(self, cache):
        assert len(cache.inner) == len(cache.tokens)
        if cache.tokens:  # feed one more token to a copy: same logits as the full pass?
            probe = copy.deepcopy(cache.inner)
            self.compare(self.model([0], probe), cache.tokens + [0])


# ---------------------------------------------------------------------------------------------
# Exact distributions and the chi-square test
# ---------------------------------------------------------------------------------------------

def joint_distribution(model, prompt, n_tokens, **controls):
    """The exact probability of every sequence of the next n_tokens under autoregressive
    sampling from `model` with these sampling controls: [n_vocab] * n_tokens."""
    V = model.config.n_vocab
    joint = np.zeros((V,) * n_tokens)
    for seq in product(range(V), repeat=n_tokens - 1):
        rows = distribution(model(list(prompt) + list(seq)), **controls)[len(prompt) - 1:]  # [n_tokens, V]
        prob = np.prod([rows[i, t] for i, t in enumerate(seq)])
        joint[seq] = prob * rows[-1]
    return joint


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
    """P(chi^2_dof >= statistic): the p-value of a chi-square test."""
    return regularized_gamma_q(dof / 2, statistic / 2)


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
