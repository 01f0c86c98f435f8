"""Speculative sampling (Algorithm 2 of Chen et al. 2023, arXiv 2302.01318).

Each loop the draft p proposes K tokens one at a time; the target q scores all K + 1 positions
in ONE call; each drafted token is kept with probability min(1, q/p) (rejection.py); at the
first rejection a replacement comes from (q - p)+, and if all K are kept an extra token comes
from the target's last distribution. So every loop emits between 1 and K + 1 tokens for one
target call, and (Theorem 1) the tokens are distributed exactly as autoregressive sampling
from q with the same sampling controls.

The paper indexes tokens from 1 (x_1 .. x_K, q_1 .. q_{K+1}); Python indexes from 0, so the
paper's drafted token x~_t is `drafted[t - 1]` here, and its distributions `p_rows[t - 1]`,
`q_rows[t - 1]`; the target's extra distribution q_{K+1} is `q_rows[K]`.

Reading order: the four steps, the paper's draft (a model with its KV cache), the loop; then
what the loop records about itself (its trace and timings), kept apart so the loop reads like
the paper.
"""

import time
from dataclasses import dataclass, field
from functools import partial

import numpy as np

from . import rejection
from .errors import PicoGPTError
from .sampling import distribution, random_generator, sample, validate_sampling_args

# ---------------------------------------------------------------------------------------------
# The steps of one loop
# ---------------------------------------------------------------------------------------------

def draft_tokens(draft, cache, new, K, controls, rng):
    """Step 1: sample x~_1 .. x~_K from p one at a time with the draft's KV cache.

    `new` are the tokens the draft has not seen yet (the prompt on the first loop). K calls;
    the last drafted token is never fed to the draft. Returns (drafted, p_rows [K, n_vocab])."""
    drafted, p_rows = [], []
    for _ in range(K):
        logits = draft(new, cache)[-1]  # [n_new, n_vocab] -> [n_vocab]
        p_t = distribution(logits, **controls)
        x = sample(p_t, rng)
        drafted.append(x)
        p_rows.append(p_t)
        new = [x]
    return drafted, np.stack(p_rows)


def score(target, cache, new, drafted, controls):
    """Step 2: one target call over the unseen tokens and the K drafts gives the K + 1
    distributions q_1 .. q_{K+1}. Returns q_rows [K + 1, n_vocab]."""
    K = len(drafted)
    logits = target(new + drafted, cache)[-(K + 1):]  # [n_new + K, n_vocab] -> [K + 1, n_vocab]
    return distribution(logits, **controls)


def speculative_step(drafted, p, q, rng, r_drawn=None):
    """Steps 3 and 4 of Algorithm 2 for one loop: which tokens the loop emits.

    drafted: the K drafted ids x~_1 .. x~_K; p: [K, n_vocab], the draft's distributions they were
    sampled from; q: [K + 1, n_vocab], the target's, q[K] being q_{K+1}; rng: numpy Generator.
    Returns the accepted prefix x~_1 .. x~_j, then one token: resampled from (q_{j+1} - p_{j+1})+
    at the first rejection, or the extra token from q_{K+1} when all K were accepted.
    `r_drawn` (a list), if given, receives each uniform draw r, for the trace.
    """
    K = len(drafted)
    emitted = []
    # Step 3. For t = 1..K: draw r ~ U[0, 1]; keep x~_t if r < min(1, q(x~_t) / p(x~_t)),
    #         else sample x_{n+t} ~ (q - p)+ and exit the loop.
    for t in range(K):  # t = paper's t - 1
        accepted, token, r = rejection.accept_or_resample(p[t], q[t], drafted[t], rng)
        if r_drawn is not None:
            r_drawn.append(r)
        emitted.append(token)
        if not accepted:
            return emitted
    # Step 4. All K accepted: sample the extra token x_{n+K+1} ~ q(x | x_1..x_{n+K}) = q[K].
    emitted.append(sample(q[K], rng))
    return emitted


