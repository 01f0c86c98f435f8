"""Notebook 07's helpers, headless: what a walk did to each node, the tree's layout, the
candidates explorer's exact numbers and wrong rules, the formula's inputs, the measurement, and
every figure drawn with its labels."""

import matplotlib

matplotlib.use("Agg")

import json

import numpy as np
import pytest
from helpers import random_gpt2

from picogpt import theory
from picogpt.course import nb07_token_trees as nb07
from picogpt.course import panels
from picogpt.measure import trees as tree_measure
from picogpt.tree import ROOT, Tree

HAND_TREE = Tree(tokens=(11, 22, 33, 44, 55, 66, 77), parents=(ROOT, ROOT, 0, 0, 1, 2, 4))


@pytest.mark.parametrize("branch, expected", [
    ([], ["rejected", "rejected"] + ["never reached"] * 5),  # both first-level candidates rejected
    ([0], ["accepted", "never reached", "rejected", "rejected"] + ["never reached"] * 3),
    ([1, 4, 6], ["rejected", "accepted", "never reached", "never reached", "accepted", "never reached", "accepted"]),
    ([0, 2], ["accepted", "never reached", "accepted", "never reached", "never reached", "rejected", "never reached"]),
])
def test_node_status_says_what_the_walk_did_to_each_node(branch, expected):
    assert nb07.node_status(HAND_TREE, branch) == expected


def test_the_layout_puts_parents_over_their_children_and_leaves_apart():
    xy, root = nb07.tree_layout(HAND_TREE)
    for node in [ROOT, *range(len(HAND_TREE))]:
        children = HAND_TREE.children(node)
        if children:
            x = root[0] if node == ROOT else xy[node, 0]
            assert x == pytest.approx(np.mean(xy[children, 0]))
    leaves = [n for n in range(len(HAND_TREE)) if not HAND_TREE.children(n)]
    assert len(set(xy[leaves, 0])) == len(leaves)
    assert (xy[:, 1] == -np.array(HAND_TREE.depths)).all()


@pytest.mark.parametrize("independent", [False, True])
@pytest.mark.parametrize("m", [1, 2, 3, 4])
def test_the_right_rule_emits_q_under_both_drawings_and_keeps_more_with_more_candidates(m, independent):
    p, q = panels.toy_distributions()
    panel = nb07.candidates_panel(p, q, m, independent=independent)
    assert panel.tv < 1e-12
    if independent:
        assert panel.kept == pytest.approx(theory.acceptance_with_candidates(p, q, m), abs=1e-12)
    if m > 1:
        assert panel.kept > nb07.candidates_panel(p, q, m - 1, independent=independent).kept


@pytest.mark.parametrize("rule, wrong", [("the residual not updated between candidates", True),
                                         ("the fallback sampled from q", True),
                                         ("stopping at the first rejection", False)])
def test_wrong_rules_leave_q_except_stopping_which_keeps_fewer(rule, wrong):
    p, q = panels.toy_distributions()
    panel, right = nb07.candidates_panel(p, q, 3, rule), nb07.candidates_panel(p, q, 3)
    assert (panel.tv > 0.05) is wrong
    if not wrong:
        assert panel.kept < right.kept - 0.1
        assert "exact for this pair, and it keeps fewer candidates" in nb07.candidates_readout(panel)
    else:
        assert "the output is not q" in nb07.candidates_readout(panel)


def test_an_unknown_rule_is_refused():
    with pytest.raises(Exception, match="expected one of"):
        nb07.candidates_panel(*panels.toy_distributions(), 2, "resample from p")


def test_the_running_residuals_judge_each_candidate_and_vanish_on_the_rejected():
    p, q = panels.toy_distributions()
    rows = nb07.drawn_without_replacement(p, 3)[0][1]
    candidates = nb07.drawn_without_replacement(p, 3)[0][0]
    q_rows = nb07.running_residuals(rows, q)
    assert q_rows.shape == (4, len(q)) and np.allclose(q_rows.sum(axis=1), 1)
    for i in range(len(candidates)):
        assert q_rows[i + 1][list(candidates[: i + 1])].max() == 0  # what was rejected is never missing


