"""Traversal verification (picogpt/tree.py: traversal, traverse): the target's own law, by exact
enumeration of every drafted tree; block verification on a chain; the multi-candidate step at
depth 1; and five catalogued mistakes caught by the same tests."""

from functools import cache
from itertools import product

import numpy as np
import pytest
from helpers_sampling import MemoModel, chi_square_test, support_joint

from picogpt import PicoGPTError, tokenizer
from picogpt.rejection import output_distribution_among, running_weight, weighted_residual
from picogpt.sampling import sample
from picogpt.speculative import block_output_distribution, block_step
from picogpt.tree import (
    ROOT,
    VERIFIERS,
    Tree,
    TreeShape,
    draw_without_replacement,
    traversal_output_distribution,
    traverse,
    tree_sampling,
    walk,
    walk_output_distribution,
)

SHAPES = [(2,), (3,), (2, 1), (1, 2), (2, 2), (3, 1), (2, 1, 1), (2, 2, 1), (1, 1), (1, 1, 1), (1, 1, 1, 1)]
MAX_TREES = 4_000  # enumerated trees per (shape, vocabulary): the larger vocabularies are left to the smaller shapes


# ---------------------------------------------------------------------------------------------
# Context-dependent toy rows, every drafted tree, and the target's joint
# ---------------------------------------------------------------------------------------------

@cache
def toy_row(who, V, context, seed):
    """A row over V tokens that depends on the whole context (not only the last token)."""
    return np.random.default_rng([seed, who, V, len(context), *context]).dirichlet(np.full(V, 0.8))


def p_row(V, context, seed):
    return toy_row(0, V, context, seed)


def q_row(V, context, seed):
    return toy_row(1, V, context, seed)


def ordered_draws(p, m, replace, row=None):
    """Every ordered draw of m candidates: [(tokens, rows [m, V], probability)]. Row i is the
    paper's updated M_s, p without the candidates before it, renormalised; the candidates are drawn
    from those rows (without replacement), or from p itself every time (`replace`: the mistake)."""
    row = p if row is None else row
    if m == 0 or row.sum() == 0:
        return [((), np.zeros((0, len(p))), 1.0)]
    out = []
    for x in np.flatnonzero(p if replace else row):
        left = row.copy()
        left[x] = 0.0
        left = left / left.sum() if left.sum() > 0 else left
        for rest, rows, prob in ordered_draws(p, m - 1, replace, left):
            out.append(((int(x),) + rest, np.vstack([row[None], rows]), float((p if replace else row)[x]) * prob))
    return out


def drafted_trees(V, shape, seed, replace=False):
    """Every tree the draft can propose after the empty context, with its probability: [(Tree, prob)]."""
    def grow(tokens, parents, rows, level_nodes, depth):
        if depth == len(shape):
            yield Tree(tuple(tokens), tuple(parents), np.array(rows).reshape(len(tokens), V)), 1.0
            return
        per_node = []
        for node in level_nodes:
            context = tuple(tokens[n] for n in (Tree(tuple(tokens), tuple(parents)).branch(node) if node != ROOT else []))
            per_node.append(ordered_draws(p_row(V, context, seed), shape[depth], replace))
        for choice in product(*per_node):
            new_tokens, new_parents, new_rows, next_level, prob = list(tokens), list(parents), list(rows), [], 1.0
            for node, (drawn, drawn_rows, chance) in zip(level_nodes, choice):
                next_level += range(len(new_tokens), len(new_tokens) + len(drawn))
                new_tokens += drawn
                new_parents += [node] * len(drawn)
                new_rows += list(drawn_rows)
                prob *= chance
            for tree, rest in grow(new_tokens, new_parents, new_rows, next_level, depth + 1):
                yield tree, prob * rest
    return list(grow([], [], [], [ROOT], 0))


def q_rows_of(tree, V, seed):
    """q after the empty context, then after each node's branch: [1 + n_nodes, V]."""
    return np.array([q_row(V, (), seed)] + [q_row(V, tuple(tree.tokens[n] for n in tree.branch(i)), seed)
                                             for i in range(len(tree))])


@cache
def target_joint(V, context, n_tokens, seed):
    """q's joint of the next n_tokens after `context`: [V] * n_tokens."""
    if n_tokens == 0:
        return np.array(1.0)
    row = q_row(V, context, seed)
    return np.stack([row[x] * target_joint(V, context + (x,), n_tokens - 1, seed) for x in range(V)])