# ---------------------------------------------------------------------------------------------
# Steps 3 and 4 another way: the block judged together
# ---------------------------------------------------------------------------------------------
#
# Block verification (Sun, Mendlovic, Leviathan, Aharoni, Ro, Beirami, Suresh 2025, arXiv
# 2403.10444, their Algorithm 2) takes the same drafts and the same K + 1 target rows and emits
# the same kind of output (a prefix of the drafts, then one token), distributed exactly as q, and
# in expectation keeps at least as many drafts as speculative_step. The paper calls the target
# M_b and the draft M_s (our q and p) and the lookahead gamma (our K), and counts from 1: its
# X_i is drafted[i - 1], M_b(. | c, X^{i-1}) is q[i - 1], M_s(. | c, X^{i-1}) is p[i - 1], and
# M_b(. | c, X^gamma) is q[K]. Its running weights p_0 .. p_gamma are `weights` (the course's
# w_0 .. w_K: p is the draft here), its h_1 .. h_gamma are `keep[0] .. keep[K - 1]`, its uniforms
# eta_i are `eta[i - 1]`, and its tau (the drafts kept; tau is the temperature here) is `n_kept`.
# Each per-position piece is one function of rejection.py.

def block_keep_probabilities(drafted, p, q):
    """The running weights w_0 .. w_K [K + 1] (w_0 = 1) and the keep probabilities h_1 .. h_K
    [K] of these drafts. h_K = w_K is h_i's formula against a draft row of zeros: after the last
    draft the draft offers nothing (and the weighted residual against it is q[K], the extra token's row)."""
    K = len(drafted)
    weights = [1.0]  # w_0 = 1
    for i in range(1, K + 1):  # the paper's i; row i - 1
        weights.append(rejection.running_weight(weights[-1], p[i - 1], q[i - 1], drafted[i - 1]))
    keep = [rejection.block_keep_probability(weights[i], p[i], q[i]) for i in range(1, K)]  # h_1 .. h_{K-1}
    if K:
        keep.append(weights[K])  # h_K = w_K
    return weights, keep


def block_step(drafted, p, q, rng, r_drawn=None):
    """Steps 3 and 4 by block verification: which tokens the loop emits.

    The same arguments and output as speculative_step (drafted: K ids; p [K, n_vocab]; q
    [K + 1, n_vocab]; a numpy Generator), so it can be passed as speculative_sampling's `step`.
    One uniform eta_i per position; the drafts kept are x~_1 .. x~_i for the LARGEST i with
    eta_i < h_i (a failing position does not end the block: a longer prefix can still pass), none
    if no position passes. Then one token: from q[K] when all K are kept, else from the weighted
    residual (w_i q_{i+1} - p_{i+1})+. `r_drawn` (a list), if given, receives the K uniforms.
    """
    K = len(drafted)
    eta = rng.random(K)  # eta_1 .. eta_K ~ U[0, 1), all drawn first
    if r_drawn is not None:
        r_drawn.extend(float(e) for e in eta)
    weights, keep = block_keep_probabilities(drafted, p, q)  # w_0 .. w_K and h_1 .. h_K
    n_kept = max((i for i in range(1, K + 1) if eta[i - 1] < keep[i - 1]), default=0)  # the largest i that passes
    kept = [int(x) for x in drafted[:n_kept]]  # x~_1 .. x~_{n_kept}
    if n_kept == K:  # every draft kept: the extra token from q_{K+1} = q[K]
        return kept + [sample(q[K], rng)]
    return kept + [sample(rejection.weighted_residual(weights[n_kept], p[n_kept], q[n_kept]), rng)]


def block_output_distribution(drafted, p, q):
    """The exact law of what block_step emits for these drafts: {emitted tuple: probability}.
    i drafts are kept with probability h_i (1 - h_{i+1}) ... (1 - h_K) (position i passes, no later
    one does; h_0 = 1), then the token comes from the weighted residual of position i + 1, or from
    q[K] when i = K."""
    K = len(drafted)
    weights, keep = block_keep_probabilities(drafted, p, q)
    law, none_later = {}, 1.0  # P(no position after n_kept passes)
    for n_kept in range(K, -1, -1):
        h = 1.0 if n_kept == 0 else keep[n_kept - 1]
        chance = h * none_later  # P(exactly n_kept drafts kept)
        none_later *= 1.0 - h
        if chance <= 0:
            continue
        last = q[K] if n_kept == K else rejection.weighted_residual(weights[n_kept], p[n_kept], q[n_kept])
        for y in np.flatnonzero(last):
            law[tuple(int(x) for x in drafted[:n_kept]) + (int(y),)] = chance * float(last[y])
    return law


