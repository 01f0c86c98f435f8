"""The graders' shared statistics say what is true of the counts they were given, over their whole
domain (Hypothesis draws the laws and the counts): the frequencies a message prints are the
counts' and the rule's, "never does" appears exactly when an outcome the rule never gives came out,
and counts exactly proportional to the rule are never refused. And the capstone's check accepts
the c its own method gives from any runs, and names a loop's draft time taken for a token's."""

import math
import re
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from picogpt import theory
from picogpt.course import nb04_theorem_1 as nb04
from picogpt.course import nb07_token_trees as nb07
from picogpt.course.grading import (
    Exercise,
    Part,
    always_the_same,
    check_sampler,
    compare,
    difference_text,
    fit,
    on_copies,
    refusal,
)
from picogpt.tree import ROOT, Tree, walk

CONDITIONS, VALUES = ("a", "b"), (0, 1, 2)
PART = Part("the value", lambda outcome: outcome, VALUES, "values", lambda v: f"value {v}", lambda c: f"condition {c}")

weights = st.lists(st.integers(min_value=0, max_value=5), min_size=len(CONDITIONS) * len(VALUES),
                   max_size=len(CONDITIONS) * len(VALUES))
counts = st.lists(st.integers(min_value=0, max_value=40), min_size=len(CONDITIONS) * len(VALUES),
                  max_size=len(CONDITIONS) * len(VALUES))


def table(numbers):
    """{(condition, value): number} from a flat list."""
    return {(c, v): n for (c, v), n in zip([(c, v) for c in CONDITIONS for v in VALUES], numbers)}


def frequencies_in(text, after):
    return [float(x) for x in re.search(after + r" \(([^)]*)\)", text).group(1).split(", ")]


@settings(max_examples=150)
@given(weights, counts)
def test_a_difference_prints_the_counts_frequencies_and_the_rules_given_the_same_conditions(w, n):
    total = sum(w)
    law = {k: x / total for k, x in table(w).items()} if total else {}
    seen = table(n)
    d = compare(PART, law, seen)
    reachable = [c for c in CONDITIONS if sum(law.get((c, v), 0) for v in VALUES) > 0]
    counted = {c: sum(seen[(c, v)] for v in VALUES) for c in reachable}
    if sum(counted.values()) == 0:
        assert d is None
        return
    text = difference_text(d, "the rule")
    n_part = sum(counted.values())
    observed = [sum(seen[(c, v)] for c in reachable) / n_part for v in VALUES]
    expected = [sum(counted[c] * law.get((c, v), 0) / sum(law.get((c, u), 0) for u in VALUES) for c in reachable) / n_part
                for v in VALUES]
    assert frequencies_in(text, "yours came out") == [round(x, 3) for x in observed]
    assert frequencies_in(text, "gives the frequencies") == [round(x, 3) for x in expected]
    assert f"in {n_part:,} outputs" in text
    impossible = [(c, v) for c in reachable for v in VALUES if seen[(c, v)] > 0 and law.get((c, v), 0) == 0]
    assert ("never does" in text) == bool(impossible) and (d.p_value == 0) == bool(impossible)
    assert 0 <= d.p_value <= 1 and not re.search(r"\binf\b|\bnan\b", text)
    gaps = np.subtract(observed, expected)
    words = re.search(r"in words, yours gives value (\d) more often .* and value (\d) less often", text)
    if words:  # the values it names are the ones given most too often and most too rarely
        assert gaps[int(words.group(1))] > max(gaps) - 1e-9 and gaps[int(words.group(2))] < min(gaps) + 1e-9, text
    else:
        assert d.never or max(gaps) <= 1e-9 or min(gaps) >= -1e-9, text


@settings(max_examples=100)
@given(weights.filter(lambda w: sum(w) > 0), st.integers(min_value=1, max_value=50))
def test_counts_proportional_to_the_rule_are_never_refused(w, scale):
    total = sum(w)
    law = {k: x / total for k, x in table(w).items()}
    seen = {k: x * scale for k, x in table(w).items()}  # exactly n times the law, n = total * scale
    assert fit([law], [seen])[0] > 0.99
    d = compare(PART, law, seen)
    assert d.p_value > 0.99 and not d.never and d.tv < 1e-12


times = st.lists(st.floats(min_value=1e-4, max_value=1e-1), min_size=3, max_size=12)