def cases(max_vocabulary=4):
    """(V, shape): each shape with every vocabulary of 2..4 tokens whose trees number at most MAX_TREES."""
    out = []
    for shape in SHAPES:
        for V in range(2, max_vocabulary + 1):
            n_trees, level = 1, 1
            for m in shape:
                level_draws = np.prod([V - i for i in range(min(m, V))])
                n_trees *= level_draws ** level
                level *= min(m, V)
            if n_trees <= MAX_TREES:
                out.append((V, shape))
    return out


CASES = cases()


def loop_then_target(law_of, V, shape, seed, replace=False):
    """The joint of the first depth + 1 tokens when one loop's verifier emits by `law_of(tree,
    q_rows)` and the target continues: [V] * (depth + 1)."""
    L = len(shape) + 1
    joint = np.zeros((V,) * L)
    for tree, prob in drafted_trees(V, shape, seed, replace):
        for emitted, chance in law_of(tree, q_rows_of(tree, V, seed)).items():
            joint[emitted] += prob * chance * target_joint(V, emitted, L - len(emitted), seed)
    return joint


def exactness_error(law_of, V, shape, seed, replace=False):
    return float(np.max(np.abs(loop_then_target(law_of, V, shape, seed, replace) - target_joint(V, (), len(shape) + 1, seed))))


def test_the_enumerated_cases_cover_every_listed_shape_and_vocabularies_of_2_to_4():
    assert {shape for _, shape in CASES} == set(SHAPES)
    assert {V for V, _ in CASES} == {2, 3, 4}


def test_every_drafted_trees_probabilities_sum_to_one():
    for V, shape in CASES[:6]:
        assert sum(prob for _, prob in drafted_trees(V, shape, seed=0)) == pytest.approx(1.0, abs=1e-12)


# ---------------------------------------------------------------------------------------------
# The claim: the tokens are the target's
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("V, shape", CASES)
def test_traversal_verification_then_the_target_is_the_targets_joint(V, shape):
    for seed in range(2):
        assert exactness_error(traversal_output_distribution, V, shape, seed) <= 1e-12


def test_the_law_is_a_distribution_over_a_branch_then_one_token():
    for V, shape in CASES[:8]:
        for tree, _ in drafted_trees(V, shape, seed=3)[:50]:
            law = traversal_output_distribution(tree, q_rows_of(tree, V, 3))
            assert sum(law.values()) == pytest.approx(1.0, abs=1e-12) and all(v >= 0 for v in law.values())
            branches = {tuple(tree.tokens[n] for n in tree.branch(i)) for i in range(len(tree))} | {()}
            assert all(out[:-1] in branches for out in law)


# ---------------------------------------------------------------------------------------------
# An independent rewrite with the catalogued mistakes as switches
# ---------------------------------------------------------------------------------------------
#
# Written recursively from the paper's description, apart from tree.traversal: a node's subtree
# is verified children first; a rejected child's share moves to its parent. `mistake` switches
# one catalogued error on.

MISTAKES = ["extra token from the original row", "parent's acceptance min(S / (1 - p(x)), 1)",
            "residual against the draft row without the rejected token", "siblings in reverse order"]


def rewrite_law(tree, q_rows, mistake=None):
    law = {}
    order = (lambda nodes: nodes[::-1]) if mistake == "siblings in reverse order" else (lambda nodes: nodes)

    def emit(node, chance, row):
        prefix = tuple(int(tree.tokens[n]) for n in tree.branch(node))
        for y, prob in enumerate(row):
            if prob > 0:
                law[prefix + (y,)] = law.get(prefix + (y,), 0.0) + chance * prob

    def visit(node, w, q, reached):
        """Verify node's subtree, its branch weight w and row q; returns P(reach here and reject all)."""
        original = q
        for child in order(tree.children(node)):
            p = tree.p[child]
            x = tree.tokens[child]
            reached = visit(child, running_weight(w, p, q, x), np.asarray(q_rows[1 + child], float), reached)
            against = p
            if mistake == "residual against the draft row without the rejected token":
                against = p.copy()
                against[x] = 0.0
                against = against / against.sum() if against.sum() > 0 else against
            mass = float(np.maximum(0.0, w * q - against).sum())
            if mistake == "parent's acceptance min(S / (1 - p(x)), 1)":
                w_new = min(mass / (1.0 - p[x]), 1.0) if p[x] < 1 else 1.0
            else:
                w_new = mass / (mass + 1.0 - w) if mass + 1.0 - w > 0 else 1.0
            q, w = weighted_residual(w, against, q), w_new
        if node == ROOT:
            emit(ROOT, reached, q)
            return 0.0
        emit(node, reached * w, original if mistake == "extra token from the original row" else q)
        return reached * (1.0 - w)

    visit(ROOT, 1.0, np.asarray(q_rows[0], float), 1.0)
    return law


