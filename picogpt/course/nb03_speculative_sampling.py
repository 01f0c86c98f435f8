"""Notebook 03 (speculative sampling): what only it uses. Its questions (a number to work out, and
a simulation of tokens per loop); its main exercise, Steps 3-4 of Algorithm 2, graded by the
course's one grader (grading.check_sampler) against Algorithm 2's rule and its classic mistakes
(chain_step.py, which notebooks 04, 06 and 08 share); and its second exercise, the loop around the
step, with both KV caches and their roll-back.

You write `speculative_step(drafted, p, q, rng) -> list[int]`, the function
`picogpt.speculative.speculative_sampling` calls once per loop (its `verify=` argument runs yours;
the contract is chain_step.py's): the accepted drafts, then one token resampled from (q - p)+ at
the first rejection, or the extra ("bonus") token from q[K] when all K pass.

Then `my_speculative_sampling(draft, target, ids, N, K, rng, step) -> list of N ids`: draft K
tokens (speculative.draft_tokens), score them in one target call (speculative.score), call `step`,
append what it emits and roll both caches back to the kept tokens. `check_speculative_loop` runs
it beside the library's speculative_sampling with the same seeds: the same tokens, one target call
per loop, both caches rolled back to exactly what the kept tokens leave (the target's to
n + n_accepted, the draft's to min(n + n_accepted, what it has read)). Counts (loops, target calls,
tokens) are judged before the caches, so a loop cut short is not blamed on its roll-back; the rows
the loop hands the step are checked before the step runs, so a step is not blamed for its loop's rows.
"""

import inspect

import numpy as np

from .. import speculative, theory
from ..errors import PicoGPTError, shown
from ..loop import checked, token_ids
from ..model import ModelView
from .chain_step import ALGORITHM_2, MISTAKES, NO_DRAFTS, StepCase, chain_exercise, rows, shaped
from .grading import TRIALS, Check, check_number, check_sampler, function_name, not_answered, raised

# ---------------------------------------------------------------------------------------------
# The questions: a number to work out, and tokens per loop by simulation
# ---------------------------------------------------------------------------------------------

def check_tokens_emitted(answer, K=4, n_accepted=2):
    """A loop drafts K = 4 tokens; the first n_accepted = 2 are accepted, the next is rejected.
    How many tokens does the loop emit?"""
    expected = n_accepted + 1
    how = ("walk through step 3 of Algorithm 2: what happens to the accepted drafts, what comes "
           "out at the first rejection, and are the drafts after it ever judged?")
    solution = (f"the {n_accepted} accepted drafts, then one token resampled from (q − p)+ at the "
                f"first rejection: {expected}. The {K - n_accepted - 1} draft(s) after the rejection are "
                "thrown away unjudged (they were drafted after a token that is now gone).")
    mistakes = [(n_accepted, "a rejection still emits a token: the one resampled from (q − p)+"),
                (K - 1, "after the first rejection the loop ends: the later drafts are never judged"),
                (K + 1, "K + 1 tokens come out only when all K drafts are accepted")]
    return check_number(answer, expected, how, solution, mistakes, rel_tol=1e-9)


def check_accept_probability(answer, p_x=0.5, q_x=0.2):
    """The draft gave its token x̃ probability p(x̃) = 0.5, the target q(x̃) = 0.2. With what
    probability is x̃ accepted?"""
    expected = min(1.0, q_x / p_x)
    how = "Algorithm 2 keeps x̃ when r < min(1, q(x̃)/p(x̃)), with r uniform on [0, 1)."
    solution = (f"min(1, q/p) = min(1, {q_x}/{p_x}) = {expected:g}: the draft was overconfident in "
                f"x̃, so it is kept only {expected:.0%} of the time. Had q(x̃) >= p(x̃), it would always be kept.")
    mistakes = [(p_x / q_x, "that is p/q; the test is min(1, q/p)"),
                (1.0, "q(x̃) < p(x̃) here, so the ratio q/p is below 1"),
                (q_x, "that is q(x̃) alone; divide by p(x̃), the chance x̃ was drafted at all")]
    return check_number(answer, expected, how, solution, mistakes)