def token_ids(output):
    """A step's output as a tuple of Python ints, or None when it is not a list, tuple or 1-D
    integer array of token ids."""
    if isinstance(output, np.ndarray):
        output = output.tolist() if output.ndim == 1 and np.issubdtype(output.dtype, np.integer) else None
    if not isinstance(output, (list, tuple)) or not all(
            isinstance(x, (int, np.integer)) and not isinstance(x, bool) for x in output):
        return None
    return tuple(int(x) for x in output)


def step_problem(output, drafted, n_vocab):
    """Why `output` cannot be what one loop emits for these drafts (a sentence), or None. A loop
    emits the accepted drafts x~_1 .. x~_j (a prefix of `drafted`), then exactly one token."""
    K, tokens = len(drafted), token_ids(output)
    if tokens is None:
        return "it must return a list of token ids (Python ints)"
    if not 1 <= len(tokens) <= K + 1:
        return f"a loop emits 1 to K + 1 = {K + 1} tokens, not {len(tokens)}"
    outside = [x for x in tokens if not 0 <= x < n_vocab]
    if outside:
        return f"token id {outside[0]} is outside the vocabulary (ids 0..{n_vocab - 1})"
    if list(tokens[:-1]) != list(drafted[: len(tokens) - 1]):
        j = next(i for i, (a, b) in enumerate(zip(tokens, drafted)) if a != b)  # the first token that is not a draft
        return (f"after the accepted drafts {list(tokens[:j])} comes {tokens[j]}, which is not x~_{j + 1} = {drafted[j]}, "
                f"then {list(tokens[j + 1:])} more: the loop ends with the first token that is not a draft")
    return None


def checked_step(step, n_vocab):
    """A step other than the library's, as the loop runs it: on copies of drafted, p and q (a step
    that changes them in place cannot corrupt the loop or its trace), its output checked on every
    loop (the accepted drafts, then exactly one token, ids in the vocabulary) and handed back as a
    list of Python ints. A wrong output stops the loop with one PicoGPTError naming it."""
    def run(drafted, p, q, rng):
        output = step(list(drafted), p.copy(), q.copy(), rng)
        problem = step_problem(output, drafted, n_vocab)
        if problem:
            raise PicoGPTError(f"step={getattr(step, '__name__', 'step')} returned {output!r} for the drafts "
                               f"{list(drafted)}: {problem}. Grade it with "
                               "picogpt.course.step_exercise.check_speculative_step")
        return list(token_ids(output))
    return run


# ---------------------------------------------------------------------------------------------
# The draft: the paper's is a smaller model
# ---------------------------------------------------------------------------------------------

class ModelDraft:
    """The paper's draft: a smaller model p, sampled with its own KV cache (Step 1).

    speculative_sampling takes a model as its draft and wraps it in this class; any object with
    the same four members can draft instead (notebook 06 and picogpt/drafts.py: a draft with no
    model, the target's own first layers, a lookahead that adapts):
      models                               the models it runs (their vocabulary and context are checked)
      start()                              before the first loop of every run
      propose(sequence, K, controls, rng)  up to K drafts to follow x_1 .. x_n = sequence, and the
                                           distributions p [len(drafts), n_vocab] they were sampled from
      roll_back(n_kept)                    the loop kept x_1 .. x_{n_kept}: forget anything after it
    """

    def __init__(self, model):
        self.model, self.name, self.models = model, model.name, (model,)
        self.cache = None

    def start(self):
        self.cache = self.model.new_cache()

    def propose(self, sequence, K, controls, rng):
        return draft_tokens(self.model, self.cache, sequence[len(self.cache):], K, controls, rng)

    def roll_back(self, n_kept):
        # the draft never saw its own last draft x~_K, so its cache may already be shorter
        self.cache.truncate(min(n_kept, len(self.cache)))


def as_draft(draft):
    """A model becomes a ModelDraft; an object that already drafts (has `propose`) is used as is."""
    return draft if hasattr(draft, "propose") else ModelDraft(draft)


# ---------------------------------------------------------------------------------------------
# Algorithm 2
# ---------------------------------------------------------------------------------------------

