"""The speculative-step exercise: the grader accepts a correct step written another way, refuses
each classic mistake by name, locates every wrong step's mistake in the part of the output that
differs (with the frequencies), and the learner's step runs inside the real loop."""

import re

import numpy as np
import pytest
from helpers import random_gpt2

from picogpt import rejection, speculative_sampling
from picogpt.course import chain_step
from picogpt.course import nb03_speculative_sampling as nb03
from picogpt.course.grading import Check
from picogpt.course.nb03_speculative_sampling import check_speculative_step
from picogpt.errors import PicoGPTError
from picogpt.speculative import speculative_step

# ---- learner-style implementations, written independently of the library ---------------------


def positive_part(f, normalise=True):
    f = np.maximum(f, 0.0)
    if not normalise:
        return f
    return f / f.sum() if f.sum() > 0 else None


def normalised_blindly(f):
    """max(0, f) / its sum, with no thought for a sum of 0 (NaN then, which rng.choice refuses)."""
    f = np.maximum(f, 0.0)
    with np.errstate(invalid="ignore"):
        return f / f.sum()


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
                 bonus_row=-1, bonus=True, bonus_from="q", stop_at_rejection=True, one_r=False, draw_r=True,
                 bonus_after_rejection=False, uniforms_first=False, compare="<", returns=list, q_offset=0,
                 in_place=None, argmax=()):
    """A correct step by default (rng.choice, a different order of draws from the library's);
    each keyword makes one classic mistake, or one harmless change. bonus="at K = 0": the extra
    token only when there are no drafts; argmax: where ("residual", "extra") the most likely token
    is taken instead of a sample."""
    K, out, rejected = len(drafted), [], False
    uniforms = rng.random(K) if uniforms_first else None
    shared_r = rng.uniform() if one_r else None
    for t, x in enumerate(drafted):
        qt = q[t + q_offset]  # q_offset = 1: "the logits at i predict i + 1", applied once too often
        accept = {"q/p": min(1, qt[x] / p[t][x]), "q": qt[x], "p/q": min(1, p[t][x] / qt[x]) if qt[x] else 1.0,
                  "always": 1.0, "deterministic": float(qt[x] >= p[t][x])}[ratio]
        if ratio == "deterministic":
            accepted = accept == 1.0  # keep iff q >= p, no r at all
        elif draw_r:
            r = uniforms[t] if uniforms_first else shared_r if one_r else rng.uniform()
            accepted = {"<": r < accept, "<=": r <= accept, ">": r > accept}[compare]
        else:
            accepted = True  # no test at all
        if accepted:
            out.append(x)
            continue
        rejected = True
        if in_place == "q":  # a correct residual, computed in q's own memory
            rest = qt
            rest -= p[t]
            np.maximum(rest, 0, out=rest)
            rest /= rest.sum()
        else:
            with np.errstate(invalid="ignore", divide="ignore"):  # a wrong option may divide by 0
                rest = LEARNER_RESIDUALS[residual](qt, p, q, t, x, normalise)
        rest = qt if rest is None else rest
        out.append(int(np.argmax(rest)) if "residual" in argmax else draw(rest, rng, sampler))
        if stop_at_rejection:
            break
    if in_place == "drafted":
        drafted.append(-1)  # e.g. using the argument as scratch space
    if rejected:
        if bonus_after_rejection:
            out.append(draw(q[len(out)], rng, sampler))  # the "extra" token, wrongly, after a rejection
        return returns(out)
    extra = {"q": lambda: q[bonus_row], "p": lambda: p[-1], "paper": lambda: q[K + 1]}[bonus_from]()
    if bonus == "at K = 0" and K:
        return returns(out)
    token = int(np.argmax(extra)) if "extra" in argmax else draw(extra, rng, sampler)
    return returns(out + ([token] if bonus else []))


def without(row, x):
    """row with token x's probability set to 0, renormalised."""
    rest = row.copy()
    rest[x] = 0
    return rest / rest.sum()


def row_zero_residual(q, p):
    row = positive_part(q[0] - p[0])
    return q[0] if row is None else row