def law_distance(a, b):
    return max(abs(a.get(k, 0.0) - b.get(k, 0.0)) for k in set(a) | set(b))


def test_the_rewrite_agrees_with_the_library_tree_by_tree():
    for V, shape in CASES:
        for tree, _ in drafted_trees(V, shape, seed=1)[:200]:
            q_rows = q_rows_of(tree, V, 1)
            assert law_distance(rewrite_law(tree, q_rows), traversal_output_distribution(tree, q_rows)) <= 1e-12


@pytest.mark.parametrize("mistake", MISTAKES)
def test_each_mistake_fails_the_exactness_test(mistake):
    worst = max(exactness_error(lambda tree, q_rows: rewrite_law(tree, q_rows, mistake), V, shape, seed=0)
                for V, shape in CASES)
    assert worst > 1e-3, f"{mistake}: off the target's joint by only {worst:.2g}"


@pytest.mark.parametrize("V, shape", [(2, (2, 1)), (3, (1, 2)), (2, (2, 2)), (3, (3,))])
def test_children_drafted_with_replacement_and_verified_with_the_row_they_were_drawn_from_are_exact(V, shape):
    """The update needs the row each sibling was drawn from, not a drawing without replacement: with
    independent draws that row is p itself, and the traversal stays exact (a tree then has rows p)."""
    def with_rows_p(tree, q_rows):
        rows = np.array([tree.p[tree.children(tree.parents[i])[0]] for i in range(len(tree))]).reshape(tree.p.shape)
        return traversal_output_distribution(Tree(tree.tokens, tree.parents, rows), q_rows)
    assert exactness_error(with_rows_p, V, shape, seed=0, replace=True) <= 1e-12


def test_children_drafted_with_replacement_fail_the_exactness_test():
    """The paper's update takes the next sibling's draft row as p without the rejected token: true
    only when the siblings were drawn without replacement. Drawn with replacement and verified with
    those rows, the output is not the target's."""
    worst = max(exactness_error(traversal_output_distribution, V, shape, seed=0, replace=True) for V, shape in CASES
                if V <= 3 and max(shape) > 1 and len(shape) > 1)
    assert worst > 1e-3


# ---------------------------------------------------------------------------------------------
# A chain is block verification; one level is the multi-candidate step
# ---------------------------------------------------------------------------------------------

def chain(drafted, p):
    return Tree(tuple(drafted), tuple(range(-1, len(drafted) - 1)), np.asarray(p))


def test_on_a_chain_it_is_block_verification_draw_for_draw_and_in_law():
    rng = np.random.default_rng(5)
    for trial in range(300):
        K, V = int(rng.integers(1, 5)), int(rng.integers(2, 6))
        p, q = rng.dirichlet(np.full(V, 0.7), size=K), rng.dirichlet(np.full(V, 0.7), size=K + 1)
        drafted = [sample(row, rng) for row in p]
        branch, token = traverse(chain(drafted, p), q, np.random.default_rng(trial))
        assert list(drafted[:len(branch)]) + [token] == block_step(drafted, p, q, np.random.default_rng(trial))
        assert law_distance(traversal_output_distribution(chain(drafted, p), q),
                            block_output_distribution(drafted, p, q)) <= 1e-15


