"""The speculative-step exercise: the grader accepts a correct step written another way, refuses
each classic mistake by name, and the learner's step runs inside the real loop."""

import numpy as np
import pytest

from helpers import random_gpt2
from picogpt import speculative_sampling
from picogpt.course import step_exercise
from picogpt.course.step_exercise import check_speculative_step, checked
from picogpt.errors import PicoGPTError
from picogpt.speculative import speculative_step

# ---- learner-style implementations, written independently of the library ---------------------


def positive_part(f, normalise=True):
    f = np.maximum(f, 0.0)
    if not normalise:
        return f
    return f / f.sum() if f.sum() > 0 else None


def draw(probs, rng, sampler):
    """One token from probs the ways a learner writes it: rng.choice, or a hand-written inverse
    CDF whose fallback (when u is beyond the last cumulative sum) differs."""
    if sampler == "choice":
        return int(rng.choice(len(probs), p=probs))
    u, cdf = rng.random(), np.cumsum(probs)
    if sampler == "first":  # np.argmax of an all-False array is 0
        return int(np.argmax(cdf > u))
    index = int(np.searchsorted(cdf, u, side="right"))
    return min(index, len(probs) - 1) if sampler in ("last", "cdf") else index  # "outside": no clip


def learner_step(drafted, p, q, rng, *, ratio="q/p", residual="q-p", normalise=True, sampler="choice",
                 bonus_row=-1, bonus=True, stop_at_rejection=True, one_r=False, draw_r=True,
                 bonus_after_rejection=False, uniforms_first=False, compare="<", returns=list):
    """A correct step by default (rng.choice, a different order of draws from the library's);
    each keyword makes one classic mistake, or one harmless change."""
    K, out, rejected = len(drafted), [], False
    uniforms = rng.random(K) if uniforms_first else None
    shared_r = rng.uniform() if one_r else None
    for t, x in enumerate(drafted):
        accept = {"q/p": min(1, q[t][x] / p[t][x]), "q": q[t][x], "p/q": min(1, p[t][x] / q[t][x]) if q[t][x] else 1.0,
                  "always": 1.0}[ratio]
        if draw_r:
            r = uniforms[t] if uniforms_first else shared_r if one_r else rng.uniform()
            accepted = r <= accept if compare == "<=" else r < accept
        else:
            accepted = True  # no test at all
        if accepted:
            out.append(x)
            continue
        rejected = True
        rest = {"q-p": positive_part(q[t] - p[t], normalise), "p-q": positive_part(p[t] - q[t]), "q": q[t], "p": p[t],
                "q-p raw": q[t] - p[t]}[residual]
        out.append(draw(q[t] if rest is None else rest, rng, sampler))
        if stop_at_rejection:
            break
    if rejected:
        if bonus_after_rejection:
            out.append(draw(q[len(out)], rng, sampler))  # the "extra" token, wrongly, after a rejection
        return returns(out)
    return returns(out + ([draw(q[bonus_row], rng, sampler)] if bonus else []))


MISTAKES = {  # the grader's name -> how the learner made it
    "resampling from q": dict(residual="q"),
    "resampling from p": dict(residual="p"),
    "the residual reversed, (p − q)+": dict(residual="p-q"),
    "the residual not normalised (its missing mass on the first token)": dict(normalise=False, sampler="first"),
    "the residual not normalised (its missing mass on the last token)": dict(normalise=False, sampler="last"),
    "no bonus token": dict(bonus=False),
    "the bonus token from the wrong row": dict(bonus_row=-2),
    "accepting with probability q(x̃)": dict(ratio="q"),
    "accepting with probability min(1, p/q)": dict(ratio="p/q"),
    "accepting every draft": dict(ratio="always"),
    "accepting every draft ": dict(draw_r=False),  # without even drawing r (the space keeps the key apart)
    "one r for the whole loop": dict(one_r=True),
}

NAMED_AT_ONCE = {  # mistakes named from one output or one exception: the words the message must hold
    "unnormalised residual into rng.choice": (dict(normalise=False), "the residual not normalised"),
    "unnormalised residual, inverse CDF past the vocabulary": (dict(normalise=False, sampler="outside"),
                                                               "the residual not normalised"),
    "q − p without max(0, ·)": (dict(residual="q-p raw"), "max(0, q − p)"),
    "an extra token after a rejection": (dict(bonus_after_rejection=True), "after a rejection the loop emits the resampled token and stops"),
    "judging drafts after the first rejection": (dict(stop_at_rejection=False), "went on judging the later drafts"),
}

HARMLESS = {  # correct steps written differently: all must pass
    "all uniforms drawn first": dict(uniforms_first=True),
    "<= instead of <": dict(compare="<="),
    "inverse-CDF sampling": dict(sampler="cdf"),
    "a tuple": dict(returns=tuple),
    "NumPy ints": dict(returns=lambda out: [np.int64(x) for x in out]),
    "all of these at once": dict(uniforms_first=True, compare="<=", sampler="cdf",
                                 returns=lambda out: tuple(np.int32(x) for x in out)),
}