def test_the_formula_for_a_chain_shape_is_leviathans_eq_1():
    alphas = np.array([0.7, 0.8, 0.85])
    assert tree_measure.predicted_tokens_per_loop((1, 1, 1, 1), alphas) == pytest.approx(theory.expected_tokens_per_loop(0.7, 4))
    assert tree_measure.predicted_tokens_per_loop((2, 3), alphas) == pytest.approx(1 + 0.8 + 0.8 * 0.85)
    assert tree_measure.n_nodes((2, 3, 1)) == 2 + 6 + 6 and tree_measure.method((1, 1)).name == "chain K = 2"
    assert tree_measure.method((2, 1)).name == "tree (2, 1)"


def test_mean_acceptances_average_the_exact_acceptance_over_the_text():
    draft, target = random_gpt2(1), random_gpt2(2)
    alphas = tree_measure.mean_acceptances(draft, target, [1, 2, 3, 4, 5], 3)
    assert alphas.shape == (3,) and (np.diff(alphas) > 0).all() and 0 < alphas[0] < 1


@pytest.fixture(scope="module")
def measurement():
    draft, target = random_gpt2(1), random_gpt2(2)
    return tree_measure.measure_trees(draft, target, [1, 2, 3], 12,
                                     map(tree_measure.method, [(1, 1, 1), (2, 1), (3,)]), repeats=2, seed=0)


def test_the_measurement_has_every_variant_with_its_spread(measurement):
    m = measurement
    assert list(m.variants) == ["chain K = 3", "tree (2, 1)", "tree (3,)"]
    for v in m.variants.values():
        assert v.speedup_runs.q1 <= v.speedup <= v.speedup_runs.q3
        assert 1 <= v.tokens_per_call <= len(v.shape) + 1 and v.nodes == tree_measure.n_nodes(v.shape)
    assert len(m.alphas) == 3 and all(v.predicted > 0 for v in m.variants.values())
    assert m.variants["chain K = 3"].predicted_tokens == pytest.approx(theory.expected_tokens_per_loop(m.alphas[0], 3))
    lines = tree_measure.text_lines(m)  # a header, one line per variant, the paired verdict on the fastest
    assert len(lines) == 2 + 3 + 1 and lines[-1].startswith("  the fastest: ")
    assert tree_measure.from_dict(json.loads(json.dumps(tree_measure.as_dict(m)))) == m
    assert "fastest: " in nb07.verdict_lines(m)[0]


def test_every_figure_is_drawn_with_its_labels(measurement):
    import matplotlib.pyplot as plt
    status = nb07.node_status(HAND_TREE, [1, 4])
    ax = nb07.plot_tree(HAND_TREE, status, [str(t) for t in HAND_TREE.tokens], "root")
    assert ax.get_title() and len(ax.get_legend().get_texts()) == 3
    from picogpt.tree import attention_mask
    ax = nb07.plot_mask(attention_mask(HAND_TREE, 5), [f"t{i}" for i in range(9)], 2)
    assert ax.get_xlabel() and ax.get_ylabel() and ax.get_title()
    p, q = panels.toy_distributions()
    ax = nb07.plot_candidates(nb07.candidates_panel(p, q, 2), list(panels.TOY_VOCAB))
    assert ax.get_ylabel() == "probability"
    rows = nb07.drawn_without_replacement(p, 2)[0]
    ax = nb07.plot_running_residuals(nb07.running_residuals(rows[1], q), rows[0], list(panels.TOY_VOCAB))
    assert ax.get_title()
    axes = nb07.plot_tree_measurement(measurement)
    assert all(ax.get_ylabel() and ax.get_title() for ax in axes)
    plt.close("all")


def test_the_candidates_explorer_update_runs_without_a_browser():
    p, q = panels.toy_distributions()
    text, outputs, panel = nb07.candidates_update(p, q, 3, "the fallback sampled from q", list(panels.TOY_VOCAB))
    assert "not q" in text and outputs[0]["data"]["image/png"] and panel.m == 3


def test_the_benchs_trees_are_read_back_or_said_missing(measurement, tmp_path):
    from picogpt.measure import trees as tree_measure
    missing = tmp_path / "none.json"
    assert "not measured there" in nb07.bench_tree_lines(missing)[0]
    path = tmp_path / "bench.json"
    path.write_text(json.dumps({"models": {"random-2": {"source": "random weights"}},
                                "trees": [{"pair": ["a", "b"], "trees": tree_measure.as_dict(measurement)}]}))
    lines = nb07.bench_tree_lines(path)
    assert lines[0] == "the bench, random-2: random weights" and "chain K = 3" in "\n".join(lines)
    assert any(line.startswith("fastest: ") or "; fastest: " in line for line in lines)  # what its repeats resolve
