"""Notebook 03's second exercise: write the loop around Steps 3-4, with both KV caches and their
roll-back, and its grader.

You write `my_speculative_sampling(draft, target, ids, N, K, rng, step) -> list of N ids`:
draft K tokens (speculative.draft_tokens), score them in one target call (speculative.score),
call `step` (Steps 3-4), append what it emits and roll both caches back to the kept tokens.
`check_speculative_loop` runs it beside the library's speculative_sampling with the same seeds
and returns a `Check` (grading.py): the same tokens, one target call per loop, both caches
rolled back to exactly what the kept tokens leave (the target's to n + n_accepted, the draft's to
min(n + n_accepted, what it has read)). Counts (loops, target calls, tokens) are judged before
the caches, so a loop cut short is not blamed on its roll-back; the rows the loop hands the step
are checked before the step runs, so a step is not blamed for its loop's rows.
"""

import numpy as np

from .. import speculative
from ..errors import PicoGPTError, shown
from ..model import ModelView
from ..speculative import token_ids
from .grading import Check, function_name, not_answered, raised


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


def rows_problem(drafted, p, q):
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
        problem = rows_problem(drafted, p, q)
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
    """A learner's step as speculative.checked runs it in `loop` (the library's, or the learner's
    own): its output judged, an exception named with the step and the loop; a list of Python ints."""
    run = speculative.checked(step, lambda output, drafted, *_: speculative.step_problem(output, drafted, n_vocab),
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
    runs checked (speculative.checked_step), in the library's loop and in theirs: a step that fails
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