def graded(step, capsys):
    ok = check_speculative_step(step)
    return ok, capsys.readouterr().out


def test_a_correct_step_written_differently_is_accepted(capsys):
    ok, message = graded(learner_step, capsys)
    assert ok is True and message.startswith("✔ right"), message


@pytest.mark.parametrize("name", HARMLESS)
def test_harmless_variants_of_a_correct_step_pass(name, capsys):
    ok, message = graded(lambda d, p, q, rng: learner_step(d, p, q, rng, **HARMLESS[name]), capsys)
    assert ok is True, message


def test_the_librarys_step_is_accepted(capsys):
    ok, message = graded(speculative_step, capsys)
    assert ok is True, message


@pytest.mark.parametrize("name", MISTAKES)
def test_each_classic_mistake_is_refused_by_name(name, capsys):
    ok, message = graded(lambda d, p, q, rng: learner_step(d, p, q, rng, **MISTAKES[name]), capsys)
    assert ok is False and f"classic mistake, {name.strip()} (" in message, message


@pytest.mark.parametrize("name", NAMED_AT_ONCE)
def test_mistakes_that_show_in_one_output_are_named(name, capsys):
    kwargs, says = NAMED_AT_ONCE[name]
    ok, message = graded(lambda d, p, q, rng: learner_step(d, p, q, rng, **kwargs), capsys)
    assert ok is False and says in message, message
    assert "Judging" not in message or name.startswith("judging"), message


def test_the_grader_names_what_it_cannot_use(capsys):
    assert graded(None, capsys)[1].startswith("✘ not yet: write your step function")
    ok, message = graded(lambda d, p, q, rng: np.array(d), capsys)
    assert not ok and "list of token ids" in message
    ok, message = graded(lambda d, p, q, rng: 1 / 0, capsys)
    assert not ok and "ZeroDivisionError" in message
    ok, message = graded(lambda d, p, q, rng: learner_step(d, p, q, np.random.default_rng()), capsys)
    assert not ok and "same seed" in message
    ok, message = graded(lambda d, p, q, rng: None, capsys)  # the scaffold's `...` body
    assert not ok and "returned None" in message


def test_the_grader_never_raises_even_when_the_step_fails_only_on_a_repeat_call(capsys):
    calls = []

    def flaky(drafted, p, q, rng):
        calls.append(1)
        if len(calls) == 2:  # the first same-seed repeat
            raise ValueError("probabilities do not sum to 1")
        return learner_step(drafted, p, q, rng)

    ok, message = graded(flaky, capsys)
    assert ok is False and "the residual not normalised" in message, message


def test_the_drafts_and_the_learners_draws_come_from_independent_streams(capsys):
    """A step that takes no r and draws only the extra token from rng is 'accepting every draft':
    were its Generator the drafts' stream, its extra token would repeat the drafts' uniforms."""
    seen = []

    def accept_all(drafted, p, q, rng):
        seen.append(rng.random())
        return list(drafted) + [int(rng.choice(q.shape[1], p=q[-1]))]

    ok, message = graded(accept_all, capsys)
    assert ok is False and "classic mistake, accepting every draft (" in message, message
    draft_uniforms = np.random.default_rng(0).random(3)
    assert not np.isin(seen[:3], draft_uniforms).any()


def test_no_message_reads_chi_square_inf(capsys):
    ok, message = graded(lambda d, p, q, rng: [0] if len(d) == 3 else learner_step(d, p, q, rng), capsys)
    assert ok is False and "inf" not in message and "never does" in message, message


def test_every_mistake_is_far_from_algorithm_2_on_some_case():
    for variant in step_exercise.MISTAKES.values():
        distances = []
        for case in step_exercise.grading_cases():
            a, b = step_exercise.exact_joint(step_exercise.ALGORITHM_2, case), step_exercise.exact_joint(variant, case)
            distances.append(0.5 * sum(abs(a.get(k, 0) - b.get(k, 0)) for k in set(a) | set(b)))
        print(f"{variant.name}: TV to Algorithm 2 per case {np.round(distances, 3).tolist()}")
        assert max(distances) >= 0.08


def test_exact_distributions_sum_to_one_and_algorithm_2_emits_q_first():
    for case in step_exercise.grading_cases():
        for variant in step_exercise.VARIANTS:
            assert sum(step_exercise.exact_joint(variant, case).values()) == pytest.approx(1)
        first = np.zeros(case.q.shape[1])
        for (_, output), prob in step_exercise.exact_joint(step_exercise.ALGORITHM_2, case).items():
            first[output[0]] += prob
        np.testing.assert_allclose(first, case.q[0], atol=1e-12)  # Theorem 1 for the first token


