"""Notebook 09's helpers: one traversal laid out, its picture, and the explorer's exact numbers."""

import re

import matplotlib
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from picogpt import PicoGPTError
from picogpt.course import nb09_traversal_verification as nb09
from picogpt.tree import ROOT, Tree, draw_without_replacement, traversal, traverse, walk

matplotlib.use("Agg")


def random_tree(rng, shape, V=4):
    """A tree of `shape` over V tokens, children drawn without replacement, and its q rows."""
    tokens, parents, rows, level = [], [], [], [ROOT]
    for m in shape:
        next_level = []
        for parent in level:
            drawn, drawn_rows = draw_without_replacement(rng.dirichlet(np.full(V, 0.7)), m, rng)
            next_level += range(len(tokens), len(tokens) + len(drawn))
            tokens += drawn
            parents += [parent] * len(drawn)
            rows += list(drawn_rows)
        level = next_level
    return Tree(tuple(tokens), tuple(parents), np.array(rows)), rng.dirichlet(np.full(V, 0.7), size=1 + len(tokens))


@pytest.mark.parametrize("shape", [(2, 1), (1, 2), (2, 2), (3, 1, 1)])
def test_one_traversal_laid_out_is_what_traverse_does_with_the_same_uniforms(shape):
    rng = np.random.default_rng(0)
    for seed in range(100):
        tree, q_rows = random_tree(rng, shape)
        eta = np.random.default_rng(seed).random(len(tree))
        t = nb09.one_traversal(tree, q_rows, eta)
        branch, _ = traverse(tree, q_rows, np.random.default_rng(seed))
        assert list(t.branch) == branch
        assert all(not ok for ok in t.passed[:-1]) and (t.passed[-1] if t.branch else True)
        assert t.source == (nb09.FROM_ROOT if not branch else nb09.FROM_RESIDUAL
                            if tree.children(branch[-1]) else nb09.FROM_Q)


def test_the_order_is_children_before_their_parent_siblings_as_drawn():
    tree = Tree((0, 1, 2, 3), (ROOT, ROOT, 0, 1), np.full((4, 4), 0.25))
    assert nb09.node_order(tree) == [2, 0, 3, 1]


def test_a_wrong_number_of_uniforms_is_one_readable_error():
    tree, q_rows = random_tree(np.random.default_rng(1), (2,))
    with pytest.raises(PicoGPTError, match="one uniform per node"):
        nb09.one_traversal(tree, q_rows, [0.5])


def test_the_lines_and_the_picture_show_each_test():
    tree, q_rows = random_tree(np.random.default_rng(2), (2, 2))
    t = nb09.one_traversal(tree, q_rows, np.full(len(tree), 0.999))  # every node rejected
    lines = nb09.traversal_lines(tree, t, [f"t{x}" for x in tree.tokens])
    assert len(lines) == len(tree) + 1 and lines[-1].endswith(nb09.FROM_ROOT)
    ax = nb09.plot_traversal(tree, t, [f"t{x}" for x in tree.tokens], "text")
    assert ax.get_title() and ax.get_legend() is not None


def test_at_sun_et_als_example_a_chain_traversed_keeps_block_verifications_11_9():
    panel = nb09.tree_kept_panel(2 / 3, 1 / 3, (1, 1))
    assert panel.tokens_per_call["traversal"] == pytest.approx(1 + 11 / 9)
    assert panel.tokens_per_call["walk (token by token)"] == pytest.approx(1 + 10 / 9)


