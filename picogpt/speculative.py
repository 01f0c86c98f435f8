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

Reading order: the four steps (Steps 3-4 two ways: token by token, and the block judged
together); a learner's step, checked as the loop runs it; the paper's draft (a model with its KV
cache); the loop, and the value that names it for a measurement; then what a loop records about
itself (its trace). What both loops share (the draft's contract, the checks of a proposal and of a
learner's step, the recorder) is picogpt/loop.py's.
"""

from dataclasses import dataclass, field
from functools import partial

import numpy as np

from . import rejection
from .errors import PicoGPTError, echo
from .loop import (
    Draft,
    LoopRecorder,
    checked,
    checked_proposal,
    distributions,
    draft_for,
    options_for,
    step_name,
    token_ids,
    verifier_for,
)
from .sampling import check_model, distribution, logits_of, random_generator, sample, validate_sampling_args

# ---------------------------------------------------------------------------------------------
# The steps of one loop
# ---------------------------------------------------------------------------------------------

def draft_tokens(draft, cache, new, K, controls, rng):
    """Step 1: sample x~_1 .. x~_K from p one at a time with the draft's KV cache.

    `new` are the tokens the draft has not seen yet (the prompt on the first loop). K calls;
    the last drafted token is never fed to the draft. Returns (drafted, p_rows [K, n_vocab])."""
    drafted, p_rows = [], []
    for _ in range(K):
        logits = logits_of(draft, new, cache)[-1]  # [n_new, n_vocab] -> [n_vocab]
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
    logits = logits_of(target, new + drafted, cache)[-(K + 1):]  # [n_new + K, n_vocab] -> [K + 1, n_vocab]
    return distribution(logits, **controls)


def token_by_token(drafted, p, q, rng):
    """Steps 3 and 4 of Algorithm 2 for one loop: which tokens the loop emits.

    drafted: the K drafted ids x~_1 .. x~_K; p: [K, n_vocab], the draft's distributions they were
    sampled from; q: [K + 1, n_vocab], the target's, q[K] being q_{K+1}; rng: numpy Generator.
    Returns (emitted, r): the accepted prefix x~_1 .. x~_j, then one token, resampled from
    (q_{j+1} - p_{j+1})+ at the first rejection or the extra token from q_{K+1} when all K were
    accepted; and the uniform draws r_1 .. r_{j+1} (r_1 .. r_K if all were accepted), for the trace.
    """
    K = len(drafted)
    emitted, r_drawn = [], []
    # Step 3. For t = 1..K: draw r ~ U[0, 1]; keep x~_t if r < min(1, q(x~_t) / p(x~_t)),
    #         else sample x_{n+t} ~ (q - p)+ and exit the loop.
    for t in range(K):  # t = paper's t - 1
        accepted, token, r = rejection.accept_or_resample(p[t], q[t], drafted[t], rng)
        r_drawn.append(r)
        emitted.append(token)
        if not accepted:
            return emitted, r_drawn
    # Step 4. All K accepted: sample the extra token x_{n+K+1} ~ q(x | x_1..x_{n+K}) = q[K].
    emitted.append(sample(q[K], rng))
    return emitted, r_drawn


def speculative_step(drafted, p, q, rng):
    """Steps 3 and 4 of Algorithm 2 as notebook 03's exercise writes them, and as a step of your
    own is passed to speculative_sampling(..., verify=step): the tokens token_by_token emits for
    these drafts (the same draws), its inputs checked first (step_inputs)."""
    return token_by_token(*step_inputs("speculative_step", drafted, p, q), rng)[0]


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


def block_verification(drafted, p, q, rng):
    """Steps 3 and 4 by block verification: which tokens the loop emits.

    The same arguments as token_by_token (drafted: K ids; p [K, n_vocab]; q [K + 1, n_vocab]; a
    numpy Generator). One uniform eta_i per position; the drafts kept are x~_1 .. x~_i for the
    LARGEST i with eta_i < h_i (a failing position does not end the block: a longer prefix can
    still pass), none if no position passes. Then one token: from q[K] when all K are kept, else
    from the weighted residual (w_i q_{i+1} - p_{i+1})+. Returns (emitted, eta_1 .. eta_K).
    """
    K = len(drafted)
    eta = rng.random(K)  # eta_1 .. eta_K ~ U[0, 1), all drawn first
    weights, keep = block_keep_probabilities(drafted, p, q)  # w_0 .. w_K and h_1 .. h_K
    n_kept = max((i for i in range(1, K + 1) if eta[i - 1] < keep[i - 1]), default=0)  # the largest i that passes
    kept = [int(x) for x in drafted[:n_kept]]  # x~_1 .. x~_{n_kept}
    if n_kept == K:  # every draft kept: the extra token from q_{K+1} = q[K]
        last = q[K]
    else:  # the token after the kept prefix, from the weighted residual of the next position
        last = rejection.weighted_residual(weights[n_kept], p[n_kept], q[n_kept])
    return kept + [sample(last, rng)], eta.tolist()


def block_step(drafted, p, q, rng):
    """Block verification as notebook 08's exercise writes it, with speculative_step's arguments and
    output (speculative_sampling(..., verify=block_step) runs it as a step of your own): the tokens
    block_verification emits (the same draws), its inputs checked first (step_inputs)."""
    return block_verification(*step_inputs("block_step", drafted, p, q), rng)[0]


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


# ---------------------------------------------------------------------------------------------
# A step other than the library's, as a loop runs it
# ---------------------------------------------------------------------------------------------

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
        return f"token id {echo(outside[0])} is outside the vocabulary (ids 0..{n_vocab - 1})"
    if list(tokens[:-1]) != list(drafted[: len(tokens) - 1]):
        j = next(i for i, (a, b) in enumerate(zip(tokens, drafted)) if a != b)  # the first token that is not a draft
        return (f"after the accepted drafts {list(tokens[:j])} comes {tokens[j]}, which is not x~_{j + 1} = {drafted[j]}, "
                f"then {list(tokens[j + 1:])} more: the loop ends with the first token that is not a draft")
    return None


def checked_step(step, n_vocab):
    """A learner's `step(drafted, p, q, rng)` as speculative_sampling runs it (`checked`): its
    output, the accepted drafts then exactly one token with ids in the vocabulary, handed back as
    a list of Python ints, with no draws to trace: the contract of the library's verifiers,
    (emitted, r)."""
    run = checked(step, lambda output, drafted, *_: step_problem(output, drafted, n_vocab), "speculative_sampling",
                  "drafts")
    return lambda drafted, p, q, rng: (list(token_ids(run(drafted, p, q, rng))), ())


def step_inputs(name, drafted, p, q):
    """What Steps 3-4 are handed, checked when a learner calls the library's step directly (the
    loop checks the same on every proposal, and makes q itself): K drafted ids, p [K, n_vocab]
    the distributions they were drawn from, each draft possible under its row, q [K + 1, n_vocab]
    distributions. Returns (drafted as ints, p, q as float64), or one readable PicoGPTError."""
    tokens = token_ids(drafted)
    if tokens is None:
        problem = f"the drafts {echo(drafted, 80)}"
    else:
        q, problem = distributions(q, (len(tokens) + 1, None))
    if not problem and any(not 0 <= x < q.shape[1] for x in tokens):
        problem = f"the drafts {echo(drafted, 80)}, outside q's vocabulary of {q.shape[1]} ids"
    if not problem:
        p, problem = distributions(p, (len(tokens), q.shape[1]), tokens)
    if problem:
        raise PicoGPTError(f"{name} was given {problem}; it takes the K drafted ids, p [K, n_vocab] (the "
                           "distributions they were drawn from, each draft possible under its row) and q "
                           "[K + 1, n_vocab], rows that are distributions")
    return list(tokens), p, q


# ---------------------------------------------------------------------------------------------
# A chain's draft (loop.Draft's contract), and the paper's: a smaller model
# ---------------------------------------------------------------------------------------------

class ChainDraft(Draft):
    """A draft for Algorithm 2 (speculative_sampling), with loop.Draft's defaults: propose(sequence,
    K, controls, rng) returns up to K token ids x~_1 .. x~_k and the rows p [k, n_vocab] they were
    sampled from, where row t is a distribution (finite, >= 0, summing to 1) under which x~_t is
    possible. Theorem 1 asks nothing else of p: the loop checks exactly this on every proposal
    (loop.checked_proposal)."""

    proposes = "chain"


class ModelDraft(ChainDraft):
    """The paper's draft: a smaller model p, sampled with its own KV cache (Step 1)."""

    def __init__(self, model):
        check_model(model, "draft", "or a draft of your own (loop.Draft, picogpt/drafts.py)")
        self.model, self.name, self.models = model, model.name, (model,)
        self.cache = None

    def start(self):
        self.cache = self.model.new_cache()

    def propose(self, sequence, K, controls, rng):
        return draft_tokens(self.model, self.cache, sequence[len(self.cache):], K, controls, rng)

    def keep(self, n, branch):
        # the draft never saw its own last draft x~_K, so its cache may already be shorter
        self.cache.truncate(min(n + len(branch), len(self.cache)))