def check_expected_tokens_per_loop(answer, alpha=0.8, K=4):
    """Each draft is accepted independently with probability alpha = 0.8. How many tokens does a
    loop with K = 4 emit on average?"""
    expected = float(theory.expected_tokens_per_loop(alpha, K))
    how = ("the loop emits n accepted drafts plus one more token. P(at least the first i drafts "
           "accepted) = alpha^i; add up the chances that token 1, 2, ..., K + 1 comes out.")
    solution = (f"1 + alpha + alpha² + ... + alpha^K = (1 − alpha^(K+1)) / (1 − alpha) = {expected:.4f} "
                "tokens per target call, where autoregressive sampling gets 1 (Leviathan et al.'s Eq. 1, under "
                "their assumption that the acceptances are independent with the same alpha).")
    mistakes = [(alpha * K, "that counts the accepted drafts only; every loop also emits one more token"),
                (1 + alpha * K, "acceptance stops at the first rejection: draft 2 counts only if draft 1 was accepted"),
                (alpha * (K + 1), "acceptance stops at the first rejection, and the last token always comes out")]
    return check_number(answer, expected, how, solution, mistakes)


def check_tokens_per_loop_simulation(simulate, cases=((0.8, 4), (0.5, 2), (0.95, 8)), n_loops=20_000, seed=0):
    """Does simulate(alpha, K, n_loops, rng) -> [n_loops] tokens emitted per loop follow the model
    'each draft accepted independently with probability alpha'? Its histogram is compared with
    alpha^(n-1) (1 - alpha) for n <= K, alpha^K for n = K + 1 by a chi-square test (p > 1e-4)."""
    from .chi_square import chi_square_test
    from .panels import tokens_per_loop_pmf
    if not_answered(simulate) or not callable(simulate):
        return Check(False, "write simulate(alpha, K, n_loops, rng), then pass the function itself.")
    for i, (alpha, K) in enumerate(cases):
        try:
            counts = np.asarray(simulate(alpha, K, n_loops, np.random.default_rng([seed, i])))
        except Exception as e:  # the student's code: report it, don't crash the notebook
            return Check(False, f"simulate({alpha}, {K}, ...) raised {type(e).__name__}: {e}")
        if counts.shape != (n_loops,):
            return Check(False, f"simulate({alpha}, {K}, {n_loops}, rng) returned shape {counts.shape}; return one "
                                "number per loop, the tokens it emitted.")
        if counts.min() < 1 or counts.max() > K + 1:
            return Check(False, f"with K = {K} a loop emits 1 to {K + 1} tokens, yours gave {counts.min()} to {counts.max()}: "
                                "the accepted drafts plus one more token, always.")
        histogram = np.bincount(counts.astype(int), minlength=K + 2)[1:]
        _, _, p_value = chi_square_test(histogram, tokens_per_loop_pmf(alpha, K))
        if p_value < 1e-4:
            mean = float(counts.mean())
            return Check(False, f"alpha = {alpha}, K = {K}: mean {mean:.3f} tokens per loop, expected "
                                f"{float(theory.expected_tokens_per_loop(alpha, K)):.3f} (chi² p = {p_value:.2g}). Draw one "
                                "uniform per draft, stop at the first rejection, and count the extra token.")
    return Check(True, "your simulated loops match (1 − alpha^(K+1)) / (1 − alpha) tokens per loop, "
                       "and the whole distribution alpha^(n−1)(1 − alpha), alpha^K.")


# ---------------------------------------------------------------------------------------------
# The main exercise: Steps 3-4 of Algorithm 2
# ---------------------------------------------------------------------------------------------

# Mistakes that show in one output or one exception, named the moment they happen
EXTRA_AFTER_REJECTION = ("the loop emitted a token after the one resampled at a rejection (for drafts {drafts} "
                         "it returned {output}): after a rejection the loop emits the resampled token and stops; "
                         "the extra token from q[K] comes only when all K drafts are accepted")