# What a learner resamples from after rejecting x = drafted[t], the right way and the wrong ones:
# (q_t, p, q, t, x, normalise) -> a row, computed only for the one the step uses.
LEARNER_RESIDUALS = {
    "q-p": lambda qt, p, q, t, x, normalise: positive_part(qt - p[t], normalise),
    "q-p naive": lambda qt, p, q, t, x, normalise: normalised_blindly(qt - p[t]),
    "p-q": lambda qt, p, q, t, x, normalise: positive_part(p[t] - qt),
    "q": lambda qt, p, q, t, x, normalise: qt,
    "p": lambda qt, p, q, t, x, normalise: p[t],
    "q-p raw": lambda qt, p, q, t, x, normalise: qt - p[t],
    "q without x": lambda qt, p, q, t, x, normalise: without(qt, x),
    "|q-p|": lambda qt, p, q, t, x, normalise: np.abs(qt - p[t]) / np.abs(qt - p[t]).sum(),
    "row 0": lambda qt, p, q, t, x, normalise: row_zero_residual(q, p),
    "library": lambda qt, p, q, t, x, normalise: rejection.residual(p[t], qt),
}


MISTAKES = {  # the grader's name -> how the learner made it
    "resampling from q": dict(residual="q"),
    "resampling from p": dict(residual="p"),
    "the residual reversed, (p − q)+": dict(residual="p-q"),
    "the residual not normalised (its missing mass on the first token)": dict(normalise=False, sampler="first"),
    "the residual not normalised (its missing mass on the last token)": dict(normalise=False, sampler="last"),
    "the residual as q without the rejected token": dict(residual="q without x"),
    "the residual |q − p|": dict(residual="|q-p|"),
    "the residual always from row 0": dict(residual="row 0"),
    "no bonus token": dict(bonus=False),
    "no bonus token ": dict(bonus="at K = 0"),  # the K = 0 case handled, as notebook 03 asks
    "argmax of the residual": dict(argmax=("residual",)),
    "argmax for the bonus token": dict(argmax=("extra",)),
    "argmax for the residual and for the bonus token": dict(argmax=("residual", "extra")),
    "the bonus token from the wrong row": dict(bonus_row=-2),
    "the bonus token from p's last row": dict(bonus_from="p"),
    "the bonus token from q's first row": dict(bonus_row=0),
    "accepting with probability q(x̃)": dict(ratio="q"),
    "accepting with probability min(1, p/q)": dict(ratio="p/q"),
    "accepting every draft": dict(ratio="always"),
    "accepting every draft ": dict(draw_r=False),  # without even drawing r (the space keeps the key apart)
    "a deterministic test, keep x̃ if q(x̃) ≥ p(x̃)": dict(ratio="deterministic"),
    "the comparison inverted, r > min(1, q/p)": dict(compare=">", residual="library"),  # a residual that copes with p = q
    "one r for the whole loop": dict(one_r=True),
    "judging x̃_t with q[t + 1]": dict(q_offset=1, bonus_row=-1),
}

NAMED_AT_ONCE = {  # mistakes named from one output or one exception: the words the message must hold
    "unnormalised residual into rng.choice": (dict(normalise=False), "the residual not normalised"),
    "unnormalised residual, inverse CDF past the vocabulary": (dict(normalise=False, sampler="outside"),
                                                               "the residual not normalised"),
    "q − p without max(0, ·)": (dict(residual="q-p raw"), "max(0, q − p)"),
    "an extra token after a rejection": (dict(bonus_after_rejection=True),
                                         "after a rejection the loop emits the resampled token and stops"),
    "judging drafts after the first rejection": (dict(stop_at_rejection=False), "went on judging the later drafts"),
    "the comparison inverted, own residual": (dict(compare=">", residual="q-p naive"),
                                              "the comparison inverted, r > min(1, q/p)"),
    "the paper's q_{K+1} as q[K + 1]": (dict(bonus_from="paper"), "extra row q_{K+1} is q[K]"),
}