# ---------------------------------------------------------------------------------------------
# Algorithm 2
# ---------------------------------------------------------------------------------------------

VERIFIERS = {"token": token_by_token, "block": block_verification}  # verify=...: (drafted, p, q, rng) -> (emitted, r)


def speculative_sampling(draft, target, ids, N, *, K=4, temperature=1.0, top_k=None, top_p=None,
                         seed=None, verify="token", keep_distributions=False, on_loop=None):
    """Algorithm 2: sample N tokens from `target` (q), with `draft` (p) proposing K per loop.

    `draft` is a model, or a draft that proposes a chain (loop.Draft; ChainDraft, picogpt/drafts.py).
    Sampling controls are applied to both p and q before Steps 3-4. One numpy Generator, made from
    `seed` (an int, None, or a Generator used as is), drives every random draw: same seed, same
    output. `verify` is Steps 3-4: the name of one of the library's (VERIFIERS: "token" is the
    paper's, token by token; "block" judges the K drafts together and keeps at least as many on
    average), or a step of your own, `step(drafted, p, q, rng) -> list[int]` (speculative_step's
    contract; notebook 03's exercise plugs the learner's function in here): it gets copies of its
    inputs, and what it returns is checked every loop (checked_step). The draft's `propose` gets a
    copy of the text. `keep_distributions=True` keeps p and q of every loop in the trace (for
    plots). `on_loop(trace)` is called after each loop (its time is not counted).

    Near the end of the context the lookahead shrinks so that the K drafts fit (it never falls
    below 1, since the prompt + N must fit).
    """
    check_model(target, "target")
    drafter = draft_for("speculative_sampling", "chain", draft, ModelDraft)
    prompt = validate_sampling_args(ids, N, (*drafter.models, target), K=K, temperature=temperature,
                                    top_k=top_k, top_p=top_p)
    controls = dict(temperature=temperature, top_k=top_k, top_p=top_p)
    rng = random_generator(seed)
    n_vocab, n_ctx = target.config.n_vocab, min(model.config.n_ctx for model in (*drafter.models, target))
    verifier = verifier_for(verify, VERIFIERS, partial(checked_step, n_vocab=n_vocab),
                            "step(drafted, p, q, rng) -> list[int] (speculative_step's contract)")
    record = LoopRecorder(on_loop)  # traces and timings go here
    drafter.start()
    target_cache = target.new_cache()
    sequence = list(prompt)  # x_1 .. x_n: the prompt and every token emitted so far
    record.start()

    while len(sequence) - len(prompt) < N:  # "while n < T"
        n = len(sequence)
        record.start_loop()

        # Step 1. Sample the draft autoregressively: x~_t ~ p(x | x_1..x_n, x~_1..x~_{t-1}).
        K_now = min(K, n_ctx - n)
        drafted, p_rows = checked_proposal(drafter.propose(list(sequence), K_now, controls, rng), K_now, n_vocab,
                                           drafter.name)
        record.lap("draft")

        # Step 2. In parallel (one call), the K + 1 target distributions
        #         q(x | x_1..x_n), q(x | x_1..x_n, x~_1), ..., q(x | x_1..x_n, x~_1..x~_K).
        q_rows = score(target, target_cache, sequence[len(target_cache):], drafted, controls)
        record.lap("score")

        # Steps 3 and 4 (the verifier: keep a prefix of the drafts, then resample or add the extra token).
        emitted, r = verifier(drafted, p_rows, q_rows, rng)
        n_accepted = len(emitted) - 1
        sequence += emitted

        # Roll both caches back to the kept tokens x_1 .. x_{n + n_accepted}. Neither model has
        # seen the new token yet: the next loop feeds each model exactly the tokens it is missing.
        target_cache.truncate(n + n_accepted)
        drafter.keep(n, range(n_accepted))
        record.end_loop(partial(LoopTrace.of, drafted, p_rows, q_rows, emitted, keep_distributions, r))

    return SpeculativeResult(tokens=sequence[len(prompt): len(prompt) + N], loops=record.loops,
                             seconds=record.seconds(), K=K)


