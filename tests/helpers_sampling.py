"""Shared helpers for the sampling tests: instrumented model wrappers and a chi-square
goodness-of-fit test (scipy-free). The random models are helpers.random_gpt2."""

import copy

import numpy as np

from picogpt.course.chi_square import chi_square_sf, chi_square_test
from picogpt.course.toy_models import TokenCache, joint_distribution
from picogpt.model import ModelView
from picogpt.sampling import distribution

__all__ = ["chi_square_sf", "chi_square_test", "joint_distribution", "MemoModel", "InstrumentedModel", "support_joint"]

# ---------------------------------------------------------------------------------------------
# Wrappers that look like a GPT2 to the samplers
# ---------------------------------------------------------------------------------------------

class MemoModel(ModelView):
    """The same conditional distributions as `model`, memoised by prefix.

    A model is a deterministic function of the prefix, so looking its logits up in a table is
    the same model, only fast: this lets the statistical tests run tens of thousands of
    generations in seconds. (That the real KV-cached GPT2 gives these logits is tested
    separately.)"""

    def __init__(self, model):
        super().__init__(model)
        self.table = {}  # prefix tuple -> logits [n_vocab] of the next token

    def new_cache(self):
        return TokenCache()

    def next_logits(self, prefix):
        if prefix not in self.table:
            logits = self.model(list(prefix))  # [len(prefix), n_vocab]
            for i in range(len(prefix)):
                self.table[prefix[: i + 1]] = logits[i]
        return self.table[prefix]

    def __call__(self, ids, cache, positions=None, mask=None):
        cache.tokens.extend(int(t) for t in ids)
        n = len(cache.tokens)
        if mask is not None:  # a token tree: each row sees the tokens its mask lets it see (0), in order
            return np.stack([self.next_logits(tuple(t for t, m in zip(cache.tokens, row) if m == 0))
                             for row in mask])
        if len(ids) == 1:  # the common case, kept cheap
            return self.next_logits(tuple(cache.tokens))[None]  # [1, n_vocab]
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


class InstrumentedModel(ModelView):
    """Wraps a GPT2: logs every call in `log` (shared between draft and target), and checks
    that the KV cache always holds exactly the tokens fed to it and gives the logits of a
    fresh full forward pass, at every call and after every roll-back."""

    def __init__(self, model, label, log, atol=1e-5):
        super().__init__(model)
        self.label, self.log, self.atol = label, log, atol
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


def support_joint(model, prompt, n_tokens, **controls):
    """{sequence: probability} of the next n_tokens under autoregressive sampling, enumerating only
    the tokens the controls leave possible (for GPT-2's vocabulary with a small top-k)."""
    if n_tokens == 0:
        return {(): 1.0}
    row = distribution(model(list(prompt))[-1], **controls)
    return {(int(x),) + rest: float(row[x]) * prob for x in np.flatnonzero(row)
            for rest, prob in support_joint(model, list(prompt) + [int(x)], n_tokens - 1, **controls).items()}
