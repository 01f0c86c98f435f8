"""Notebook 06 (beyond one draft model): what only it uses. Its questions (the residual of a
point-mass draft, what a draft made of the target's first layers costs) and its measurements:
other drafts measured the way notebook 05 measures a draft model.

Every strategy runs through the same `speculative_sampling` and is timed by the same machinery,
`measure.speedup`: the strategies raced against each other are interleaved in one measurement
(`measure_strategies`: per repeat, each strategy and then the target alone, with the same seed), so
each speedup is a ratio against the same autoregressive runs and a busy moment hits them alike;
the measured speedup is measure.speedup's one statistic (the median of the repeat-by-repeat
ratios, with their interquartile range), and course/speed_panels.py says whether the repeats resolve
the best. A strategy may propose a different number of drafts in each loop (prompt lookup finds 0
to K tokens; adaptive K changes K as it goes), so its prediction is Jay Mody's arithmetic
(theory.predicted_speedup) summed over the loops it actually ran: the tokens each loop should emit
at the measured alpha, over what each loop should cost at the measured in-loop costs.
"""

from dataclasses import dataclass

import numpy as np

from .. import theory
from ..io.params import expected_shapes
from ..measure import speedup, timing
from ..sampling import distribution
from ..speculative import Chain
from . import speed_panels
from .grading import check_number

# ---------------------------------------------------------------------------------------------
# The questions
# ---------------------------------------------------------------------------------------------

def check_point_mass_residual(answer, q_x=0.3, q_y=0.2):
    """Prompt lookup drafts x̃ with p(x̃) = 1; the target gives it q(x̃) = 0.3. If x̃ is rejected,
    with what probability is the replacement a token y with q(y) = 0.2?"""
    expected = q_y / (1 - q_x)
    how = ("with p a point mass on x̃, max(0, q − p) is q everywhere except at x̃, where it is 0; "
           "then divide by its sum.")
    solution = (f"(q − p)+ is q without x̃, renormalised: q(y) / (1 − q(x̃)) = {q_y} / {1 - q_x:g} = {expected:.4f}. "
                f"Check Theorem 1: P(emit y) = P(reject) · {expected:.4f} = {1 - q_x:g} × {expected:.4f} = {q_y} = q(y).")
    mistakes = [(q_y, "that is q(y) itself; after a rejection the residual leaves x̃ out, so the rest is renormalised"),
                (q_y * (1 - q_x), "that multiplies q(y) by P(reject); the residual renormalises q without x̃: divide "
                 "by the mass left, 1 − q(x̃)"),
                (q_x, "that is the chance x̃ is accepted (r < q(x̃)); the question asks about the replacement")]
    return check_number(answer, expected, how, solution, mistakes)


def check_first_layers_cost(answer, n_layer=12, total_layers=48, n_embd=1600, n_vocab=50257, n_ctx=1024):
    """GPT-2 XL (48 layers, n_embd = 1600) drafting with its own first 12 layers, final layer norm
    and LM head. If a decoding step's time is proportional to the bytes of weights it reads,
    what is c = t_draft / t_target?"""
    from ..gpt2 import GPT2Config
    full = GPT2Config(n_layer=total_layers, n_head=1, n_embd=n_embd, n_ctx=n_ctx, n_vocab=n_vocab)
    draft = GPT2Config(n_layer=n_layer, n_head=1, n_embd=n_embd, n_ctx=n_ctx, n_vocab=n_vocab)
    expected = bytes_per_token(draft) / bytes_per_token(full)
    block = 12 * n_embd**2 + 13 * n_embd
    how = ("count the weights each step reads: n_layer blocks of 12 n_embd² + 13 n_embd each (notebook 01), "
           "plus the token embedding, which is also the LM head (n_vocab × n_embd), the final layer norm and one "
           "row of positions; take the draft's over the target's.")
    solution = (f"({n_layer} × {block:,} + {n_vocab} × {n_embd} + ...) / ({total_layers} × {block:,} + ...) = {expected:.3f}: "
                f"more than {n_layer}/{total_layers} = {n_layer / total_layers:.2f}, because both read the whole "
                "embedding-and-head matrix every step.")
    mistakes = [(n_layer / total_layers, "that counts the blocks only; the draft also reads the embedding and LM head, "
                 "as large as several blocks, on every step")]
    return check_number(answer, expected, how, solution, mistakes)