@dataclass(frozen=True)
class Chain:
    """Algorithm 2 with K drafts a loop and a verifier (a name in VERIFIERS, or a step of your own),
    as one value: what a measurement runs (measure/, the bench, the course, the command line),
    beside tree.TreeShape for a token tree."""
    K: int
    verify: object = "token"

    @property
    def shape(self):
        """A chain is the token tree of shape (1, 1, ..., 1): one candidate a level, K levels."""
        return (1,) * self.K

    @property
    def name(self):
        verify = self.verify if isinstance(self.verify, str) else step_name(self.verify)
        return f"chain K = {self.K}" + ("" if verify == "token" else f", {verify} verification")

    def sample(self, draft, target, ids, N, **options):
        """speculative_sampling with this K and verifier (`options`: seed, sampling controls, on_loop)."""
        options = options_for(self, speculative_sampling, options, fixed=("K", "verify"))
        return speculative_sampling(draft, target, ids, N, K=self.K, verify=self.verify, **options)


# ---------------------------------------------------------------------------------------------
# What a run records: one trace per loop, and the time of each step
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class LoopTrace:
    """One loop of Algorithm 2, for plots and statistics."""
    drafted: tuple  # x~_1 .. x~_K, sampled from p
    p_drafted: tuple  # p_t(x~_t): the draft's probability of each drafted token
    q_drafted: tuple  # q_t(x~_t): the target's probability of each drafted token
    r: tuple  # the uniform draws of the library's verifier (empty when a step of your own ran)
    n_accepted: int  # drafted tokens kept (the first n_accepted)
    new_token: int  # resampled from (q - p)+ after a rejection (block: (w q - p)+), or the extra token from q_{K+1}
    resampled: bool  # True: new_token came from a residual; False: all K accepted, it is the extra
    t_draft_s: float  # K draft calls + sampling
    t_score_s: float  # the one target call + turning its logits into q
    t_decide_s: float  # the accept/reject steps and the cache roll-back
    p: np.ndarray = field(default=None, compare=False, repr=False)  # [K, n_vocab] if kept
    q: np.ndarray = field(default=None, compare=False, repr=False)  # [K + 1, n_vocab] if kept

    @classmethod
    def of(cls, drafted, p_rows, q_rows, emitted, keep_distributions, r, **times_s):
        """The trace of a loop that drafted `drafted` from p_rows, scored q_rows and emitted
        `emitted`; `r` the verifier's uniform draws, `times_s` its steps' (LoopRecorder.end_loop)."""
        return cls(drafted=tuple(int(x) for x in drafted),
                   p_drafted=tuple(float(p_rows[t, x]) for t, x in enumerate(drafted)),
                   q_drafted=tuple(float(q_rows[t, x]) for t, x in enumerate(drafted)),
                   r=tuple(r), n_accepted=len(emitted) - 1, new_token=int(emitted[-1]),
                   resampled=len(emitted) <= len(drafted), **times_s,
                   p=p_rows if keep_distributions else None, q=q_rows if keep_distributions else None)

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
        of alpha that goes into theory.expected_tokens_per_loop(alpha, K), under verify="token"
        (block verification keeps drafts that token-by-token verification would have rejected)."""
        decisions = sum(loop.decisions for loop in self.loops)
        return sum(self.accepted) / decisions if decisions else float("nan")

    @property
    def tokens_per_loop(self):
        """Mean tokens emitted per loop, i.e. per target call (before cutting to N)."""
        return float(np.mean([len(loop.tokens) for loop in self.loops]))

    @property
    def tokens_per_s(self):
        return len(self.tokens) / self.seconds if self.seconds else float("inf")
