"""Other drafts for speculative sampling (notebook 06): each is run by the same Algorithm 2.

speculative_sampling takes as its draft a model (the paper's p, wrapped in
speculative.ModelDraft) or a draft that proposes a chain (loop.Draft; these inherit
speculative.ChainDraft's defaults): `name`, `models`, `proposes`, `start()`,
`propose(sequence, K, controls, rng) -> (drafted, p_rows)` and `keep(n, branch)`. Theorem 1
asks only that the drafts are sampled from the p the step is given, whatever p is, so each of
these is exact:

- PromptLookup: no model at all. It proposes the tokens that followed the latest earlier
  occurrence of the text's last n-gram (the idea of Saxena's "prompt lookup decoding",
  github.com/apoorvumang/prompt-lookup-decoding). A deterministic draft is a point mass,
  p = 1 on the proposed token, so the acceptance test min(1, q/p) becomes r < q(x) and the
  residual (q - p)+ is q without x, renormalised.
- first_layers: the target's own first layers, then its final layer norm and LM head, as the
  draft (early exit, as in LayerSkip, arXiv 2404.16710, without its training: no second model,
  and a draft step costs about the share of the layers it runs).
- AdaptiveK: any draft, with the lookahead chosen as it goes by Hugging Face's "heuristic"
  schedule (transformers' AssistedCandidateGenerator): +2 after a loop that accepted all its
  drafts, -1 (not below 1) after one that did not.
"""

import dataclasses

import numpy as np

from .errors import PicoGPTError, echo
from .loop import draft_for
from .model import GPT2
from .sampling import is_whole
from .speculative import ChainDraft, ModelDraft


def lookup(sequence, K, ngram_max=3):
    """Up to K tokens that followed the latest earlier occurrence of the sequence's last n tokens,
    trying n = ngram_max first, then shorter n-grams; [] when nothing earlier matches."""
    sequence = list(sequence)
    for n in range(min(ngram_max, len(sequence) - 1), 0, -1):
        suffix = sequence[-n:]
        for start in range(len(sequence) - n - 1, -1, -1):  # the latest earlier occurrence first
            if sequence[start: start + n] == suffix:
                return sequence[start + n: start + n + K]
    return []


class PromptLookup(ChainDraft):
    """A draft with no model: `lookup` proposes, and p is a point mass on each proposed token.
    It proposes 0 to K tokens; a loop with none is one plain target step (its one token comes
    from q_1, the extra row)."""

    models = ()  # it runs no model: only the target's vocabulary and context are checked

    def __init__(self, n_vocab, ngram_max=3, name=None):
        if not is_whole(n_vocab) or n_vocab < 1:
            raise PicoGPTError(f"n_vocab must be the target's vocabulary size, a whole number >= 1, got {echo(n_vocab, 40)}")
        if not is_whole(ngram_max) or ngram_max < 1:
            raise PicoGPTError(f"ngram_max must be a whole number >= 1, got {echo(ngram_max, 40)}")
        self.n_vocab, self.ngram_max = n_vocab, ngram_max
        self.name = name or f"prompt lookup (n-grams up to {ngram_max})"

    def propose(self, sequence, K, controls, rng):  # the text itself is the draft's only state
        drafted = lookup(sequence, K, self.ngram_max)
        p = np.zeros((len(drafted), self.n_vocab))  # [K, n_vocab]
        p[np.arange(len(drafted)), drafted] = 1.0  # a point mass on each proposed token
        return drafted, p


def first_layers(model, n_layer):
    """A GPT2 made of `model`'s first n_layer blocks, its final layer norm and its LM head: the
    same arrays (nothing copied), a config with n_layer blocks. As a draft it has its own KV
    cache; the target computes those layers again when it scores (a self-speculative decoder
    built for it, like LayerSkip's, shares them)."""
    total = model.config.n_layer
    if not is_whole(n_layer) or not 1 <= n_layer < total:
        raise PicoGPTError(f"a draft of the first layers needs 1 <= n_layer < {total} ({model.name}'s layers), "
                           f"got {n_layer!r}")
    params = {**model.params, "h": model.params["h"][:n_layer]}
    config = dataclasses.replace(model.config, n_layer=n_layer)
    return GPT2(params, config, name=f"{model.name} first {n_layer}/{total} layers")


class AdaptiveK(ChainDraft):
    """`draft` with the lookahead chosen as it goes: start at K_start; after each loop, +up if it
    accepted every draft, else -down, never below 1 nor above speculative_sampling's K."""

    def __init__(self, draft, K_start=4, up=2, down=1):
        for name, value, least in (("K_start", K_start, 1), ("up", up, 0), ("down", down, 0)):
            if not is_whole(value) or value < least:
                raise PicoGPTError(f"AdaptiveK's {name} must be a whole number >= {least}, got {echo(value, 40)}")
        self.inner = draft_for("AdaptiveK", "chain", draft, ModelDraft)
        self.models, self.K_start, self.up, self.down = self.inner.models, K_start, up, down
        self.name = f"{self.inner.name}, adaptive K (start {K_start}, +{up} / -{down})"
        self.K = K_start

    def start(self):
        self.K = self.K_start
        self.inner.start()

    def propose(self, sequence, K, controls, rng):
        self.K = min(self.K, K)
        drafted, p = self.inner.propose(sequence, self.K, controls, rng)
        self.proposed = len(drafted)
        return drafted, p

    def keep(self, n, branch):
        accepted_all = len(branch) == self.proposed
        self.K = self.K + self.up if accepted_all else max(1, self.K - self.down)
        self.inner.keep(n, branch)