HARMLESS = {  # correct steps written differently: all must pass
    "all uniforms drawn first": dict(uniforms_first=True),
    "<= instead of <": dict(compare="<="),
    "inverse-CDF sampling": dict(sampler="cdf"),
    "a tuple": dict(returns=tuple),
    "NumPy ints": dict(returns=lambda out: [np.int64(x) for x in out]),
    "a NumPy array": dict(returns=np.array),
    "the library's residual": dict(residual="library"),
    "the residual computed in q's own memory": dict(in_place="q"),  # the loop hands copies, and so does the grader
    "drafted used as scratch space": dict(in_place="drafted"),
    "all of these at once": dict(uniforms_first=True, compare="<=", sampler="cdf",
                                 returns=lambda out: np.array(out, dtype=np.int32)),
}


def graded(step):
    check = check_speculative_step(step)
    assert isinstance(check, Check)
    return check.ok, str(check)


def test_a_correct_step_written_differently_is_accepted():
    ok, message = graded(learner_step)
    assert ok is True and message.startswith("✔ right"), message


@pytest.mark.parametrize("name", HARMLESS)
def test_harmless_variants_of_a_correct_step_pass(name):
    ok, message = graded(lambda d, p, q, rng: learner_step(d, p, q, rng, **HARMLESS[name]))
    assert ok is True, message


def test_a_right_step_is_sent_into_the_loop_under_its_own_name():
    def my_speculative_step(drafted, p, q, rng):
        return learner_step(drafted, p, q, rng)

    ok, message = graded(my_speculative_step)
    assert ok and "speculative_sampling(..., verify=my_speculative_step)" in message, message


def test_every_two_mistakes_are_told_apart_on_some_case():
    """The grader names the mistake whose exact distribution fits best: any two must differ."""
    cases = nb03.grading_cases()
    joints = {v.name: [chain_step.exact_joint(v, case) for case in cases] for v in chain_step.VARIANTS}
    names = list(joints)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            distance = max(0.5 * sum(abs(ja.get(k, 0) - jb.get(k, 0)) for k in set(ja) | set(jb))
                           for ja, jb in zip(joints[a], joints[b]))
            assert distance >= 0.05, (a, b, distance)


def test_the_librarys_step_is_accepted():
    ok, message = graded(speculative_step)
    assert ok is True, message


@pytest.mark.parametrize("name", MISTAKES)
def test_each_classic_mistake_is_refused_by_name_and_located(name):
    ok, message = graded(lambda d, p, q, rng: learner_step(d, p, q, rng, **MISTAKES[name]))
    assert ok is False and f"classic mistake, {name.strip()} (" in message, message
    assert "Where they differ: " in message and "gives the frequencies (" in message, message
    assert not re.search(r"\binf\b|\b0 dof", message), message


@pytest.mark.parametrize("name", NAMED_AT_ONCE)
def test_mistakes_that_show_in_one_output_are_named(name):
    kwargs, says = NAMED_AT_ONCE[name]
    ok, message = graded(lambda d, p, q, rng: learner_step(d, p, q, rng, **kwargs))
    assert ok is False and says in message, message
    assert "Judging" not in message or name.startswith("judging"), message
    assert not re.search(r"\binf\b|\b0 dof", message), message


def test_the_grader_names_what_it_cannot_use():
    assert graded(None)[1].startswith("✘ not yet: write your function, then pass the function itself: check_speculative_step(")
    ok, message = graded(lambda d, p, q, rng: np.array(d, np.float64))
    assert not ok and "list of token ids" in message
    ok, message = graded(lambda d, p, q, rng: 1 / 0)
    assert not ok and "ZeroDivisionError" in message
    ok, message = graded(lambda d, p, q, rng: learner_step(d, p, q, np.random.default_rng()))
    assert not ok and "same seed" in message
    ok, message = graded(lambda d, p, q, rng: None)  # the scaffold's `...` body
    assert not ok and "returned None" in message


def test_the_grader_never_raises_even_when_the_step_fails_only_on_a_repeat_call():
    calls = []

    def flaky(drafted, p, q, rng):
        calls.append(1)
        if len(calls) == 2:  # the first same-seed repeat: an unnormalised residual handed to rng.choice
            return [int(rng.choice(q.shape[1], p=np.maximum(0.0, q[0] - 0.1)))]
        return learner_step(drafted, p, q, rng)

    ok, message = graded(flaky)
    assert ok is False and "the residual not normalised" in message, message