def speculative_sampling(draft, target, ids, N, *, K=4, temperature=1.0, top_k=None, top_p=None,
                         seed=None, keep_distributions=False, on_loop=None, step=speculative_step):
    """Algorithm 2: sample N tokens from `target` (q), with `draft` (p) proposing K per loop.

    `draft` is a model, or any object that drafts (see ModelDraft). Sampling controls are
    applied to both p and q before the rejection step. One numpy Generator, made from `seed`
    (an int, None, or a Generator used as is), drives every random draw: same seed, same output.
    `keep_distributions=True` keeps p and q of every loop in the trace (for plots). `on_loop(trace)`
    is called after each loop (its time is not counted). `step` replaces Steps 3-4 with your own
    `step(drafted, p, q, rng) -> list[int]` (the shape of `speculative_step`; notebook 03's exercise
    plugs the learner's function in here): it gets copies of its inputs, and what it returns is
    checked every loop (checked_step).

    Near the end of the context the lookahead shrinks so that the K drafts fit (it never falls
    below 1, since the prompt + N must fit).
    """
    drafter = as_draft(draft)
    prompt = validate_sampling_args(ids, N, (*drafter.models, target), K=K, temperature=temperature,
                                    top_k=top_k, top_p=top_p)
    controls = dict(temperature=temperature, top_k=top_k, top_p=top_p)
    rng = random_generator(seed)
    n_ctx = min(model.config.n_ctx for model in (*drafter.models, target))
    drafter.start()
    target_cache = target.new_cache()
    sequence = list(prompt)  # x_1 .. x_n: the prompt and every token emitted so far
    record = LoopRecorder(keep_distributions, on_loop)  # the clock starts; traces and timings go here
    step = record.with_r_draws(step, target.config.n_vocab)

    while len(sequence) - len(prompt) < N:  # "while n < T"
        n = len(sequence)
        record.start_loop()

        # Step 1. Sample the draft autoregressively: x~_t ~ p(x | x_1..x_n, x~_1..x~_{t-1}).
        drafted, p_rows = drafter.propose(sequence, min(K, n_ctx - n), controls, rng)
        record.lap("draft")

        # Step 2. In parallel (one call), the K + 1 target distributions
        #         q(x | x_1..x_n), q(x | x_1..x_n, x~_1), ..., q(x | x_1..x_n, x~_1..x~_K).
        q_rows = score(target, target_cache, sequence[len(target_cache):], drafted, controls)
        record.lap("score")

        # Steps 3 and 4 (accept/reject each draft in turn; resample or add the extra token).
        emitted = step(drafted, p_rows, q_rows, rng)
        n_accepted = len(emitted) - 1
        sequence += emitted

        # Roll both caches back to the kept tokens x_1 .. x_{n + n_accepted}. Neither model has
        # seen the new token yet: the next loop feeds each model exactly the tokens it is missing.
        target_cache.truncate(n + n_accepted)
        drafter.roll_back(n + n_accepted)
        record.end_loop(drafted, p_rows, q_rows, emitted)

    return SpeculativeResult(tokens=sequence[len(prompt): len(prompt) + N], loops=record.loops,
                             seconds=record.seconds(), K=K)


# ---------------------------------------------------------------------------------------------
# What a run records: one trace per loop, and the time of each step
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class LoopTrace:
    """One loop of Algorithm 2, for plots and statistics."""
    drafted: tuple  # x~_1 .. x~_K, sampled from p
    p_drafted: tuple  # p_t(x~_t): the draft's probability of each drafted token
    q_drafted: tuple  # q_t(x~_t): the target's probability of each drafted token
    r: tuple  # the uniform draws, one per accept/reject decision (empty when a custom `step` ran)
    n_accepted: int  # drafted tokens kept (the first n_accepted)
    new_token: int  # resampled from (q - p)+ after a rejection, or the extra token from q_{K+1}
    resampled: bool  # True: new_token came from (q - p)+; False: all K accepted, it is the extra
    t_draft_s: float  # K draft calls + sampling
    t_score_s: float  # the one target call + turning its logits into q
    t_decide_s: float  # the accept/reject steps and the cache roll-back
    p: np.ndarray = field(default=None, compare=False, repr=False)  # [K, n_vocab] if kept
    q: np.ndarray = field(default=None, compare=False, repr=False)  # [K + 1, n_vocab] if kept

    @property
    def K(self):
        return len(self.drafted)

    @property
    def decisions(self):
        """Accept/reject decisions made: the accepted drafts, plus the rejected one if any."""
        return self.n_accepted + self.resampled

    @property
    def tokens(self):
        """The tokens this loop emitted: the accepted drafts, then the new token."""
        return self.drafted[: self.n_accepted] + (self.new_token,)

    @property
    def seconds(self):
        return self.t_draft_s + self.t_score_s + self.t_decide_s


