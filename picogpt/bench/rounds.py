"""Timing in interleaved rounds, and the bandwidth ceiling timed in the same rounds.

Everything the bench compares is timed once per round, round after round, so that the figures
share the machine's noise; each is the median of the rounds after a warm-up round.
"""

import sys
import time

import numpy as np
from tqdm import tqdm

from ..fast import kernels
from ..measure import machine
from ..measure.timing import timed

PAUSE_S = 0.2  # a pause after each timed call: OpenBLAS's idle threads spin a while before they sleep, not into the next


def summary(times_s):
    return {"median_s": float(np.median(times_s)), "runs_s": [round(t, 9) for t in times_s]}


def interleaved(tasks, n_runs, n_warmup, pause_s=PAUSE_S, after_pause=None):
    """Time every task once per round, round after round, so that they share the machine's
    noise; {name: [seconds per run]} without the warm-up rounds. A task is (run, after). The
    pause keeps one library's spinning threads from slowing the next task down.

    With an `after_pause` dict, each task runs twice in a row per round: the first call, right
    after the pause, is recorded there; the second, with the threads awake as they are inside
    a sampling loop, is the figure returned. Threads that slept through the pause can make the
    first call of a multi-threaded product slower; bench.json keeps both, so the difference is
    measured rather than assumed."""
    times = {name: [] for name in tasks}
    bar = tqdm(total=(n_warmup + n_runs) * len(tasks), desc="timed rounds", unit="call", file=sys.stderr,
               leave=False, delay=1, disable=None)
    for round_index in range(n_warmup + n_runs):
        for name, (run, after) in tasks.items():
            bar.update()
            first = None
            if after_pause is not None:
                first, _ = timed(run)
                after()
            seconds, _ = timed(run)
            after()
            time.sleep(pause_s)
            if round_index >= n_warmup:
                times[name].append(seconds)
                if first is not None:
                    after_pause.setdefault(name, []).append(first)
    bar.close()
    return times


def ceiling_tasks(matrices, x):
    """One-row products over every matrix of machine.bandwidth_matrices, two ways: the ceiling
    itself (machine.gemv_pass, OpenBLAS's threaded GEMV, what machine.measure_bandwidth_gbs
    times) and, beside it, picogpt's one-row product (fast/kernels.py) on the same bytes."""
    matmul = kernels.choose()
    return {"openblas_gemv": (lambda: machine.gemv_pass(matrices, x), lambda: None),
            "picogpt_one_row": (lambda: [matmul(x[None], m.T) for m in matrices], lambda: None)}


def describe_ceiling(times, matrices):
    """GB/s of each way; the ceiling, the practical limit of decoding one token, is the GEMV's."""
    total = sum(m.nbytes for m in matrices)
    ways = {name: {"gb_per_s": total / np.median(runs) / 1e9, **summary(runs)} for name, runs in times.items()}
    return {"bytes": total, "gb_per_s": ways["openblas_gemv"]["gb_per_s"], "ways": ways}
