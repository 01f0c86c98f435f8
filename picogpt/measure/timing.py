"""Timing honestly, the one home of picogpt's timing helpers: one timed call, medians of
repeated runs with their spread, and one number per token position.

A single timing on a laptop is noise (another program, a page fault, the CPU clocking up), so
every figure is the median of a few runs, with its interquartile range where it is reported.
`time_per_token_s` measures what the KV cache saves: the cost of the next token at each
position, recomputing everything or reusing the cache.
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