def test_the_drafts_and_the_learners_draws_come_from_independent_streams():
    """A step that takes no r and draws only the extra token from rng is 'accepting every draft':
    were its Generator the drafts' stream, its extra token would repeat the drafts' uniforms."""
    seen = []

    def accept_all(drafted, p, q, rng):
        seen.append(rng.random())
        return list(drafted) + [int(rng.choice(q.shape[1], p=q[-1]))]

    ok, message = graded(accept_all)
    assert ok is False and "classic mistake, accepting every draft (" in message, message
    draft_uniforms = np.random.default_rng(0).random(3)
    assert not np.isin(seen[:3], draft_uniforms).any()


def test_no_message_reads_chi_square_inf():
    ok, message = graded(lambda d, p, q, rng: [0] if len(d) == 3 else learner_step(d, p, q, rng))
    assert ok is False and not re.search(r"\binf\b", message) and "never does" in message, message


def test_every_mistake_is_far_from_algorithm_2_on_some_case():
    for variant in chain_step.MISTAKES.values():
        distances = []
        for case in nb03.grading_cases():
            a, b = chain_step.exact_joint(chain_step.ALGORITHM_2, case), chain_step.exact_joint(variant, case)
            distances.append(0.5 * sum(abs(a.get(k, 0) - b.get(k, 0)) for k in set(a) | set(b)))
        print(f"{variant.name}: TV to Algorithm 2 per case {np.round(distances, 3).tolist()}")
        assert max(distances) >= 0.08


def test_exact_distributions_sum_to_one_and_algorithm_2_emits_q_first():
    for case in nb03.grading_cases():
        for variant in chain_step.VARIANTS:
            assert sum(chain_step.exact_joint(variant, case).values()) == pytest.approx(1)
        first = np.zeros(case.q.shape[1])
        for (_, output), prob in chain_step.exact_joint(chain_step.ALGORITHM_2, case).items():
            first[output[0]] += prob
        np.testing.assert_allclose(first, case.q[0], atol=1e-12)  # Theorem 1 for the first token


def test_the_learners_step_runs_inside_the_real_loop():
    draft, target = random_gpt2(1), random_gpt2(2)
    mine = speculative_sampling(draft, target, [3, 1], 12, K=3, seed=0, verify=learner_step)
    assert len(mine.tokens) == 12 and all(loop.r == () for loop in mine.loops)
    assert mine.alpha_hat == sum(mine.accepted) / sum(loop.decisions for loop in mine.loops)
    same = speculative_sampling(draft, target, [3, 1], 12, K=3, seed=0, verify=speculative_step)
    assert same.tokens == speculative_sampling(draft, target, [3, 1], 12, K=3, seed=0).tokens
    mistake = chain_step.MISTAKES["no bonus token"].step
    assert len(speculative_sampling(draft, target, [3, 1], 12, K=3, seed=0, verify=mistake).tokens) == 12


def test_the_loop_runs_right_steps_that_change_their_inputs_or_return_arrays():
    """The loop hands a step copies and extends the text with Python ints: a right step that uses
    its arguments as scratch space, or returns an array, writes what the plain right step writes."""
    draft, target = random_gpt2(1), random_gpt2(2)
    plain = speculative_sampling(draft, target, [3, 1], 16, K=3, seed=0, verify=learner_step, keep_distributions=True)
    for kwargs in (dict(in_place="q"), dict(in_place="drafted"), dict(returns=np.array),
                   dict(returns=lambda out: [np.int64(x) for x in out])):
        run = speculative_sampling(draft, target, [3, 1], 16, K=3, seed=0, keep_distributions=True,
                                   verify=lambda d, p, q, rng: learner_step(d, p, q, rng, **kwargs))
        assert run.tokens == plain.tokens and all(type(t) is int for t in run.tokens), kwargs
        assert [loop.n_accepted for loop in run.loops] == [loop.n_accepted for loop in plain.loops]
        for mine, theirs in zip(run.loops, plain.loops):  # the trace keeps the q the target computed
            np.testing.assert_array_equal(mine.q, theirs.q)