JUDGED_ON = ("for drafts {drafts} it returned {output}: after the first rejection it went on judging the later "
             "drafts. The loop stops at the first rejection, since the later drafts were conditioned on a token "
             "that is now gone")

NAN_AFTER_NO_REJECTION = (
    "A NaN comes from normalising max(0, q − p) when its sum is 0, on a row where p = q: Algorithm 2 never rejects "
    "there (min(1, q/p) = 1 for every token, and r < 1), so your step rejected a draft it must keep.")
NAN_GUESS = ("Check the comparison: keep x̃_t when r < min(1, q/p); a classic mistake, the comparison inverted, "
             "r > min(1, q/p), rejects the drafts the target likes.")

# ---------------------------------------------------------------------------------------------
# The cases and the grader
# ---------------------------------------------------------------------------------------------

def grading_cases():
    """Small cases where every classic mistake changes the output distribution: K = 1, 2, 3, a
    token with p(x) = 0 (never drafted) and one with q(x) = 0 (a draft the target refuses),
    a row with p = q (never rejected), two drafts in a row each kept about half the time (where
    one r for the whole loop shows); rows as the loop makes them at temperature 0.7 with top-p
    0.9 (zeros in both), and for a greedy target (temperature 0: q a point mass) with a draft at
    temperature 1.5; K = 4, all four kept more than half the time (a slip that only shows
    from the fourth draft on); and K = 0, which the loop sends when a draft proposes nothing."""
    return (
        StepCase(p=rows([0.6, 0.3, 0.1]), q=rows([0.2, 0.5, 0.3], [0.1, 0.2, 0.7])),
        StepCase(p=rows([0.6, 0.3, 0.1], [0.5, 0.1, 0.4]), q=rows([0.3, 0.3, 0.4], [0.25, 0.45, 0.3], [0.7, 0.2, 0.1])),
        StepCase(p=rows([0.5, 0.5, 0.0], [0.3, 0.3, 0.4], [0.6, 0.2, 0.2]),
                 q=rows([0.2, 0.3, 0.5], [0.3, 0.3, 0.4], [0.0, 0.5, 0.5], [0.4, 0.4, 0.2])),
        StepCase(p=shaped([[2.0, 1.2, 0.9, -1.0], [0.2, 1.5, -0.5, 1.1]], temperature=0.7, top_p=0.9),
                 q=shaped([[1.0, 2.0, -1.0, 0.6], [1.5, 0.3, 1.0, -2.0], [0.0, 1.0, 1.8, 0.5]], temperature=0.7, top_p=0.9),
                 label="temperature 0.7 with top-p 0.9"),
        StepCase(p=shaped([[0.5, 1.0, 0.0], [1.0, 0.2, 0.4]], temperature=1.5),
                 q=shaped([[0.0, 2.0, 1.0], [1.0, 0.0, 0.5], [0.3, 0.2, 0.9]], temperature=0),
                 label="a greedy target (temperature 0) with a draft at temperature 1.5"),
        StepCase(p=rows([0.5, 0.3, 0.2], [0.2, 0.5, 0.3], [0.3, 0.3, 0.4], [0.4, 0.4, 0.2]),
                 q=rows([0.4, 0.4, 0.2], [0.3, 0.4, 0.3], [0.2, 0.4, 0.4], [0.5, 0.2, 0.3], [0.2, 0.2, 0.6])),
        StepCase(p=np.zeros((0, 3)), q=rows([0.2, 0.5, 0.3]), label=NO_DRAFTS),
    )


ALGORITHM_2_EXERCISE = chain_exercise(
    "Algorithm 2", ALGORITHM_2, MISTAKES, grading_cases(), call="check_speculative_step(my_speculative_step)",
    walk_through="Walk through Steps 3-4: r ~ U[0, 1) per draft, accept if r < min(1, q/p), else one token from "
                 "(q − p)+ and stop; all accepted: one more from q[K].",
    after_a_non_draft={"extra": EXTRA_AFTER_REJECTION, "judged on": JUDGED_ON},
    nan_hint=NAN_AFTER_NO_REJECTION, nan_guess=NAN_GUESS)