@settings(max_examples=60, deadline=None)
@given(p_a=st.floats(0, 1), q_a=st.floats(0, 1), shape=st.sampled_from(nb09.TRAVERSAL_SHAPES))
def test_the_explorers_numbers_are_probabilities_and_its_sentence_prints_them(p_a, q_a, shape):
    panel = nb09.tree_kept_panel(p_a, q_a, shape)
    for name, kept in panel.kept.items():
        assert np.all(kept >= -1e-12) and np.all(kept <= 1 + 1e-12) and np.all(np.diff(kept) <= 1e-12)
        assert panel.tokens_per_call[name] == pytest.approx(1 + kept.sum())
    assert panel.tokens_per_call["traversal"] >= panel.tokens_per_call["walk (token by token)"] - 1e-9
    numbers = [float(x) for x in re.findall(r"<b>([\d.]+)</b>", nb09.tree_kept_readout(panel))]
    assert numbers == pytest.approx([round(v, 4) for v in panel.tokens_per_call.values()], abs=1e-4)


def test_the_explorer_redraws_without_a_browser():
    text, outputs, panel = nb09.traversal_update(0.6, 0.3, (2, 1, 1))
    assert "tokens per target call" in text and outputs and panel.shape == (2, 1, 1)
    with pytest.raises(PicoGPTError, match="probabilities"):
        nb09.tree_kept_panel(1.5, 0.3, (1, 1))


def test_the_notebooks_exactness_check_passes_the_verifiers_and_fails_a_broken_one():
    from picogpt.course.toy_models import toy_pair
    from picogpt.sampling import distribution
    from picogpt.tree import traversal_output_distribution, walk_output_distribution

    draft, target = toy_pair(n_vocab=3, seed=10)
    p_of = lambda context: distribution(draft([1, 0, *context])[-1])  # noqa: E731
    q_of = lambda context: distribution(target([1, 0, *context])[-1])  # noqa: E731


    for shape in [(2, 1), (1, 2)]:
        assert nb09.exactness_gap(p_of, q_of, shape, traversal_output_distribution) <= 1e-12
        assert nb09.exactness_gap(p_of, q_of, shape, walk_output_distribution) <= 1e-12
        assert nb09.exactness_gap(p_of, q_of, shape, nb09.token_from_the_original_row) > 1e-3


# ---- notebook 09's exercise: a traversal written by hand, graded by the course's one grader ----


def learner_traverse(tree, q_rows, rng, own_row=False):
    """Traversal verification as a learner writes it: the uniforms drawn lazily, one per test, and
    rng.choice; own_row: the token after the kept branch from its node's own row of q (a mistake)."""
    for node, w, row in traversal(tree, q_rows):
        if node == ROOT or rng.random() < w:
            row = q_rows[1 + node] if own_row else row  # ROOT is -1: the root's own row, q_rows[0]
            return tree.branch(node) if node != ROOT else [], int(rng.choice(len(row), p=row))


def test_a_traversal_written_differently_is_accepted_and_each_mistake_named():
    assert nb09.check_traversal(traverse) and nb09.check_traversal(learner_traverse)
    for name, wrong in (("the walk", walk),
                        ("the token from the node's own row", lambda t, q, rng: learner_traverse(t, q, rng, own_row=True))):
        check = nb09.check_traversal(wrong)
        assert not check and f"classic mistake, {name} (" in str(check), check


def test_every_traversal_mistake_is_far_from_the_rule_and_from_the_others_on_some_tree():
    rules = [nb09.TRAVERSAL, *nb09.MISTAKES.values()]
    for i, a in enumerate(rules):
        for b in rules[i + 1:]:
            distances = []
            for case in nb09.traversal_cases():
                la, lb = a.law(*case), b.law(*case)
                distances.append(0.5 * sum(abs(la.get(k, 0) - lb.get(k, 0)) for k in set(la) | set(lb)))
            assert max(distances) >= 0.2, (a.name, b.name, distances)


@pytest.mark.parametrize("wrong, says", [
    (lambda tree, q_rows, rng: 3, "return (branch, token)"),
    (lambda tree, q_rows, rng: ([1, 0], 0), "not a path down the tree"),
    (lambda tree, q_rows, rng: ([], 7), "the token after the branch is an id"),
])
def test_a_traversal_output_that_is_not_a_branch_and_a_token_is_named(wrong, says):
    check = nb09.check_traversal(wrong)
    assert not check and says in str(check), check
