"""Timing honestly, the one home of picogpt's timing helpers: one timed call, medians of
repeated runs with their spread, and one number per token position.

A single timing on a laptop is noise (another program, a page fault, the CPU clocking up), so
every figure is the median of a few runs, with its interquartile range where it is reported.
`time_per_token_s` measures what the KV cache saves: the cost of the next token at each
position, recomputing everything or reusing the cache; `scoring_seconds` what scoring several
positions in one call saves over one call per position.
"""

import time
from dataclasses import dataclass

import numpy as np

from ..errors import PicoGPTError


def timed(function, *args):
    """(wall-clock seconds, result) of one call function(*args)."""
    start = time.perf_counter()
    result = function(*args)
    return time.perf_counter() - start, result


def median_seconds(fn, repeats=5):
    """Median wall-clock seconds of `fn()` over `repeats` calls (robust to a busy machine)."""
    if repeats < 1:
        raise PicoGPTError(f"repeats must be at least 1, got {repeats}")
    return float(np.median([timed(fn)[0] for _ in range(repeats)]))


@dataclass(frozen=True)
class Spread:
    """The median of a few repeats and their interquartile range (q1 .. q3)."""
    median: float
    q1: float
    q3: float


def spread(values):
    """Spread of a list of numbers (nan when empty: nothing was measured)."""
    if len(values) == 0:
        return Spread(float("nan"), float("nan"), float("nan"))
    q1, median, q3 = np.percentile(np.asarray(values, np.float64), [25, 50, 75])
    return Spread(float(median), float(q1), float(q3))


def time_per_token_s(model, ids, positions, use_cache=True, repeats=3):
    """Seconds to get the next-token logits at each position n: the model reads ids[n], having seen ids[:n].

    Without a cache that means a forward pass over all n + 1 positions ids[:n + 1]; with one, a
    forward pass over the single new position, its cache holding the n positions before it.
    """
    ids = np.asarray(ids)
    positions = [int(n) for n in positions]
    if any(n < 0 or n >= len(ids) for n in positions):
        raise PicoGPTError(f"positions must lie in 0..{len(ids) - 1} (the ids given), got {positions}")
    if not use_cache:
        return np.array([median_seconds(lambda: model(ids[: n + 1]), repeats) for n in positions])
    cache = model.new_cache()
    times_s = {}
    for n in sorted(set(positions)):
        if len(cache) < n:
            model(ids[len(cache):n], cache)  # fill the cache up to position n (not timed)

        def step():
            model(ids[n:n + 1], cache)  # [1] -> [1, n_vocab]; the cache grows to n + 1 positions
            cache.truncate(n)  # ... and is rolled back, so every repeat does the same work

        times_s[n] = median_seconds(step, repeats)
    return np.array([times_s[n] for n in positions])


def scoring_seconds(model, cache, tokens, n_new, repeats=5):
    """Seconds to score n new positions (tokens[:n]) after what `cache` holds, two ways, for each n
    in n_new: in one call of n positions, and in n calls of one position. Returns ({n: (seconds of
    each repeat)}, {n: (seconds of each repeat)}) over `repeats` interleaved repeats (each repeat
    times every n both ways, so a busy moment hits both alike, the order of the two ways reversed
    every other repeat: the pairs measure/compare.py judges), after one untimed pass of the same
    calls (first calls of a shape pay one-time costs). The cache is rolled back after each timing:
    every repeat does the same work."""
    start = len(cache)
    n_new = [int(n) for n in n_new]
    if repeats < 1 or not n_new or min(n_new) < 1 or max(n_new) > len(tokens):
        raise PicoGPTError(f"scoring_seconds needs repeats >= 1 (got {repeats}) and each n in 1..{len(tokens)} "
                           f"(the tokens given), got {n_new}")

    def one_call(n):
        model(tokens[:n], cache)  # [n] -> [n, n_vocab]: one pass over the weights

    def calls_of_one(n):
        for i in range(n):
            model(tokens[i:i + 1], cache)  # [1] -> [1, n_vocab]: a pass over the weights per position

    def seconds(way, n):
        elapsed, _ = timed(way, n)
        cache.truncate(start)
        return elapsed

    for n in n_new:  # warm-up, not counted
        seconds(one_call, n), seconds(calls_of_one, n)
    one, many = {n: [] for n in n_new}, {n: [] for n in n_new}
    for repeat in range(repeats):
        for n in n_new:
            ways = [(one, one_call), (many, calls_of_one)]
            for times, way in (ways if repeat % 2 == 0 else ways[::-1]):
                times[n].append(seconds(way, n))
    return {n: tuple(one[n]) for n in n_new}, {n: tuple(many[n]) for n in n_new}