def check_speculative_step(fn, trials=TRIALS, seed=0):
    """Grade a learner's speculative_step(drafted, p, q, rng) -> list[int] by its output distribution
    (grading.check_sampler); returns a Check. Each classic mistake moves the law of some case by a
    total-variation distance of 0.08 or more (tests/test_step_exercise.py checks it), far beyond the
    noise of 2,000 trials."""
    return check_sampler(fn, ALGORITHM_2_EXERCISE, trials, seed)


def solution():
    """The library's own Steps 3-4: print it when you are stuck (it is what speculative_sampling runs)."""
    print(inspect.getsource(speculative.token_by_token))


# ---------------------------------------------------------------------------------------------
# The second exercise: the loop around the step, with both KV caches and their roll-back
# ---------------------------------------------------------------------------------------------

class Recording(ModelView):
    """Wraps a model: records, for every call, how many tokens its cache held and how many ids came in."""

    def __init__(self, model, role):
        super().__init__(model)
        self.calls, self.role = [], role

    def __call__(self, ids, cache):
        if any(isinstance(x, (list, tuple, np.ndarray)) for x in ids):
            raise PicoGPTError(f"your loop fed the {self.role} a list inside its list of ids ({shown(repr(ids), 80)}): "
                               "add what step emits with sequence += emitted (or sequence.extend(emitted)); "
                               "sequence.append(emitted) puts the whole list in as one item")
        self.calls.append((len(cache), len(ids)))
        return self.model(ids, cache)


def recording_step(step, log, failed):
    """step, also logging what it emitted in each loop, and in `failed` the error it stopped with."""
    def logged(drafted, p, q, rng):
        try:
            emitted = step(drafted, p, q, rng)
        except PicoGPTError as error:  # a learner's step, checked: say so, whatever the loop around it does
            failed.append(error)
            raise
        log.append(list(emitted))
        return emitted
    return logged


def row_counts_problem(drafted, p, q):
    """Why (drafted, p, q) are not what the loop must hand the step (a sentence), or None: K drafts,
    p [K, n_vocab] as draft_tokens returns it, q [K + 1, n_vocab] as score returns it."""
    K, p_rows, q_rows = len(drafted), len(p), len(q)
    if p_rows != K:
        return f"p with {p_rows} row(s) for K = {K} drafts: p needs one per draft"
    if q_rows != K + 1:
        return f"q with {q_rows} row(s) for K = {K} drafts: q needs K + 1, q[K] giving the extra token"
    return None


AS_RETURNED = "hand it drafted, p and q as draft_tokens and score return them"


def handed_by_your_loop(step, library):
    """`step` as the learner's loop calls it: the rows it is handed checked first and, for the
    library's own step (`library`), an exception it raises said to be the library's step's. Either
    is the loop's doing, and stops it with one PicoGPTError."""
    def run(drafted, p, q, rng):
        problem = row_counts_problem(drafted, p, q)
        if problem:
            raise PicoGPTError(f"your loop handed the step {problem}; {AS_RETURNED}")
        if not library:
            return step(drafted, p, q, rng)
        try:
            return step(drafted, p, q, rng)
        except Exception as error:  # the library's step is right: what the learner's loop handed it is not
            raise PicoGPTError(f"the library's speculative_step raised {type(error).__name__} inside your loop: "
                               f"{shown(error, 100)}; it is right, so {AS_RETURNED}") from error
    return run


def checked_in(step, loop, n_vocab):
    """A learner's step as loop.checked runs it in `loop` (the library's, or the learner's
    own): its output judged, an exception named with the step and the loop; a list of Python ints."""
    run = checked(step, lambda output, drafted, *_: speculative.step_problem(output, drafted, n_vocab),
                              loop, "drafts", "check_speculative_step")
    return lambda drafted, p, q, rng: list(token_ids(run(drafted, p, q, rng)))


