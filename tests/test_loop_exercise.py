"""Notebook 03's second exercise, the loop: the grader accepts a right loop, names each loop mistake
(counts before caches), and reports a learner's step that fails inside either loop, never raising."""

import numpy as np
import pytest
from helpers import random_gpt2
from test_step_exercise import learner_step

from picogpt.course.grading import Check
from picogpt.course.nb03_speculative_sampling import check_speculative_loop
from picogpt.sampling import distribution
from picogpt.speculative import draft_tokens, score


def score_per_position(target, cache, new, drafted, controls):
    """Step 2 done the slow way: one target call per position, K + 1 calls (or more) per loop."""
    rows = [target([token], cache)[-1] for token in new + drafted]  # [n_vocab] each
    return distribution(np.stack(rows[-(len(drafted) + 1):]), **controls)


def roll_back_draft_to(n, n_accepted, length):
    """Where a right loop rolls the draft's cache back to: it never read its own last draft."""
    return min(n + n_accepted, length)


def learner_loop(draft, target, ids, N, K, rng, step, roll_back_target=True, roll_back_draft=True, cut=True,
                 stop_after_one=False, one_call=True, fresh_target_cache=False, draft_to=roll_back_draft_to,
                 hand=lambda drafted, p, q: (drafted, p, q), append=False, with_prompt=False):
    draft_cache, target_cache = draft.new_cache(), target.new_cache()
    sequence = list(ids)
    while len(sequence) - len(ids) < N:
        n = len(sequence)
        if fresh_target_cache:  # right tokens, but the whole text is read again every loop
            target_cache = target.new_cache()
        drafted, p = draft_tokens(draft, draft_cache, sequence[len(draft_cache):], K, {}, rng)
        q = (score if one_call else score_per_position)(target, target_cache, sequence[len(target_cache):], drafted, {})
        emitted = step(*hand(drafted, p, q), rng)
        if append:
            sequence.append(emitted)
        else:
            sequence += emitted
        n_accepted = len(emitted) - 1
        if roll_back_target:
            target_cache.truncate(n + n_accepted)
        if roll_back_draft:
            draft_cache.truncate(draft_to(n, n_accepted, len(draft_cache)))
        if stop_after_one:
            break  # the scaffold's `break`, left in
    if with_prompt:
        return sequence[: len(ids) + N]
    return sequence[len(ids): len(ids) + N] if cut else sequence[len(ids):]


def scaffold(draft, target, ids, N, K, rng, step):
    """Notebook 03's scaffold, submitted as it is."""
    draft_cache, target_cache = draft.new_cache(), target.new_cache()
    sequence = list(ids)
    while len(sequence) - len(ids) < N:
        drafted, p = draft_tokens(draft, draft_cache, sequence[len(draft_cache):], K, {}, rng)
        q = score(target, target_cache, sequence[len(target_cache):], drafted, {})  # noqa: F841 (notebook 03's scaffold)
        ...
        break
    return sequence[len(ids): len(ids) + N]


@pytest.fixture(scope="module")
def models():
    return random_gpt2(1), random_gpt2(2)


def test_a_correct_loop_is_accepted(models):
    check = check_speculative_loop(learner_loop, *models, [3, 1, 4])
    assert isinstance(check, Check) and check.ok, check
    assert check_speculative_loop(learner_loop, *models, [3, 1, 4], step=learner_step).ok


@pytest.mark.parametrize("mistake, says", [
    (dict(roll_back_target=False), "target's cache held"),
    (dict(roll_back_draft=False), "draft's cache held"),
    (dict(cut=False), "cut the output to N"),
    (dict(stop_after_one=True), "stopped early"),
    (dict(one_call=False), "target calls for"),
    (dict(one_call=False, roll_back_target=False), "target calls for"),
    (dict(fresh_target_cache=True, roll_back_target=False), "re-reads the whole text"),
    (dict(draft_to=lambda n, n_accepted, length: min(n + n_accepted - 1, length)), "draft's cache held"),  # one short
    (dict(draft_to=lambda n, n_accepted, length: n), "draft's cache held"),  # the accepted drafts forgotten
])
def test_loop_mistakes_are_named(models, mistake, says):
    check = check_speculative_loop(lambda *a: learner_loop(*a, **mistake), *models, [3, 1, 4])
    message = str(check)
    assert check.ok is False and says in message, message
    assert "roll" not in message or "cache held" in says or "whole text" in says, message  # counts come first


