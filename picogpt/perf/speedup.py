"""Speedup on this machine: the costs the formulas need, and the wall clock they predict (notebook 05).

Chen et al. (Section 3) predict speculative sampling's speedup from three costs, here measured
in seconds on your machine as medians of a few runs:
- t_draft_s: one draft decoding step (a cached call on one new position, then its probabilities),
- t_target_s: one target decoding step, the cost of each token of autoregressive sampling,
- t_score_s[K]: one target call scoring K + 1 positions, the cost of step 2 of Algorithm 2,
and from alpha, the acceptance rate. The measured speedup is the wall time of autoregressive
sampling (Algorithm 1) over that of speculative sampling (Algorithm 2), same prompt, same N,
same seeds, medians.
"""

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .. import theory
from ..errors import PicoGPTError
from ..sampling import autoregressive_sampling, distribution
from ..speculative import speculative_sampling
from .timing import median_seconds

BENCH_JSON = Path(__file__).resolve().parents[2] / "benchmarks" / "bench.json"  # `python -m picogpt bench`


def cached_call_s(model, ids, n_new, repeats=5):
    """Median seconds of one cached call on n_new new positions after the prompt `ids`, with the
    logits turned into probabilities (as both algorithms do); the cache is rolled back after each
    call, so every repeat does the same work."""
    if n_new < 1:
        raise PicoGPTError(f"n_new, the positions to score in one call, must be at least 1, got {n_new}")
    cache = model.new_cache()
    model(ids, cache)  # the prompt, once (not timed)
    n_past = len(cache)
    new = np.resize(np.asarray(ids), n_new)  # any n_new token ids will do: the cost is the same

    def call():
        distribution(model(new, cache))  # [n_new] -> [n_new, n_vocab] -> probabilities
        cache.truncate(n_past)

    call()  # warm-up: first-touch of the weights and of the cache's memory
    return median_seconds(call, repeats)


@dataclass(frozen=True)
class Costs:
    t_draft_s: float  # one draft decoding step
    t_target_s: float  # one target decoding step
    t_score_s: dict  # K -> one target call on K + 1 positions

    @property
    def c(self):
        """Leviathan et al.'s cost coefficient: a draft step in units of a target step."""
        return self.t_draft_s / self.t_target_s


def measure_costs(draft, target, ids, Ks, repeats=5):
    """t_draft_s, t_target_s and t_score_s[K] for each K, after the prompt `ids`."""
    return Costs(t_draft_s=cached_call_s(draft, ids, 1, repeats),
                 t_target_s=cached_call_s(target, ids, 1, repeats),
                 t_score_s={K: cached_call_s(target, ids, K + 1, repeats) for K in Ks})


def predictions(costs, alpha, Ks):
    """Predicted speedup for each K, three ways: {label: [len(Ks)]}.

    - the paper's arithmetic with the measured scoring cost t_score(K),
    - the paper's arithmetic assuming scoring K + 1 positions costs one target step,
    - Leviathan et al.'s formula, which assumes the same, with c = t_draft / t_target.
    """
    Ks = list(Ks)
    return {
        "paper, measured t_score(K)": np.array([theory.predicted_speedup_paper(
            alpha=alpha, K=K, t_draft_s=costs.t_draft_s, t_target_s=costs.t_target_s,
            t_score_s=costs.t_score_s[K]) for K in Ks]),
        "paper, t_score = t_target": np.array([theory.predicted_speedup_paper(
            alpha=alpha, K=K, t_draft_s=costs.t_draft_s, t_target_s=costs.t_target_s) for K in Ks]),
        "Leviathan et al., c = t_draft/t_target": np.asarray(
            theory.predicted_speedup_leviathan(alpha, np.array(Ks), costs.c), np.float64),
    }


@dataclass(frozen=True)
class Measured:
    K: int
    seconds: float  # median wall time of speculative sampling over the seeds
    speedup: float  # median autoregressive wall time / `seconds`
    n_accepted: int  # drafted tokens accepted, all seeds together
    n_decisions: int  # accept/reject decisions made, all seeds together
    tokens_per_loop: float  # mean over the seeds

    @property
    def alpha_hat(self):
        """The observed acceptance rate at this K."""
        return self.n_accepted / self.n_decisions if self.n_decisions else float("nan")


def measure_speedups(draft, target, ids, N, Ks, seeds=(0, 1, 2), **controls):
    """Autoregressive vs speculative sampling of N tokens after `ids`, for each K and seed, run
    interleaved (so a busy moment hurts both alike). Returns (autoregressive median seconds,
    {K: Measured})."""
    ar_s, spec = [], {K: [] for K in Ks}
    for seed in seeds:
        ar_s.append(autoregressive_sampling(target, ids, N, seed=seed, **controls).seconds)
        for K in Ks:
            spec[K].append(speculative_sampling(draft, target, ids, N, K=K, seed=seed, **controls))
    ar_median_s = float(np.median(ar_s))
    measured = {}
    for K, runs in spec.items():
        seconds = float(np.median([run.seconds for run in runs]))
        measured[K] = Measured(K=K, seconds=seconds, speedup=ar_median_s / seconds,
                               n_accepted=sum(sum(run.accepted) for run in runs),
                               n_decisions=sum(loop.decisions for run in runs for loop in run.loops),
                               tokens_per_loop=float(np.mean([run.tokens_per_loop for run in runs])))
    return ar_median_s, measured


def pooled_alpha(measured):
    """One acceptance rate from every decision of every run of measure_speedups (alpha does not
    depend on K: each decision compares one drafted token's p and q)."""
    decisions = sum(m.n_decisions for m in measured.values())
    return sum(m.n_accepted for m in measured.values()) / decisions if decisions else float("nan")


def bench_costs(path=BENCH_JSON, pair=("gpt2", "gpt2-xl")):
    """GPT-2 small's and XL's costs as `python -m picogpt bench` measured and committed them:
    (Costs, a line saying when, where and on which weights), or (None, why there are none)."""
    path = Path(path)
    if not path.exists():
        return None, (f"{path.name} not found: the costs of {pair[0]} drafting for {pair[1]} are not "
                      "measured yet (run: python -m picogpt bench)")
    try:
        results = json.loads(path.read_text())
        predicted = results["predicted"]
        costs = Costs(t_draft_s=float(predicted["t_draft_s"]), t_target_s=float(predicted["t_target_s"]),
                      t_score_s={int(K): float(s) for K, s in predicted["t_score_s"].items()})
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        return None, f"{path} holds no {pair[0]} -> {pair[1]} costs ({type(e).__name__}: {e})"
    models = results.get("models", {})
    weights = ", ".join(f"{label}: {models.get(label, {}).get('source', 'unknown')}" for label in pair)
    machine = results.get("machine", {}).get("cpu", "an unrecorded machine")
    return costs, f"measured {results.get('date_utc', '(undated)')} on {machine} (weights {weights})"
