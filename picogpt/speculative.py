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
"""

import time
from dataclasses import dataclass, field

import numpy as np

from . import rejection
from .errors import PicoGPTError
from .sampling import distribution, random_generator, sample, validate_sampling_args


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
    K: int

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


def run_step(step, drafted, p, q, rng):
    """Call the step function of Steps 3-4 (None: the library's `speculative_step`, recording its r
    draws) and check what it returned has the shape of a loop's output. Returns (emitted, r's)."""
    if step is None or step is speculative_step:
        rs = []
        return speculative_step(drafted, p, q, rng, r_drawn=rs), tuple(rs)
    emitted = [int(x) for x in step(list(drafted), p, q, rng)]
    K = len(drafted)
    if not 1 <= len(emitted) <= K + 1 or emitted[:-1] != list(drafted[: len(emitted) - 1]):
        raise PicoGPTError(f"your step returned {emitted} for drafted {list(drafted)}: it must return the "
                           f"accepted drafts (a prefix of drafted), then one more token, 1 to {K + 1} ids "
                           "in all. Try it with picogpt.course.step_exercise.check_speculative_step.")
    return emitted, ()


def speculative_sampling(draft, target, ids, N, *, K=4, temperature=1.0, top_k=None, top_p=None,
                         seed=None, keep_distributions=False, on_loop=None, step=None):
    """Algorithm 2: sample N tokens from `target` (q), with `draft` (p) proposing K per loop.

    Sampling controls are applied to both p and q before the rejection step. One numpy
    Generator, made from `seed` (an int, None, or a Generator used as is), drives every random
    draw: same seed, same output. `keep_distributions=True` keeps p and q of every loop in the
    trace (for plots). `on_loop(trace)` is called after each loop (its time is not counted).
    `step` replaces Steps 3-4 with your own `step(drafted, p, q, rng) -> list[int]` (the shape of
    `speculative_step`; notebook 03's exercise plugs the learner's function in here).

    Near the end of the context the lookahead shrinks so that the K drafts fit (it never falls
    below 1, since the prompt + N must fit).
    """
    prompt = validate_sampling_args(ids, N, (draft, target), K=K, temperature=temperature,
                                 top_k=top_k, top_p=top_p)
    controls = dict(temperature=temperature, top_k=top_k, top_p=top_p)
    rng = random_generator(seed)
    n_ctx = min(draft.config.n_ctx, target.config.n_ctx)
    draft_cache, target_cache = draft.new_cache(), target.new_cache()
    sequence = list(prompt)  # x_1 .. x_n: the prompt and every token emitted so far
    loops, callback_s = [], 0.0
    start = time.perf_counter()

    while len(sequence) - len(prompt) < N:  # "while n < T"
        n = len(sequence)
        K_loop = min(K, n_ctx - n)  # the target scores positions n .. n + K_loop - 1

        # Step 1. Sample the draft autoregressively: x~_t ~ p(x | x_1..x_n, x~_1..x~_{t-1}).
        t0 = time.perf_counter()
        drafted, p_rows = draft_tokens(draft, draft_cache, sequence[len(draft_cache):], K_loop,
                                       controls, rng)

        # Step 2. In parallel (one call), the K + 1 target distributions
        #         q(x | x_1..x_n), q(x | x_1..x_n, x~_1), ..., q(x | x_1..x_n, x~_1..x~_K).
        t1 = time.perf_counter()
        q_rows = score(target, target_cache, sequence[len(target_cache):], drafted, controls)

        # Steps 3 and 4 (accept/reject each draft in turn; resample or add the extra token).
        t2 = time.perf_counter()
        emitted, rs = run_step(step, drafted, p_rows, q_rows, rng)
        n_accepted, resampled = len(emitted) - 1, len(emitted) <= K_loop
        new_token = emitted[-1]
        sequence += emitted

        # Roll both caches back to the kept tokens x_1 .. x_{n + n_accepted}. Neither model has
        # seen new_token yet, and the draft never saw its own last draft x~_K: the next loop
        # feeds each model exactly the tokens it is missing.
        target_cache.truncate(n + n_accepted)
        draft_cache.truncate(min(n + n_accepted, len(draft_cache)))
        t3 = time.perf_counter()

        trace = LoopTrace(
            drafted=tuple(drafted),
            p_drafted=tuple(float(p_rows[t, x]) for t, x in enumerate(drafted)),
            q_drafted=tuple(float(q_rows[t, x]) for t, x in enumerate(drafted)),
            r=tuple(rs), n_accepted=n_accepted, new_token=new_token, resampled=resampled,
            t_draft_s=t1 - t0, t_score_s=t2 - t1, t_decide_s=t3 - t2,
            p=p_rows if keep_distributions else None, q=q_rows if keep_distributions else None)
        loops.append(trace)
        if on_loop is not None:
            t4 = time.perf_counter()
            on_loop(trace)
            callback_s += time.perf_counter() - t4

    seconds = time.perf_counter() - start - callback_s
    return SpeculativeResult(tokens=sequence[len(prompt): len(prompt) + N], loops=loops,
                             seconds=seconds, K=K)