def test_a_draft_cache_rolled_back_too_far_is_told_what_a_right_roll_back_leaves(models):
    """The tokens are right (the next loop feeds the draft what its cache lacks), the draft reads
    again what it had read: the grader holds the draft's cache to exactly min(n + n_accepted, what
    it has read), as it holds the target's to n + n_accepted."""
    check = check_speculative_loop(lambda *a: learner_loop(*a, draft_to=lambda n, n_accepted, length: n), *models,
                                   [3, 1, 4])
    message = str(check)
    assert check.ok is False and "rolled back too far" in message, message
    assert "draft_cache.truncate(min(n + n_accepted, len(draft_cache)))" in message, message
    assert "the draft's to min(n + n_accepted, len(draft_cache))" in str(check_speculative_loop(learner_loop, *models,
                                                                                                 [3, 1, 4]))


@pytest.mark.parametrize("mistake, says", [
    (dict(hand=lambda drafted, p, q: (drafted, p, q[:-1])), "q with 1 row(s) for K = 1 drafts: q needs K + 1"),
    (dict(draft_to=lambda n, n_accepted, length: n + n_accepted), "min(len(draft_cache), n + n_accepted)"),
    (dict(append=True), "sequence += emitted"),
    (dict(with_prompt=True), "you returned the prompt too"),
])
def test_loop_slips_are_told_where_they_are_and_what_to_write(models, mistake, says):
    check = check_speculative_loop(lambda *a: learner_loop(*a, **mistake), *models, [3, 1, 4])
    message = str(check)
    assert check.ok is False and says in message and "\n" not in message, message


def test_the_librarys_step_failing_in_the_learners_loop_is_named_as_the_librarys():
    """Rows of the right number that are not distributions (here the last row of q negated) make the
    library's step fail inside the learner's loop: the message says whose step it was and what to
    hand it."""
    draft, target = random_gpt2(1), random_gpt2(2)

    def my_speculative_sampling(d, t, ids, N, K, rng, step):
        return learner_loop(d, t, ids, N, K, rng, step, hand=lambda drafted, p, q: (drafted, p, np.vstack([p, -q[-1:]])))

    message = str(check_speculative_loop(my_speculative_sampling, draft, target, [3, 1, 4]))
    assert "speculative_step was given rows that are not distributions" in message, message
    assert "it takes the K drafted ids, p [K, n_vocab]" in message and "\n" not in message, message


def test_the_scaffold_as_given_is_told_what_is_missing(models):
    check = check_speculative_loop(scaffold, *models, [3, 1, 4])
    message = str(check)
    assert check.ok is False and "never called step" in message and "0 loops" not in message, message


def wrong_step(drafted, p, q, rng):
    return [drafted[len(p[0])]]  # an index past the drafts: an IndexError in every loop


@pytest.mark.parametrize("loop", [learner_loop, scaffold])
def test_a_wrong_step_is_reported_with_the_loop_it_failed_in_never_raised(models, loop):
    check = check_speculative_loop(loop, *models, [3, 1, 4], step=wrong_step)
    message = str(check)
    assert check.ok is False and "step=wrong_step raised IndexError inside speculative_sampling" in message, message
    assert "\n" not in message


def test_a_step_that_fails_only_in_the_learners_loop_is_named_with_that_loop(models):
    calls = []

    def picky_step(drafted, p, q, rng):  # right in the library's loop, broken on its second run
        calls.append(1)
        if len(calls) > 3:
            raise ValueError("not today")
        return learner_step(drafted, p, q, rng)

    message = str(check_speculative_loop(learner_loop, *models, [3, 1, 4], step=picky_step, N=4, Ks=(3,), seeds=(0,)))
    assert "step=picky_step raised ValueError inside your loop, learner_loop" in message, message


def test_a_loop_that_raises_is_named(models):
    def my_speculative_sampling(draft, target, ids, N, K, rng, step):
        raise KeyError("oops")

    message = str(check_speculative_loop(my_speculative_sampling, *models, [3, 1, 4]))
    assert "my_speculative_sampling raised KeyError inside check_speculative_loop" in message, message