def test_the_learners_step_runs_inside_the_real_loop():
    draft, target = random_gpt2(1), random_gpt2(2)
    mine = speculative_sampling(draft, target, [3, 1], 12, K=3, seed=0, step=learner_step)
    assert len(mine.tokens) == 12 and all(loop.r == () for loop in mine.loops)
    assert mine.alpha_hat == sum(mine.accepted) / sum(loop.decisions for loop in mine.loops)
    same = speculative_sampling(draft, target, [3, 1], 12, K=3, seed=0, step=speculative_step)
    assert same.tokens == speculative_sampling(draft, target, [3, 1], 12, K=3, seed=0).tokens
    mistake = step_exercise.MISTAKES["no bonus token"].step
    assert len(speculative_sampling(draft, target, [3, 1], 12, K=3, seed=0, step=mistake).tokens) == 12
    with pytest.raises(PicoGPTError, match="prefix of drafted"):
        speculative_sampling(draft, target, [3, 1], 5, K=3, seed=0, step=checked(lambda d, p, q, rng: d[::-1] + [0]))
    numpy_ints = checked(lambda d, p, q, rng: [np.int64(x) for x in learner_step(d, p, q, rng)])
    assert all(type(t) is int for t in speculative_sampling(draft, target, [3, 1], 12, K=3, seed=0, step=numpy_ints).tokens)


# ---- exercise 2: the loop ---------------------------------------------------------------------

from picogpt.course.step_exercise import check_speculative_loop  # noqa: E402
from picogpt.sampling import distribution  # noqa: E402
from picogpt.speculative import draft_tokens, score  # noqa: E402


def score_per_position(target, cache, new, drafted, controls):
    """Step 2 done the slow way: one target call per position, K + 1 calls (or more) per loop."""
    rows = [target([token], cache)[-1] for token in new + drafted]  # [n_vocab] each
    return distribution(np.stack(rows[-(len(drafted) + 1):]), **controls)


def learner_loop(draft, target, ids, N, K, rng, step, roll_back_target=True, roll_back_draft=True, cut=True,
                 stop_after_one=False, one_call=True):
    draft_cache, target_cache = draft.new_cache(), target.new_cache()
    sequence = list(ids)
    while len(sequence) - len(ids) < N:
        n = len(sequence)
        drafted, p = draft_tokens(draft, draft_cache, sequence[len(draft_cache):], K, {}, rng)
        q = (score if one_call else score_per_position)(target, target_cache, sequence[len(target_cache):], drafted, {})
        emitted = step(drafted, p, q, rng)
        sequence += emitted
        n_accepted = len(emitted) - 1
        if roll_back_target:
            target_cache.truncate(n + n_accepted)
        if roll_back_draft:
            draft_cache.truncate(min(n + n_accepted, len(draft_cache)))
        if stop_after_one:
            break  # the scaffold's `break`, left in
    return sequence[len(ids): len(ids) + N] if cut else sequence[len(ids):]


def scaffold(draft, target, ids, N, K, rng, step):
    """Notebook 03's scaffold, submitted as it is."""
    draft_cache, target_cache = draft.new_cache(), target.new_cache()
    sequence = list(ids)
    while len(sequence) - len(ids) < N:
        drafted, p = draft_tokens(draft, draft_cache, sequence[len(draft_cache):], K, {}, rng)
        q = score(target, target_cache, sequence[len(target_cache):], drafted, {})
        ...
        break
    return sequence[len(ids): len(ids) + N]


@pytest.fixture(scope="module")
def models():
    return random_gpt2(1), random_gpt2(2)


def test_a_correct_loop_is_accepted(models, capsys):
    assert check_speculative_loop(learner_loop, *models, [3, 1, 4]) is True, capsys.readouterr().out
    assert check_speculative_loop(learner_loop, *models, [3, 1, 4], step=learner_step) is True


@pytest.mark.parametrize("mistake, says", [
    (dict(roll_back_target=False), "target's cache held"),
    (dict(roll_back_draft=False), "draft's cache held"),
    (dict(cut=False), "cut the output to N"),
    (dict(stop_after_one=True), "stopped early"),
    (dict(one_call=False), "target calls for"),
    (dict(one_call=False, roll_back_target=False), "target calls for"),
])
def test_loop_mistakes_are_named(models, capsys, mistake, says):
    ok = check_speculative_loop(lambda *a: learner_loop(*a, **mistake), *models, [3, 1, 4])
    message = capsys.readouterr().out
    assert ok is False and says in message, message
    assert "roll" not in message or "cache held" in says, message  # counts are judged before the roll-back


def test_the_scaffold_as_given_is_told_what_is_missing(models, capsys):
    assert check_speculative_loop(scaffold, *models, [3, 1, 4]) is False
    message = capsys.readouterr().out
    assert "never called step" in message and "0 loops" not in message, message