@pytest.mark.parametrize("wrong, says", [
    (lambda d, p, q, rng: d[:1] + [d[0]] + d[1:], "which is not x~_2"),  # a token after the resampled one
    (lambda d, p, q, rng: d[::-1] + [0], "not x~_1"),
    (lambda d, p, q, rng: d + [0, 0], "1 to K + 1 = 4 tokens, not 5"),
    (lambda d, p, q, rng: [], "1 to K + 1 = 4 tokens, not 0"),
    (lambda d, p, q, rng: [10**6], "outside the vocabulary"),
    (lambda d, p, q, rng: None, "list of token ids"),
    (lambda d, p, q, rng: np.array(d, np.float64), "list of token ids"),
])
def test_the_loop_refuses_a_step_that_returns_anything_but_accepted_drafts_then_one_token(wrong, says):
    draft, target = random_gpt2(1), random_gpt2(2)
    with pytest.raises(PicoGPTError, match="returned") as error:
        speculative_sampling(draft, target, [3, 1], 12, K=3, seed=0, verify=wrong)
    assert says in str(error.value) and "\n" not in str(error.value), str(error.value)


def test_a_step_that_emits_after_a_rejection_is_stopped_before_it_inflates_alpha_hat():
    """Emitting the resampled token and then more would count the resampled token as accepted."""
    draft, target = random_gpt2(1), random_gpt2(2)

    def keeps_going(d, p, q, rng):
        out = learner_step(d, p, q, rng)
        rejected = len(out) <= len(d)
        return out + [int(rng.choice(q.shape[1], p=q[len(out)]))] if rejected else out

    with pytest.raises(PicoGPTError, match="keeps_going returned"):
        speculative_sampling(draft, target, [3, 1], 24, K=3, seed=0, verify=keeps_going)


# ---- mistakes the catalogue may not know: located, with the frequencies of the part that differs ----


def softmax(x):
    e = np.exp(x - np.max(x))
    return e / e.sum()


def shortfall(f):
    f = np.maximum(f, 0.0)
    return f / f.sum()


def written_step(drafted, p, q, rng, judge=None, resample=None, extra=None, judged=None, unjudged_kept=False):
    """Steps 3-4 as a learner writes them, with one piece swapped for a wrong one: judge(p, q, t, x)
    the keep probability, resample(p, q, t, x) after a rejection, extra(p, q, K) after all K, and
    judged(K) how many drafts the loop judges (the rest kept unjudged, or dropped)."""
    K, out = len(drafted), []
    n = K if judged is None else judged(K)
    for t in range(n):
        x = drafted[t]
        if rng.random() < (judge(p, q, t, x) if judge else min(1.0, q[t][x] / p[t][x])):
            out.append(int(x))
            continue
        rest = resample(p, q, t, x) if resample else shortfall(q[t] - p[t])
        return out + [int(rng.choice(len(rest), p=rest))]
    if unjudged_kept:
        out += [int(x) for x in drafted[n:]]
    row = extra(p, q, K) if extra else q[K]
    return out + [int(rng.choice(q.shape[1], p=row))]