# ---------------------------------------------------------------------------------------------
# Other drafts measured as notebook 05 measures a draft model
# ---------------------------------------------------------------------------------------------

def steady_loops(runs):
    """The loops of every run but each run's first (it also reads the prompt)."""
    return [loop for run in runs for loop in run.loops[1:]]


def median_t_score_s(loops):
    """{K: median scoring time of the loops that drafted K tokens}."""
    return {K: float(np.median([loop.t_score_s for loop in loops if loop.K == K])) for K in {loop.K for loop in loops}}


def loop_prediction(loops, alpha, t_draft_s, t_target_s):
    """Predicted speedup of loops that drafted K_i tokens each: the arithmetic of notebook 05
    summed over them, Σ (1 - alpha^(K_i+1)) / (1 - alpha) / Σ (K_i t_draft + t_score(K_i)) × t_target,
    t_score(K) the median scoring time of the loops with that K. With one K for every loop it is
    notebook 05's prediction. A loop that drafted nothing emits one token whatever alpha is (alpha
    is undefined, nan, when no loop drafted anything)."""
    Ks = np.array([loop.K for loop in loops])
    t_score_s = median_t_score_s(loops)
    tokens = float(np.sum(np.where(Ks == 0, 1.0, theory.expected_tokens_per_loop(np.nan_to_num(alpha), Ks))))
    seconds = float(np.sum(Ks * np.nan_to_num(t_draft_s)) + sum(t_score_s[K] for K in Ks))
    return tokens / seconds * t_target_s


@dataclass(frozen=True)
class StrategyResult:
    """One strategy, measured by measure.speedup and predicted from its own in-loop costs."""
    name: str
    measurement: object  # the SpeedupMeasurement
    K: int  # the lookahead asked for (a cap, for strategies that choose their own)
    K_per_loop: float  # drafts proposed per loop, mean over the timed runs
    c: float  # t_draft / t_target, in the loop (nan if it never drafted)
    t_score_ratio: float  # median in-loop scoring call / t_target
    predicted: float

    @property
    def alpha_hat(self):
        """Accepted / judged, every timed run (nan if it never drafted)."""
        return self.measurement.alpha_hat

    @property
    def speedup_runs(self):
        """The repeat-by-repeat speedups (their median is `measured`)."""
        return self.measurement.by_K[self.K].speedup_runs

    @property
    def measured(self):
        return self.speedup_runs.median


def measure_strategies(strategies, target, ids, N, repeats=3, seed=0, on_run=None, **controls):
    """Race strategies {name: (draft, K)} against autoregressive sampling of N tokens from `target`
    in one interleaved measurement (measure.speedup.timed_runs, with its warm-up); `on_run(name,
    run)` sees each timed run (name None: autoregressive). Returns {name: StrategyResult}."""
    controls = {"temperature": 1.0, "top_k": None, "top_p": None, **controls}
    variants = {name: (draft, Chain(K)) for name, (draft, K) in strategies.items()}
    ar_runs, spec_runs, loads = speedup.timed_runs(variants, target, ids, N, repeats, seed, 4, controls, on_run=on_run)
    found = {}
    for name, (_, K) in strategies.items():
        m = speedup.summarise(name, target.name, N, controls, ar_runs, {K: spec_runs[name]}, *loads)
        loops = steady_loops(spec_runs[name])
        found[name] = StrategyResult(
            name=name, measurement=m, K=K, K_per_loop=float(np.mean([loop.K for loop in loops])),
            c=m.t_draft_s / m.t_target_s,
            t_score_ratio=float(np.median([loop.t_score_s for loop in loops])) / m.t_target_s,
            predicted=loop_prediction(loops, m.alpha_hat, m.t_draft_s, m.t_target_s))
    return found