def cache_problem(draft, target, emitted_per_loop, n_prompt, K):
    """Compare the cache lengths seen at each loop's first draft call and its target call with
    what a correct roll-back leaves (the target's: n + accepted drafts; the draft's: as many, or
    all it has read if fewer); say which cache was not rolled back, or rolled back too far."""
    n = n_prompt
    target_calls, draft_calls = target.calls, draft.calls[::K]  # K draft calls per loop
    for loop, emitted in enumerate(emitted_per_loop[:-1]):
        n_next = n + len(emitted)
        kept = n_next - 1  # x_1 .. x_{n + n_accepted}: neither model has seen the new token
        last = draft.calls[(loop + 1) * K - 1] if (loop + 1) * K <= len(draft.calls) else None
        read = kept if last is None else min(kept, sum(last))  # the draft never reads its own last draft
        for name, calls in (("target", target_calls), ("draft", draft_calls)):
            if loop + 1 < len(calls) and calls[loop + 1][0] == 0 < kept:
                return (f"the {name}'s cache was empty at loop {loop + 2}'s first {name} call, which then read all "
                        f"{calls[loop + 1][1]} tokens again: the tokens are right, but every loop re-reads the whole "
                        f"text. Make each cache once, before the while loop, and roll it back to the kept tokens "
                        f"after each loop ({name}_cache.truncate(...))")
        if loop + 1 < len(target_calls) and target_calls[loop + 1][0] != kept:
            return (f"after loop {loop + 1} the target's cache held {target_calls[loop + 1][0]} tokens, expected "
                    f"{kept} (the {n} before the loop + {len(emitted) - 1} accepted drafts): roll it back with "
                    "target_cache.truncate(n + n_accepted)")
        if loop + 1 < len(draft_calls) and draft_calls[loop + 1][0] > kept:
            return (f"after loop {loop + 1} the draft's cache held {draft_calls[loop + 1][0]} tokens, more than the "
                    f"{kept} kept: roll it back too, draft_cache.truncate(min(n + n_accepted, len(draft_cache)))")
        if loop + 1 < len(draft_calls) and draft_calls[loop + 1][0] < read:
            why = (f"the {n} before the loop + {len(emitted) - 1} accepted drafts" if read == kept else
                   f"all it had read: it never reads its own last draft, so not all {kept} kept")
            return (f"after loop {loop + 1} the draft's cache held {draft_calls[loop + 1][0]} tokens, expected {read} "
                    f"({why}): rolled back too far, the draft reads again tokens it had read already. Roll it back "
                    "with draft_cache.truncate(min(n + n_accepted, len(draft_cache)))")
        n = n_next
    return None


TRUNCATED_PAST = (". A cache cannot be truncated past its length. The target's holds n + K tokens after the scoring "
                  "call: truncate it to n + n_accepted (n_accepted = len(emitted) − 1). The draft never reads its own "
                  "last draft x̃_K, so when all K are accepted its cache holds one token less than n + n_accepted: "
                  "draft_cache.truncate(min(len(draft_cache), n + n_accepted)).")


def count_problem(target_calls, loops, got, N, raised, ids=()):
    """The counts first: loops run, target calls per loop, tokens returned. A message, or None."""
    if loops == 0 and not raised:
        return ("your loop never called step: Steps 3-4 are missing (the scaffold as given?). Call "
                "emitted = step(drafted, p, q, rng), append what it emits, roll both caches back, and "
                "delete the `break`")
    if target_calls not in (loops, loops + raised):  # a loop that raised may have scored already
        return (f"{target_calls} target calls for {loops} loops; score all K + 1 positions in one call per loop "
                "(score(target, target_cache, ...)), not one call per position")
    if raised:
        return None
    tokens = token_ids(got)
    if tokens is None:
        return f"your loop returned {shown(repr(got), 200)}; return the list of the N generated token ids"
    if len(tokens) < N:
        return (f"your loop returned {len(tokens)} tokens, N = {N} were asked: it stopped early. The while loop "
                "must run until N tokens are out (a `break` left in?)")
    if len(tokens) == len(ids) + N and list(tokens[: len(ids)]) == list(ids):
        return (f"{len(tokens)} tokens, expected N = {N}: you returned the prompt too, its {len(ids)} tokens then the "
                "N new ones; return the new ones only, sequence[len(ids): len(ids) + N]")
    if len(tokens) > N:
        return (f"{len(tokens)} tokens, expected N = {N}: the last loop may emit more than needed, cut the "
                "output to N")
    return None