LOCATED = {  # how the learner went wrong -> (the swapped piece, words the message must hold)
    "the residual normalised with a softmax": (dict(resample=lambda p, q, t, x: softmax(np.maximum(q[t] - p[t], 0))),
                                               "classic mistake, the residual normalised with a softmax ("),
    "a softmax of q − p": (dict(resample=lambda p, q, t, x: softmax(q[t] - p[t])), "The token resampled after rejecting"),
    "the residual from the next row of q": (dict(resample=lambda p, q, t, x: shortfall(q[t + 1] - p[t])),
                                            "The token resampled after rejecting"),
    "the residual from the next rows of both": (dict(resample=lambda p, q, t, x: shortfall(q[t + 1] - p[min(t + 1, len(p) - 1)])),
                                                "The token resampled after rejecting"),
    "the residual from q's first row each time": (dict(resample=lambda p, q, t, x: shortfall(q[0] - p[t])),
                                                  "The token resampled after rejecting"),
    "only K − 1 drafts judged, the last one kept": (dict(judged=lambda K: max(K - 1, 0), unjudged_kept=True),
                                                     "How many drafts were kept"),
    "only K − 1 drafts judged, the last one dropped": (dict(judged=lambda K: max(K - 1, 0)), "Where they differ: The"),
    "the extra token from the mean of q's rows": (dict(extra=lambda p, q, K: q.mean(axis=0)), "The extra token"),
    "the keep probability squared": (dict(judge=lambda p, q, t, x: min(1.0, q[t][x] / p[t][x]) ** 2),
                                     "How many drafts were kept"),
    "the keep probability capped at 0.9": (dict(judge=lambda p, q, t, x: min(0.9, q[t][x] / p[t][x])),
                                           "How many drafts were kept"),
    "keeping with q / (p + q)": (dict(judge=lambda p, q, t, x: q[t][x] / (p[t][x] + q[t][x])), "How many drafts were kept"),
    "the fourth draft kept unjudged": (dict(judge=lambda p, q, t, x: min(1.0, q[t][x] / p[t][x]) if t < 3 else 1.0),
                                       "K = 4"),  # only a case with K = 4 can see it
}


@pytest.mark.parametrize("name", LOCATED)
def test_every_wrong_step_is_named_or_located_with_the_frequencies_of_the_part_that_differs(name):
    swapped, says = LOCATED[name]
    with np.errstate(invalid="ignore", divide="ignore"):
        ok, message = graded(lambda d, p, q, rng: written_step(d, p, q, rng, **swapped))
    assert ok is False and says in message, message
    assert "Where they differ: " in message and "gives the frequencies (" in message and "yours came out (" in message
    assert not re.search(r"\binf\b|\b0 dof", message), message


def test_the_cases_hold_what_the_loop_sends_no_drafts_a_temperature_top_p_and_a_greedy_target():
    cases = nb03.grading_cases()
    assert {case.K for case in cases} == {0, 1, 2, 3, 4}
    assert any(case.K and (case.p == 0).any() and (case.q == 0).any() and "top-p" in case.label for case in cases)
    assert any(np.all(case.q.max(axis=1) == 1.0) and "temperature 0" in case.label for case in cases)
    for case in cases:
        np.testing.assert_allclose(case.p.sum(axis=1), 1.0)
        np.testing.assert_allclose(case.q.sum(axis=1), 1.0)


def test_a_step_that_reads_the_vocabulary_from_p0_is_told_about_k_0_before_the_loop_crashes():
    def my_speculative_step(drafted, p, q, rng):
        n_vocab = len(p[0])  # no row when the draft proposed nothing
        return learner_step(drafted, p, q[:, :n_vocab], rng)

    ok, message = graded(my_speculative_step)
    assert ok is False and message.count("my_speculative_step raised IndexError inside check_speculative_step") == 1
    assert "K = 0" in message and "q.shape[1]" in message, message


def test_a_step_that_raises_is_named_with_the_grader_and_the_drafts_and_the_case():
    def my_speculative_step(drafted, p, q, rng):
        assert (p > 0).all(), "a row of p holds a zero"
        return learner_step(drafted, p, q, rng)

    ok, message = graded(my_speculative_step)
    assert ok is False and "my_speculative_step raised AssertionError inside check_speculative_step, for the drafts" in message
    assert "a row of p holds a zero" in message and "\n" not in message, message


def test_what_a_step_got_wrong_before_it_stopped_comes_first():
    """A step wrong everywhere that also fails at K = 0 hears about both, the distribution first."""
    ok, message = graded(lambda d, p, q, rng: learner_step(d, p, q, rng, bonus=False))
    assert ok is False and message.index("classic mistake, no bonus token") < message.index("Then, in case"), message