def measurement_result(name, m, K):
    """A StrategyResult from a SpeedupMeasurement at one fixed K, without its loops (the bench's:
    benchmarks/bench.json keeps the summary only); its prediction is the measurement's own."""
    at = m.by_K[K]
    return StrategyResult(name=name, measurement=m, K=K, K_per_loop=float(K), c=m.t_draft_s / m.t_target_s,
                          t_score_ratio=at.t_score_s / m.t_target_s, predicted=at.predicted)


def strategy_lines(found):
    """The strategies side by side, as text: one line each, and the sentence for one that proposed
    nothing (its alpha is undefined)."""
    lines = [f"{'strategy':46} {'drafts/loop':>11} {'α̂':>5} {'c':>6} {'t_score/t_target':>16} "
             f"{'predicted':>9}  measured (IQR of the per-repeat ratios)"]
    for r in found:
        lines.append(f"{r.name:46} {r.K_per_loop:11.2f} {r.alpha_hat:5.2f} {r.c:6.3f} {r.t_score_ratio:16.2f} "
                     f"{r.predicted:8.2f}x  {speedup.speedup_text(r.measurement.by_K[r.K])}")
    return lines + [f"{r.name}: {speedup.NO_DRAFTS}" for r in found if r.measurement.n_decisions == 0]


def best_strategy_lines(found, what="strategy"):
    """The best of strategies measured together ({name: StrategyResult}, one measurement) and
    whether their repeats resolve it (course/speed_panels.py, measure/compare.py's paired test)."""
    first = next(iter(found.values())).measurement
    best = max(found, key=lambda name: found[name].measured)
    runs = {name: speedup.speedups_by_repeat(r.measurement, r.K) for name, r in found.items()}
    return [f"best {what} measured: {best} ({found[best].measured:.2f}x, the highest median speedup)",
            speed_panels.resolution_line(runs, what, first.repeats, first.N)]


# ---------------------------------------------------------------------------------------------
# A draft made of the target's first layers: what it accepts, what it costs
# ---------------------------------------------------------------------------------------------

def mean_acceptance(draft, ids, q_rows, **controls):
    """alpha = Σ_x min(p(x), q(x)) at every position of `ids`, averaged: exact (no sampling), from
    one forward pass of the draft; q_rows [len(ids), n_vocab] are the target's distributions there."""
    p_rows = distribution(draft(ids), **controls)  # [len(ids), n_vocab]
    return float(np.mean(theory.acceptance_rate(p_rows, q_rows)))


def isolated_c(draft, target, ids, repeats=7, steps=3):
    """c measured outside the loop, as the course measures a cost: per repeat, the median of `steps`
    cached one-token steps of the draft, then of the target, at the last position of `ids`
    (interleaved, so that a busy moment hits both), after one warm-up of each; returns the Spread
    (measure.timing) of the repeat-by-repeat ratios draft / target."""
    position = len(ids) - 1
    stepping = []
    for model in (draft, target):
        cache = model.new_cache()
        if position:
            model(ids[:position], cache)  # the text before the last token (not timed)

        def step(model=model, cache=cache):
            model(ids[position:position + 1], cache)  # [1] -> [1, n_vocab]
            cache.truncate(position)  # rolled back: every step does the same work

        stepping.append(step)
    draft_step, target_step = stepping
    draft_step(), target_step()  # warm-up
    return timing.spread([timing.median_seconds(draft_step, steps) / timing.median_seconds(target_step, steps)
                          for _ in range(repeats)])


def bytes_per_token(config):
    """Bytes of float32 weights one decoding step of a GPT-2 of this config reads: every
    weight once, except wpe, of which it reads one row."""
    shapes = expected_shapes(config)
    n_numbers = sum(int(np.prod(shape)) for name, shape in shapes.items() if name != "wpe.weight")
    return 4 * (n_numbers + config.n_embd)