def check_speculative_loop(fn, draft, target, ids, step=None, N=10, Ks=(1, 3), seeds=(0, 1)):
    """Grade a learner's my_speculative_sampling(draft, target, ids, N, K, rng, step) -> list of N ids:
    for each K and seed, the same tokens as speculative_sampling(..., seed=seed, verify=step), one
    target call per loop, and both caches rolled back to the kept tokens. A `step` of the learner's
    runs checked (speculative.checked_step, through loop.checked), in the library's loop and in theirs: a step that fails
    is reported with the loop it failed in. Returns a Check."""
    if not_answered(fn) or not callable(fn):
        return Check(False, "pass your function itself: check_speculative_loop(my_speculative_sampling, draft, target, ids).")
    if step is not None and not callable(step):
        return Check(False, f"step={shown(repr(step), 60)}: pass a step function (yours, once "
                            "check_speculative_step accepts it), or leave step out for the library's.")
    loop_name, n_vocab, learners = function_name(fn, "your loop"), target.config.n_vocab, step
    step = speculative.speculative_step if learners is None else checked_in(learners, "speculative_sampling", n_vocab)
    yours = "your loop" if loop_name == "your loop" else f"your loop, {loop_name}"  # a lambda has no name
    in_yours = step if learners is None else checked_in(learners, yours, n_vocab)
    for K in Ks:
        for seed in seeds:
            where = f"K = {K}, seed {seed}"
            try:
                expected = speculative.speculative_sampling(draft, target, ids, N, K=K, seed=seed, verify=step)
            except PicoGPTError as error:  # the learner's step, run by the library's loop
                return Check(False, f"{where}: the step you passed fails in the library's own loop before yours is "
                                    f"compared with it: {error}")
            d, t, log, failed = Recording(draft, "draft"), Recording(target, "target"), [], []
            handed = handed_by_your_loop(recording_step(in_yours, log, failed), library=learners is None)
            try:
                got, error = fn(d, t, list(ids), N, K, np.random.default_rng(seed), handed), None
            except Exception as e:  # the learner's code: report it, don't crash the notebook
                got, error = None, e
            if failed:
                return Check(False, f"{where}: {failed[0]}")
            problem = count_problem(len(t.calls), len(log), got, N, raised=error is not None, ids=ids)
            if problem:
                return Check(False, f"{where}: {problem}.")
            problem = cache_problem(d, t, log + [[]], len(ids), K)  # the loop that raised counts too
            if problem:
                return Check(False, f"{where}: {problem}.")
            if error is not None:
                hint = TRUNCATED_PAST if "cannot truncate a cache of" in str(error) else ""
                return Check(False, f"{where}: {raised(fn, error, 'inside check_speculative_loop', 'your loop')}{hint}")
            got = list(token_ids(got))
            if got != expected.tokens:
                first = next(i for i, (a, b) in enumerate(zip(got, expected.tokens)) if a != b)
                return Check(False, f"{where}: token {first} differs from speculative_sampling's. Same "
                                    "seed, same draws: draft K tokens (draft_tokens), score once (score), call step, "
                                    "append what it emits, roll back both caches, in that order.")
    return Check(True, f"for K in {list(Ks)} and seeds {list(seeds)} your loop writes exactly what "
                       "speculative_sampling writes, with one target call per loop and both caches rolled back to "
                       "exactly the kept tokens (the draft's to min(n + n_accepted, len(draft_cache))).")
