"""Timing a model honestly: medians of repeated runs, one number per token position.

A single timing on a laptop is noise (another program, a page fault, the CPU clocking up), so
every number here is the median of a few runs. `time_per_token_s` measures what the KV cache
saves: the cost of the next token at each position, recomputing everything or reusing the cache.
"""

import time

import numpy as np

from ..errors import PicoGPTError


def median_seconds(fn, repeats=5):
    """Median wall-clock seconds of `fn()` over `repeats` calls (robust to a busy machine)."""
    if repeats < 1:
        raise PicoGPTError(f"repeats must be at least 1, got {repeats}")
    times_s = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times_s.append(time.perf_counter() - start)
    return float(np.median(times_s))


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
