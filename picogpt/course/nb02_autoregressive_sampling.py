"""Notebook 02 (autoregressive sampling): what only it uses, its questions: top-k written by hand, the
least time a token can take at this machine's bandwidth, and decoding's arithmetic intensity.

Every `check_...` is a pure function of the learner's answer returning a `Check` (grading.py):
"✔ right: ..." with the worked solution, or "✘ not yet: ..." with a hint (the method, or the known
mistake it matches) but not the number. The defaults of each checker are the numbers its
notebook's question asks about.
"""

import math

import numpy as np

from ..sampling import distribution
from .grading import Check, check_number, not_answered


def trial_logits(seed=0, n_vocab=1000):
    """A few logit vectors to try a student's sampling function on (one with a huge gap)."""
    rng = np.random.default_rng(seed)
    peaked = rng.normal(size=n_vocab)
    peaked[7] += 30
    return [rng.normal(scale=3, size=n_vocab), rng.normal(size=20), peaked]


def check_top_k(my_top_k, ks=(1, 5, 50)):
    """Does my_top_k(logits, k) return the top-k distribution: softmax over the k largest logits,
    probability 0 elsewhere? Tried against picogpt.sampling.distribution on a few logit vectors."""
    if not_answered(my_top_k):
        return Check(False, "write your function my_top_k(logits, k), then pass it in instead of None.")
    if not callable(my_top_k):
        return Check(False, f"expected a function my_top_k(logits, k), got {type(my_top_k).__name__}.")
    for logits in trial_logits():
        for k in (k for k in ks if k <= len(logits)):
            expected = distribution(logits, top_k=k)
            case = f"for k = {k} on {len(logits)} logits"
            try:
                probs = np.asarray(my_top_k(logits.copy(), k), dtype=np.float64)
            except Exception as e:  # the student's code: report it, don't crash the notebook
                return Check(False, f"{case}, my_top_k raised {type(e).__name__}: {e}")
            if probs.shape != expected.shape:
                return Check(False, f"{case} it returned shape {probs.shape}, expected "
                                    f"{expected.shape}: one probability per token.")
            if not math.isclose(probs.sum(), 1.0, rel_tol=1e-6):
                return Check(False, f"{case} the probabilities sum to {probs.sum():.6g}, not 1: "
                                    "renormalise after zeroing the tokens outside the top k.")
            if np.count_nonzero(probs) != k:
                return Check(False, f"{case}, {np.count_nonzero(probs)} tokens have nonzero "
                                    f"probability; expected exactly k = {k}.")
            if not np.allclose(probs, expected, atol=1e-9):
                return Check(False, f"{case} the probabilities differ from a softmax over the "
                                    "k largest logits (the *largest*? a softmax, not logits / sum?).")
    return Check(True, "a softmax over the k largest logits and zero elsewhere, on every trial.")


def check_min_time_per_token_ms(answer, bandwidth_gbs, n_params=1_557_611_200, bytes_per_param=4):
    """At bandwidth_gbs, the least time in milliseconds GPT-2 XL (float32) can take per token."""
    n_bytes = n_params * bytes_per_param
    expected_ms = n_bytes / (bandwidth_gbs * 1e9) * 1e3
    how = ("each decoded token reads every weight once: bytes of weights / (bytes per second) "
           "= seconds; then convert to milliseconds. 1 GB/s = 10⁹ bytes per second.")
    solution = (f"{n_params:,} parameters × {bytes_per_param} bytes = {n_bytes / 1e9:.2f} GB read "
                f"per token; at {bandwidth_gbs:.3g} GB/s that is {expected_ms:,.3g} ms, however "
                f"fast the arithmetic is.")
    mistakes = [(expected_ms / 1e3, "that is in seconds; the question asks for milliseconds"),
                (expected_ms * 1e3, "that is in microseconds; the question asks for milliseconds"),
                (expected_ms / bytes_per_param, f"each float32 parameter is {bytes_per_param} bytes")]
    return check_number(answer, expected_ms, how, solution, mistakes)


DECODING_FLOPS_PER_BYTE = 0.5  # a float32 weight: 4 bytes read, one multiply-add (2 FLOPs)


def machine_line(machine_flops_per_byte):
    """Where decoding stands on a machine that does machine_flops_per_byte FLOPs in the time its
    memory delivers a byte, as a sentence. The verdict is read from the ratio as printed (3
    significant digits), so that the number and the words beside it always agree."""
    need = DECODING_FLOPS_PER_BYTE
    if machine_flops_per_byte is None:
        return (f"Compare it with a machine's FLOPs per byte (its GFLOP/s over its GB/s): where that "
                f"ratio is above {need}, decoding waits on memory.")
    ratio = float(f"{machine_flops_per_byte:.3g}")
    said = f"This machine does {ratio:.3g} FLOPs in the time its memory delivers one byte"
    if ratio > need:
        return f"{said}, {ratio / need:.3g} times what decoding needs: decoding waits on memory."
    if ratio == need:
        return f"{said}, just what decoding needs: memory and arithmetic would finish together."
    return f"{said}, less than the {need} decoding needs: here the arithmetic, not memory, sets the pace."


def check_arithmetic_intensity(answer, machine_flops_per_byte=None):
    """How many FLOPs per byte of weights read does decoding one token (float32) do? The
    notebook passes this machine's ratio, matmul GFLOP/s over bandwidth GB/s, for the solution."""
    how = ("in x @ W with x a single vector, each weight of W is read once and used in one "
           "multiply and one add; a float32 weight takes 4 bytes.")
    machine = machine_line(machine_flops_per_byte)
    solution = f"2 FLOPs (a multiply and an add) per weight / 4 bytes per weight = 0.5 FLOP per byte. {machine}"
    mistakes = [(2, "that is FLOPs per weight; divide by the 4 bytes each float32 weight takes"),
                (0.25, "a multiply-add is 2 FLOPs, not 1")]
    return check_number(answer, 0.5, how, solution, mistakes)