@dataclass
class SpeculativeResult:
    """The N tokens speculative sampling produced, and a trace of every loop."""
    tokens: list  # exactly N generated token ids (the last loop may have made more: cut)
    loops: list  # [LoopTrace]
    seconds: float  # total wall time, argument checks excluded
    K: int  # the lookahead asked for (a loop drafts fewer near the context's end, or if its draft has fewer)

    @property
    def accepted(self):
        """Drafted tokens accepted in each loop."""
        return [loop.n_accepted for loop in self.loops]

    @property
    def alpha_hat(self):
        """Observed acceptance rate: accepted / accept-reject decisions made (a decision ends a
        loop at the first rejection, so later drafts are never judged). This is the estimate
        of alpha that goes into theory.expected_tokens_per_loop(alpha, K)."""
        decisions = sum(loop.decisions for loop in self.loops)
        return sum(self.accepted) / decisions if decisions else float("nan")

    @property
    def tokens_per_loop(self):
        """Mean tokens emitted per loop, i.e. per target call (before cutting to N)."""
        return float(np.mean([len(loop.tokens) for loop in self.loops]))

    @property
    def tokens_per_s(self):
        return len(self.tokens) / self.seconds if self.seconds else float("inf")


class LoopRecorder:
    """Everything speculative_sampling measures and keeps, in one place, so that its loop shows
    only the algorithm: the wall clock (on_loop's time left out), the time of each step, the
    uniform draws r of the library's step, and one LoopTrace per loop."""

    def __init__(self, keep_distributions=False, on_loop=None):
        self.keep_distributions, self.on_loop = keep_distributions, on_loop
        self.loops, self.r, self.laps_s = [], [], {}
        self.callback_s = 0.0
        self.started = self.lap_started = time.perf_counter()

    def with_r_draws(self, step, n_vocab):
        """The library's step (also for step=None), made to hand its uniform draws r to the trace;
        any other step checked on every loop (checked_step; its trace has no r)."""
        if step is None or step is speculative_step:
            return partial(speculative_step, r_drawn=self.r)
        return checked_step(step, n_vocab)

    def start_loop(self):
        self.r.clear()
        self.laps_s = {}
        self.lap_started = time.perf_counter()

    def lap(self, name):
        """The time since the last lap (or the loop's start) was spent on `name`."""
        now = time.perf_counter()
        self.laps_s[name] = now - self.lap_started
        self.lap_started = now

    def end_loop(self, drafted, p_rows, q_rows, emitted):
        """Steps 3-4 and the roll-back are over: time them, trace the loop, call on_loop."""
        self.lap("decide")
        n_accepted = len(emitted) - 1
        trace = LoopTrace(
            drafted=tuple(int(x) for x in drafted),
            p_drafted=tuple(float(p_rows[t, x]) for t, x in enumerate(drafted)),
            q_drafted=tuple(float(q_rows[t, x]) for t, x in enumerate(drafted)),
            r=tuple(self.r), n_accepted=n_accepted, new_token=int(emitted[-1]),
            resampled=len(emitted) <= len(drafted),
            t_draft_s=self.laps_s["draft"], t_score_s=self.laps_s["score"], t_decide_s=self.laps_s["decide"],
            p=p_rows if self.keep_distributions else None, q=q_rows if self.keep_distributions else None)
        self.loops.append(trace)
        if self.on_loop is not None:
            before = time.perf_counter()
            self.on_loop(trace)
            self.callback_s += time.perf_counter() - before

    def seconds(self):
        """Wall time since the recorder started, without the time spent in on_loop."""
        return time.perf_counter() - self.started - self.callback_s