def test_at_depth_1_it_is_the_multi_candidate_step_in_law():
    rng = np.random.default_rng(6)
    for _ in range(200):
        V, m = int(rng.integers(2, 6)), int(rng.integers(1, 4))
        p, q = rng.dirichlet(np.full(V, 0.7)), rng.dirichlet(np.full(V, 0.7))
        candidates, rows = draw_without_replacement(p, m, rng)
        tree = Tree(tuple(candidates), (ROOT,) * len(candidates), rows)
        law = traversal_output_distribution(tree, np.vstack([q, np.tile(q, (len(candidates), 1))]))
        among = output_distribution_among(candidates, rows, q)
        assert max(abs(sum(v for k, v in law.items() if k[0] == y) - among[y]) for y in range(V)) <= 1e-12


# ---------------------------------------------------------------------------------------------
# Tokens per target call
# ---------------------------------------------------------------------------------------------

def walk_law(tree, q_rows):
    """The walk's exact law (tree.walk with rejection.accept_among), by recursion from the root."""
    law = {}

    def down(node, chance, prefix):
        children = tree.children(node)
        emitted = output_distribution_among([tree.tokens[c] for c in children], tree.p[children], q_rows[1 + node])
        for y in np.flatnonzero(emitted):
            child = next((c for c in children if tree.tokens[c] == y), None)
            if child is None:
                law[prefix + (int(y),)] = law.get(prefix + (int(y),), 0.0) + chance * float(emitted[y])
            else:
                down(child, chance * float(emitted[y]), prefix + (int(y),))

    down(ROOT, 1.0, ())
    return law


def mean_tokens(law_of, V, shape, seed):
    return sum(prob * sum(chance * len(out) for out, chance in law_of(tree, q_rows_of(tree, V, seed)).items())
               for tree, prob in drafted_trees(V, shape, seed))


def test_the_walks_law_here_is_exact_too_and_is_the_librarys():
    for V, shape in CASES[::3]:
        assert exactness_error(walk_law, V, shape, seed=0) <= 1e-12
        for tree, _ in drafted_trees(V, shape, seed=0)[:100]:
            q_rows = q_rows_of(tree, V, 0)
            assert law_distance(walk_law(tree, q_rows), walk_output_distribution(tree, q_rows)) <= 1e-15


def test_tokens_per_target_call_never_below_the_walks_on_the_enumerated_cases():
    """An observation on these cases, averaged over the drafting (not a theorem proved here): for
    some single trees the traversal keeps fewer, as block verification does on some single chains."""
    gains = []
    for V, shape in CASES:
        for seed in range(3):
            traversal = mean_tokens(traversal_output_distribution, V, shape, seed)
            token_wise = mean_tokens(walk_law, V, shape, seed)
            assert traversal >= token_wise - 1e-12, (V, shape, seed)
            gains.append(traversal - token_wise)
    assert max(gains) > 0.01


# ---------------------------------------------------------------------------------------------
# The loop runs it; bad input is one line
# ---------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def pair():
    from helpers import random_gpt2
    return random_gpt2(1), random_gpt2(2)


def test_the_verifiers_are_named_and_the_loop_runs_traversal(pair):
    assert VERIFIERS == {"token": walk, "traversal": traverse}
    result = tree_sampling(*pair, [3, 1, 4], 12, shape=(2, 2), seed=0, verify="traversal")
    assert len(result.tokens) == 12 and all(0 <= t < 8 for t in result.tokens)
    assert TreeShape((2, 2), "traversal").sample(*pair, [3, 1, 4], 12, seed=0).tokens == result.tokens
    assert TreeShape((2, 2), "traversal").name == "tree (2, 2), traversal" and TreeShape((2, 2)).name == "tree (2, 2)"


def test_a_chain_shaped_tree_with_traversal_is_block_verification_in_the_loop(pair):
    from picogpt import speculative_sampling
    tokens = tree_sampling(*pair, [3, 1, 4], 20, shape=(1, 1, 1), seed=7, verify="traversal").tokens
    assert tokens == speculative_sampling(*pair, [3, 1, 4], 20, K=3, seed=7, verify="block").tokens


@pytest.mark.parametrize("verify", ["leaves", 3, None])
def test_a_wrong_verifier_is_one_readable_error(pair, verify):
    with pytest.raises(PicoGPTError, match="expected one of 'token', 'traversal', or a step function of your own"):
        tree_sampling(*pair, [3, 1, 4], 4, verify=verify)


# ---------------------------------------------------------------------------------------------
# Whole generations on the teaching pair
# ---------------------------------------------------------------------------------------------

