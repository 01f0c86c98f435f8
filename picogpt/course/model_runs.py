"""What the notebooks run on models, apart from the numbers it yields (panels.py and its siblings
compute from numbers and never run a model): a prompt's next-token logits; a scoring call's
logits against one-row calls' (where floating point enters, notebook 03); whole sequences
sampled by a loop and compared with the target's exact joint on toy models (notebooks 04, 06,
07); and the rows one loop hands its step on a toy pair (`loop_rows`, for notebook 08's exact checks).
"""

from dataclasses import dataclass

import numpy as np

from ..sampling import distribution
from ..speculative import speculative_sampling
from ..tree import tree_sampling
from .chi_square import chi_square_test
from .panels import rounding, tv_distance
from .toy_models import joint_distribution

# ---------------------------------------------------------------------------------------------
# A prompt, and a scoring call against one-row calls
# ---------------------------------------------------------------------------------------------


def prompt_logits(model, ids):
    """Next-token logits after every prefix of the prompt, one forward pass: [n_seq, n_vocab]."""
    return np.asarray(model(ids), np.float64)


def scoring_rounding(model, ids, n_prompt, K):
    """Score ids[n_prompt:] the two ways a sampler does: in chunks of K + 1 positions per call after
    the prompt is cached (the speculative loop's scoring call), and one position per call
    (autoregressive sampling). The same sums, added in another order: how far apart they land."""
    def logits_of(chunk):
        cache = model.new_cache()
        model(ids[:n_prompt], cache)
        rows = [model(ids[start: start + chunk], cache) for start in range(n_prompt, len(ids), chunk)]
        return np.concatenate(rows).astype(np.float64)  # [len(ids) - n_prompt, n_vocab]
    return rounding(logits_of(K + 1), logits_of(1))


# ---------------------------------------------------------------------------------------------
# Whole sequences (notebook 04): the joint distribution of the first tokens, speculative vs exact
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class SequenceFit:
    counts: np.ndarray  # how often each sequence of n_tokens came out [n_vocab] * n_tokens
    exact: np.ndarray  # its probability under autoregressive sampling from q, same shape
    statistic: float  # Pearson's chi-square of counts against exact
    dof: int
    p_value: float  # small: the sampler does not sample from q

    @property
    def tv(self):
        return tv_distance(self.counts.ravel() / self.counts.sum(), self.exact.ravel())


def sequence_fit(draft, target, prompt, n_tokens, K, n_runs, step=None, seed=0, shape=None):
    """Run speculative_sampling (with `step` in place of Steps 3-4, if given) n_runs times for
    n_tokens tokens, and compare the joint distribution of those tokens with the target's exact one.
    With a `shape`, tree_sampling runs instead (K unused; `step` replaces the multi-candidate step).
    For toy models with a few tokens (course.toy_models): the exact joint enumerates every sequence."""
    exact = joint_distribution(target, prompt, n_tokens)
    counts = np.zeros_like(exact)
    rng = np.random.default_rng(seed)
    for _ in range(n_runs):
        if shape is None:
            run = speculative_sampling(draft, target, prompt, n_tokens, K=K, seed=rng, verify=step or "token")
        else:
            run = tree_sampling(draft, target, prompt, n_tokens, shape=shape, seed=rng, verify=step or "token")
        counts[tuple(run.tokens)] += 1
    statistic, dof, p_value = chi_square_test(counts, exact)
    return SequenceFit(counts, exact, statistic, dof, p_value)


# ---------------------------------------------------------------------------------------------
# Block verification exact on a toy pair (notebook 08): one loop, then the target
# ---------------------------------------------------------------------------------------------


def loop_rows(draft, target, prompt, drafted, controls):
    """p [K, V] (the draft's rows the drafts were sampled from), q [K + 1, V], and P(drafted)."""
    K = len(drafted)
    q = distribution(target(list(prompt) + list(drafted)), **controls)[-(K + 1):]
    p = distribution(draft(list(prompt) + list(drafted[:-1])), **controls)[-K:] if K else np.zeros((0, q.shape[1]))
    return p, q, float(np.prod([p[t, x] for t, x in enumerate(drafted)]))
