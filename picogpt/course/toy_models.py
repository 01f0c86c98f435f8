"""Toy language models over a handful of tokens, small enough to enumerate every sequence.

A `BigramModel`'s next-token logits depend only on the last token (a table [n_vocab, n_vocab]),
yet it is a `sampling.Model`, with the interface the samplers expect from a GPT2 (`model(ids, cache)`, `new_cache()`,
`validate_ids`, `config.n_vocab`, `config.n_ctx`, `name`). So speculative_sampling runs on a toy pair exactly as
on GPT-2, and the exact joint distribution of its first tokens can be written down
(`joint_distribution`) and compared with what the loop samples (notebook 04).
"""

from dataclasses import dataclass
from itertools import product

import numpy as np

from ..errors import PicoGPTError
from ..model import GPT2
from ..sampling import Model, distribution


@dataclass(frozen=True)
class ToyConfig:
    n_vocab: int
    n_ctx: int = 64


class TokenCache:
    """A stand-in KV cache: the tokens the model has seen (it can be rolled back like KVCache)."""

    def __init__(self):
        self.tokens = []

    def __len__(self):
        return len(self.tokens)

    def truncate(self, n):
        """Roll back to the first n tokens (0 <= n <= len(self), like KVCache.truncate)."""
        if not 0 <= n <= len(self.tokens):
            raise PicoGPTError(f"cannot truncate a cache of {len(self.tokens)} tokens to {n}")
        del self.tokens[n:]

    def keep(self, start, rows):
        """Keep the first `start` tokens, then the tokens start + i for i in rows (KVCache.keep)."""
        self.tokens[start:] = [self.tokens[start + i] for i in rows]


class BigramModel(Model):
    """Next-token logits = table[last token]: [n_vocab, n_vocab]."""

    def __init__(self, table, name="bigram", n_ctx=64):
        self.table = np.asarray(table, np.float64)  # [n_vocab, n_vocab]
        self.config, self.name = ToyConfig(len(self.table), n_ctx), name

    def new_cache(self):
        return TokenCache()

    validate_ids = GPT2.validate_ids  # the same vocabulary and context checks as GPT-2's (config and name)
    validate_vocabulary = GPT2.validate_vocabulary

    def __call__(self, ids, cache=None, positions=None, mask=None):
        """A token tree's positions and mask change nothing here: a row's logits are its own token's."""
        cache = TokenCache() if cache is None else cache
        cache.tokens.extend(int(i) for i in ids)
        return self.table[cache.tokens[-len(ids):]]  # [n_ids, n_vocab]


def toy_pair(n_vocab=4, seed=0, scale=1.5):
    """(draft p, target q): two random bigram models that disagree (P(accept) about 0.6-0.8)."""
    rng = np.random.default_rng(seed)
    target = rng.standard_normal((n_vocab, n_vocab)) * scale
    draft = target + rng.standard_normal((n_vocab, n_vocab)) * scale  # a noisy copy
    return BigramModel(draft, "toy draft"), BigramModel(target, "toy target")


def joint_distribution(model, prompt, n_tokens, **controls):
    """The exact probability of every sequence of the next n_tokens under autoregressive sampling
    from `model` (a toy or a GPT2) with these sampling controls:
    P(x_1 .. x_n) = q(x_1 | prompt) q(x_2 | prompt, x_1) ...   [n_vocab] * n_tokens."""
    V = model.config.n_vocab
    joint = np.zeros((V,) * n_tokens)
    for sequence in product(range(V), repeat=n_tokens - 1):
        rows = distribution(model(list(prompt) + list(sequence)), **controls)[len(prompt) - 1:]  # [n_tokens, V]
        joint[sequence] = np.prod([rows[i, x] for i, x in enumerate(sequence)]) * rows[-1]
    return joint