@pytest.mark.slow
def test_whole_generations_on_the_teaching_pair_are_the_targets(monkeypatch):
    """The teaching pair (GPT-2's vocabulary), top-k 3 at temperature 0.8, tree (2, 1): the first
    three tokens of 1,200 generations by traversal verification against the target's exact law of
    three tokens (tests/test_block_verification.py sizes its teaching-pair test the same way). Its
    power, measured once: a traversal whose parent keeps q after a rejection (no residual) fails it
    with p = 9e-20 at this count (p = 0.008 at a quarter of it). Each run softmaxes rows of 50,257 tokens."""
    import picogpt

    monkeypatch.setenv("PICOGPT_COURSE_MODELS", "tiny")
    draft, target = picogpt.course_models(verbose=False)
    memo_draft, memo_target = MemoModel(draft), MemoModel(target)
    prompt, controls = tokenizer().encode("And the LORD said unto"), dict(temperature=0.8, top_k=3)
    exact = support_joint(target, prompt, 3, **controls)
    rng, counts = np.random.default_rng(2), {}
    for _ in range(1200):
        tokens = tuple(tree_sampling(memo_draft, memo_target, prompt, 3, shape=(2, 1), seed=rng, verify="traversal",
                                     **controls).tokens)
        counts[tokens] = counts.get(tokens, 0) + 1
    keys = sorted(set(exact) | set(counts))
    statistic, dof, p_value = chi_square_test([counts.get(k, 0) for k in keys], [exact.get(k, 0.0) for k in keys])
    print(f"teaching pair, traversal, top-k 3: chi2 = {statistic:.1f} on {dof} dof, p = {p_value:.3g}")
    assert p_value > 1e-3


# ---------------------------------------------------------------------------------------------
# The command line
# ---------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    from helpers import write_random_checkpoint
    folder = tmp_path_factory.mktemp("traversal-cli")
    sizes = dict(n_vocab=50257, n_ctx=48, n_embd=16)
    return ["--draft", str(write_random_checkpoint(folder / "draft", 1, **sizes)),
            "--target", str(write_random_checkpoint(folder / "target", 2, **sizes))]


def test_speculate_runs_a_tree_by_traversal_and_reports_it(capsys, checkpoints):
    import json

    from picogpt import load
    from picogpt.cli import encode_prompt, main
    assert main(["speculate", *checkpoints, "--prompt", "Hi", "-n", "8", "--seed", "3", "--tree", "2,1",
                 "--verify", "traversal", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    expected = tree_sampling(load(checkpoints[1]), load(checkpoints[3]), encode_prompt("Hi"), 8, shape=(2, 1), seed=3,
                             verify="traversal")
    assert report["tokens"] == expected.tokens and report["tree"] == [2, 1] and report["verify"] == "traversal"
    assert main(["speculate", *checkpoints, "--prompt", "Hi", "-n", "8", "--seed", "3", "--tree", "2,1",
                 "--verify", "traversal"]) == 0
    assert "shape (2, 1), traversal verification" in capsys.readouterr().out


@pytest.mark.parametrize("flags, match", [(["--verify", "traversal"], "give its shape too"),
                                          (["--tree", "2,2", "--verify", "block"], "a tree's verifiers are token, traversal"),
                                          (["--tree", "2,x"], "a tree's shape is a tuple"),
                                          (["--tree", "2,2", "--compare"], "--compare times chains")])
def test_speculate_refuses_a_wrong_tree_request_in_one_line(capsys, checkpoints, flags, match):
    from picogpt.cli import main
    assert main(["speculate", *checkpoints, "--prompt", "Hi", "-n", "4", *flags]) == 2
    err = capsys.readouterr().err
    assert match in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_for_some_single_trees_the_traversal_emits_fewer_than_the_walk():
    """"Never fewer" is about the mean over the drafting, not every tree (as for block verification)."""
    def mean_length(law):
        return sum(chance * len(out) for out, chance in law.items())

    fewer = [tree for V, shape in CASES[:12] for tree, _ in drafted_trees(V, shape, seed=0)
             if mean_length(traversal_output_distribution(tree, q_rows_of(tree, V, 0)))
             < mean_length(walk_law(tree, q_rows_of(tree, V, 0))) - 0.01]
    assert fewer
