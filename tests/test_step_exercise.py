"""The speculative-step exercise: the grader accepts a correct step written another way, refuses
each classic mistake by name, and the learner's step runs inside the real loop."""

import numpy as np
import pytest

from helpers import random_gpt2
from picogpt import speculative_sampling
from picogpt.course import step_exercise
from picogpt.course.step_exercise import check_speculative_step
from picogpt.errors import PicoGPTError
from picogpt.speculative import speculative_step

# ---- learner-style implementations, written independently of the library ---------------------


def positive_part(f):
    f = np.maximum(f, 0.0)
    return f / f.sum() if f.sum() > 0 else None


def learner_step(drafted, p, q, rng, *, ratio="q/p", residual="q-p", bonus_row=-1, bonus=True,
                 stop_at_rejection=True):
    """A correct step by default (rng.choice, a different order of draws from the library's);
    each keyword makes one classic mistake."""
    out = []
    for t, x in enumerate(drafted):
        accept = {"q/p": min(1, q[t][x] / p[t][x]), "q": q[t][x], "p/q": min(1, p[t][x] / q[t][x]) if q[t][x] else 1.0,
                  "always": 1.0}[ratio]
        if rng.uniform() < accept:
            out.append(x)
            continue
        rest = {"q-p": positive_part(q[t] - p[t]), "p-q": positive_part(p[t] - q[t]), "q": q[t], "p": p[t]}[residual]
        out.append(int(rng.choice(len(q[t]), p=q[t] if rest is None else rest)))
        if stop_at_rejection:
            return out
    if len(out) < len(drafted):  # judged every draft, kept going after a rejection
        return out
    return out + ([int(rng.choice(q.shape[1], p=q[bonus_row]))] if bonus else [])


MISTAKES = {
    "resampling from q": dict(residual="q"),
    "resampling from p": dict(residual="p"),
    "the residual reversed, (p − q)+": dict(residual="p-q"),
    "no bonus token": dict(bonus=False),
    "the bonus token from the wrong row": dict(bonus_row=-2),
    "accepting with probability q(x̃)": dict(ratio="q"),
    "accepting with probability min(1, p/q)": dict(ratio="p/q"),
    "accepting every draft": dict(ratio="always"),
}


def graded(step, capsys):
    ok = check_speculative_step(step)
    return ok, capsys.readouterr().out


def test_a_correct_step_written_differently_is_accepted(capsys):
    ok, message = graded(learner_step, capsys)
    assert ok is True and message.startswith("✔ right"), message


def test_the_librarys_step_is_accepted(capsys):
    ok, message = graded(speculative_step, capsys)
    assert ok is True, message


@pytest.mark.parametrize("name", MISTAKES)
def test_each_classic_mistake_is_refused_by_name(name, capsys):
    ok, message = graded(lambda d, p, q, rng: learner_step(d, p, q, rng, **MISTAKES[name]), capsys)
    assert ok is False and f"classic mistake, {name} (" in message, message


def test_judging_drafts_after_the_first_rejection_is_named(capsys):
    ok, message = graded(lambda d, p, q, rng: learner_step(d, p, q, rng, stop_at_rejection=False), capsys)
    assert ok is False and "Judging drafts after the first rejection" in message, message


def test_the_grader_names_what_it_cannot_use(capsys):
    assert graded(None, capsys)[1].startswith("✘ not yet: write your step function")
    ok, message = graded(lambda d, p, q, rng: np.array(d), capsys)
    assert not ok and "list of token ids" in message
    ok, message = graded(lambda d, p, q, rng: 1 / 0, capsys)
    assert not ok and "ZeroDivisionError" in message
    ok, message = graded(lambda d, p, q, rng: learner_step(d, p, q, np.random.default_rng()), capsys)
    assert not ok and "same seed" in message


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
        speculative_sampling(draft, target, [3, 1], 5, K=3, seed=0, step=lambda d, p, q, rng: d[::-1] + [0])


# ---- exercise 2: the loop ---------------------------------------------------------------------

from picogpt.course.step_exercise import check_speculative_loop  # noqa: E402
from picogpt.speculative import draft_tokens, score  # noqa: E402


def learner_loop(draft, target, ids, N, K, rng, step, roll_back_target=True, roll_back_draft=True, cut=True):
    draft_cache, target_cache = draft.new_cache(), target.new_cache()
    sequence = list(ids)
    while len(sequence) - len(ids) < N:
        n = len(sequence)
        drafted, p = draft_tokens(draft, draft_cache, sequence[len(draft_cache):], K, {}, rng)
        q = score(target, target_cache, sequence[len(target_cache):], drafted, {})
        emitted = step(drafted, p, q, rng)
        sequence += emitted
        n_accepted = len(emitted) - 1
        if roll_back_target:
            target_cache.truncate(n + n_accepted)
        if roll_back_draft:
            draft_cache.truncate(min(n + n_accepted, len(draft_cache)))
    return sequence[len(ids): len(ids) + N] if cut else sequence[len(ids):]


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
])
def test_loop_mistakes_are_named(models, capsys, mistake, says):
    ok = check_speculative_loop(lambda *a: learner_loop(*a, **mistake), *models, [3, 1, 4])
    message = capsys.readouterr().out
    assert ok is False and says in message, message