@settings(max_examples=100)
@given(times, times, st.integers(min_value=2, max_value=8), st.floats(min_value=0.05, max_value=0.95))
def test_the_capstone_check_accepts_its_own_method_and_names_a_loops_draft_time(draft_s, target_s, K, alpha):
    run = SimpleNamespace(loops=[SimpleNamespace(t_draft_s=t * K, K=K, n_accepted=1) for t in draft_s], alpha_hat=alpha)
    autoregressive = SimpleNamespace(token_times_s=target_s)
    c = nb04.in_loop_c(run, autoregressive)
    if c >= 1:  # a draft token as slow as a target step: refused for that
        return
    best_K = int(theory.best_K(alpha, c, 16))
    speedup = float(theory.predicted_speedup_leviathan(alpha, best_K, c))
    assert nb04.check_capstone_prediction(alpha, c, best_K, speedup, run, autoregressive)
    per_loop = nb04.in_loop_c(run, autoregressive, per_token=False)
    assert math.isclose(per_loop, K * c)
    wrong = nb04.check_capstone_prediction(alpha, per_loop, best_K, speedup, run, autoregressive)
    assert not wrong and "loop.t_draft_s / loop.K" in str(wrong), wrong


def test_a_law_and_its_own_exact_counts_fit_and_an_impossible_outcome_is_returned():
    law = {"x": 0.5, "y": 0.5, "z": 0.0}
    p_value, impossible = fit([law], [{"x": 10, "y": 10}])
    assert p_value > 0.99 and impossible is None
    assert fit([law], [{"x": 10, "z": 1}]) == (0.0, "z")
    assert np.isclose(fit([law, law], [{"x": 5, "y": 5}, {"x": 7, "y": 7}])[0], 1.0)


def test_a_learners_function_runs_on_copies_as_the_loops_run_it():
    """What it does to its arguments stays with it; what it returns is all a grader sees."""
    drafted, p, q = [1, 2], np.full((2, 3), 1 / 3), np.full((3, 3), 1 / 3)

    def scribbles(d, p_, q_, rng):
        d.append(-1)
        p_ -= 1
        q_[:] = 0
        return rng

    rng = np.random.default_rng(0)
    assert on_copies(scribbles, drafted, p, q, rng) is rng  # the Generator is handed as it is
    assert drafted == [1, 2] and np.all(p == 1 / 3) and np.all(q == 1 / 3)


laws_by_condition = st.lists(st.lists(st.integers(min_value=0, max_value=4), min_size=len(VALUES), max_size=len(VALUES))
                             .filter(lambda w: sum(w) > 0), min_size=len(CONDITIONS), max_size=len(CONDITIONS))


@settings(max_examples=150)
@given(laws_by_condition, st.lists(st.integers(min_value=0, max_value=30), min_size=len(CONDITIONS),
                                   max_size=len(CONDITIONS)), st.lists(st.sampled_from(VALUES), min_size=len(CONDITIONS),
                                                                       max_size=len(CONDITIONS)))
def test_outcomes_that_repeat_themselves_are_called_so_exactly_when_the_law_makes_that_unlikely(w, n, values):
    """One outcome per condition, each n_c times: repetitive beyond chance exactly when
    Π_c Σ_v P(v | c)^n_c < significance, computed here directly; a second outcome under any
    condition is never repetitive."""
    law = {(c, v): w_c[i] / (len(CONDITIONS) * sum(w_c)) for c, w_c in zip(CONDITIONS, w) for i, v in enumerate(VALUES)}
    counts = {(c, v): n_c for c, n_c, v in zip(CONDITIONS, n, values)}
    chance = math.prod(sum((x / sum(w_c)) ** n_c for x in w_c) for w_c, n_c in zip(w, n) if n_c > 0)
    significance = 1e-3
    if not math.isclose(chance, significance, rel_tol=1e-6):
        assert always_the_same([law], [counts], lambda outcome: outcome[0], significance) == (chance < significance)
    counts[(CONDITIONS[0], VALUES[0])], counts[(CONDITIONS[0], VALUES[1])] = 1, 1
    assert not always_the_same([law], [counts], lambda outcome: outcome[0], significance)


def test_the_capstone_names_a_loops_draft_time_even_where_it_reaches_1():
    """c from a loop's whole draft time, K c = 1.10: the slip is named, not taken for c's inverse
    (the c >= 1 branch used to answer first)."""
    K, c = 4, 0.275
    run = SimpleNamespace(loops=[SimpleNamespace(t_draft_s=c * K * 0.01, K=K, n_accepted=1)] * 6, alpha_hat=0.6)
    autoregressive = SimpleNamespace(token_times_s=[0.01] * 6)
    per_loop = nb04.in_loop_c(run, autoregressive, per_token=False)
    assert math.isclose(per_loop, 1.10)
    wrong = nb04.check_capstone_prediction(0.6, per_loop, 2, 1.5, run, autoregressive)
    assert not wrong and "loop.t_draft_s / loop.K" in str(wrong) and "inverse" not in str(wrong), wrong