def test_a_step_that_edits_its_inputs_in_a_way_that_changes_its_output_is_refused_by_that_output():
    """The grader hands copies, as the loop does, and judges only the output: an aliasing slip
    (the ratio computed in q's own row, then the residual taken from that row) shows in the law."""
    def my_speculative_step(drafted, p, q, rng):
        out = []
        for t, x in enumerate(drafted):
            ratio = q[t]  # not a copy: dividing it divides q[t]
            with np.errstate(divide="ignore", invalid="ignore"):
                ratio /= p[t]
            if rng.random() < min(1.0, ratio[x]):
                out.append(int(x))
                continue
            rest = np.nan_to_num(np.maximum(0.0, q[t] - p[t]), posinf=0.0)
            return out + [int(rng.choice(len(rest), p=rest / rest.sum()))]
        return out + [int(rng.choice(q.shape[1], p=q[len(drafted)]))]

    ok, message = graded(my_speculative_step)
    assert ok is False and "Where they differ: " in message and "in place" not in message, message


def test_a_generator_seeded_inside_the_step_is_named():
    ok, message = graded(lambda d, p, q, rng: learner_step(d, p, q, np.random.default_rng(0)))
    assert ok is False and "classic mistake, the same random numbers in every call" in message, message
    assert "Where they differ: " in message and "np.random.default_rng(0)" in message, message


def test_the_vocabulary_size_read_as_len_q_is_told_q_shape_1():
    def my_speculative_step(drafted, p, q, rng):
        V = len(q)  # K + 1 rows, not the vocabulary
        out = []
        for t, x in enumerate(drafted):
            if rng.random() < min(1.0, q[t][x] / p[t][x]):
                out.append(int(x))
                continue
            rest = np.maximum(0.0, q[t] - p[t])
            return out + [int(rng.choice(V, p=rest / rest.sum()))]
        return out + [int(rng.choice(V, p=q[len(drafted)]))]

    ok, message = graded(my_speculative_step)
    assert ok is False and "q.shape[1] = 3" in message and "len(q) is q's number of rows" in message, message


def test_a_named_mistake_is_not_followed_by_a_second_guess():
    """Accepting with q(x̃) rejects on a row where p = q, and a residual normalised blindly is
    then NaN: the message names the mistake, then says what happened, and guesses nothing more."""
    ok, message = graded(lambda d, p, q, rng: learner_step(d, p, q, rng, ratio="q", residual="q-p naive"))
    assert ok is False and "classic mistake, accepting with probability q(x̃) (" in message, message
    assert "Then, in case 3" in message and "NaN" in message and "comparison inverted" not in message, message


def test_the_nan_of_rejecting_where_p_equals_q_still_guesses_the_comparison_when_nothing_else_is_said():
    def my_speculative_step(drafted, p, q, rng):
        if len(drafted) == 3 and np.array_equal(p[1], q[1]):  # case 3 is the first where p = q
            with np.errstate(invalid="ignore"):
                empty = np.maximum(0.0, q[1] - p[1])
                return [int(rng.choice(q.shape[1], p=empty / empty.sum()))]  # 0 / 0: NaN
        return learner_step(drafted, p, q, rng)

    ok, message = graded(my_speculative_step)
    assert ok is False and message.count("NaN") >= 2 and "the comparison inverted" in message, message


def test_a_too_long_output_is_judged_by_its_length_before_its_ids():
    """K + 2 tokens, the last outside the vocabulary: the length is what is wrong with it first
    (the ids' message blames an unnormalised residual, which has nothing to do with it)."""
    ok, message = graded(lambda d, p, q, rng: [0] * (len(d) + 1) + [99])
    assert ok is False and "tokens for K = " in message and "not normalised" not in message, message


def test_an_exception_is_explained_from_what_rng_choice_was_handed_not_from_its_text():
    """A step that raises NumPy's words itself is not taken for one that handed rng.choice a bad row."""
    def says_nan(drafted, p, q, rng):
        if len(drafted) == 2:
            raise ValueError("probabilities contain NaN")
        return learner_step(drafted, p, q, rng)

    ok, message = graded(says_nan)
    assert ok is False and "raised ValueError" in message and "NaN comes from" not in message, message