# ---- a new sampler exercise is a value: a tree walk, (tree, q_rows, rng) -> (branch, token) ----


def walk_law(rule, case):
    """The exact law of (the branch kept, the token after it) when every node's multi-candidate step
    is `rule` (nb07's CandidateRule values): the walk descends into a kept child, stops at any other token."""
    tree, q_rows = case
    law = {}

    def visit(node, branch, chance):
        children = tree.children(node)
        emitted = rule.output_distribution([tree.tokens[c] for c in children], tree.p[children], q_rows[1 + node])
        for token, prob in enumerate(emitted):
            child = next((c for c in children if tree.tokens[c] == token), None)
            if prob > 0 and child is None:
                key = ((), (tuple(branch), token))
                law[key] = law.get(key, 0.0) + chance * prob
            elif prob > 0:
                visit(child, branch + [child], chance * prob)
    visit(ROOT, [], 1.0)
    return law


def walk_outcome(output, inputs, case):
    branch, token = output
    return ((), (tuple(int(n) for n in branch), int(token))), None


def walk_exercise():
    tree = Tree(tokens=(0, 1, 2), parents=(ROOT, ROOT, 0),
                p=np.array([[0.5, 0.3, 0.2], [0.0, 0.6, 0.4], [0.2, 0.2, 0.6]]))
    q_rows = np.array([[0.2, 0.5, 0.3], [0.3, 0.3, 0.4], [0.4, 0.4, 0.2], [0.6, 0.2, 0.2], [0.1, 0.1, 0.8]])
    branches = ((), (0,), (1,), (0, 2))
    parts = [(Part("the branch kept", lambda key: ((), key[1][0]), branches, "branches"), ""),
             (Part("the token after it", lambda key: key[1], (0, 1, 2), "tokens", given=str), "")]
    return Exercise("the tree walk", nb07.MULTI_STEP, nb07.MISTAKES, ((tree, q_rows),), call="check_walk(my_walk)",
                    run_in="Run it in the tree loop.", inputs=lambda case, trials, rng: [case] * trials, outcome=walk_outcome,
                    law=walk_law, parts=lambda case, number: parts, explain=lambda *_: ("", ""), walk_through="",
                    judged_on="the branch kept, the token after it", noun="tree", cases_text="one tree of 3 nodes")


def test_a_new_sampler_exercise_is_a_value_graded_by_the_one_grader():
    """Notebook 09's shape of exercise, a traversal verifier (tree, q_rows, rng) -> (branch, token):
    its rule and mistakes are notebook 07's candidate rules run at every node; the grader is unchanged."""
    exercise = walk_exercise()
    assert sum(walk_law(nb07.MULTI_STEP, exercise.cases[0]).values()) == pytest.approx(1)
    assert check_sampler(lambda tree, q_rows, rng: walk(tree, q_rows, rng), exercise)
    mistake = nb07.MISTAKES["the fallback sampled from q"]
    wrong = check_sampler(lambda tree, q_rows, rng: walk(tree, q_rows, rng, step=mistake.step), exercise)
    assert not wrong and f"classic mistake, {mistake.name} (" in str(wrong), wrong


@settings(max_examples=300)
@given(st.lists(st.one_of(st.floats(min_value=-0.5, max_value=1.5), st.just(float("nan")), st.just(0.0)),
                min_size=1, max_size=5),
       st.booleans(), st.integers(min_value=0, max_value=2))
def test_the_grader_names_a_refused_distribution_exactly_when_rng_choice_refuses_it(values, normalise, extra):
    """grading.refusal reads a distribution as rng.choice does: None exactly when NumPy accepts it,
    else its kind (a size that differs, NaN, a negative entry, a sum away from 1)."""
    p = np.array(values)
    if normalise and np.isfinite(p).all() and p.sum() > 0:
        p = p / p.sum()
    n = len(p) + (extra if extra < 2 else 0)
    try:
        np.random.default_rng(0).choice(n, p=p)
        accepted = True
    except ValueError:
        accepted = False
    found = refusal(n, p)
    assert (found is None) == accepted, (p, n, found)
    if found:
        assert found.kind == ("size" if n != len(p) else "nan" if np.isnan(p).any() else "negative" if (p < 0).any()
                              else "sum") and found.length == len(p)
