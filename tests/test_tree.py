"""Token trees: a tree scored in one call gives each node the logits of its branch run as a chain,
the caches keep exactly the accepted branch, and tree sampling returns the target's distribution."""

from itertools import product
from pathlib import Path

import numpy as np
import pytest
from helpers import random_gpt2
from helpers_sampling import MemoModel, chi_square_test, joint_distribution

from picogpt import PicoGPTError, autoregressive_sampling, load, speculative_sampling, tokenizer
from picogpt.model import ModelView, load_checkpoint
from picogpt.rejection import residual
from picogpt.sampling import distribution, sample
from picogpt.tree import ROOT, ModelTreeDraft, Tree, attention_mask, positions, tree_call, tree_sampling, walk

PARITY = Path(__file__).parent / "fixtures" / "parity"
# a hand-made tree: two candidates after the text, two below the first, one below the second,
# and a third level under nodes 2 and 4 (depths 1 1 2 2 2 3 3)
HAND_TREE = Tree(tokens=(11, 22, 33, 44, 55, 66, 77), parents=(ROOT, ROOT, 0, 0, 1, 2, 4))


def branch_tokens(tree, node):
    return [tree.tokens[i] for i in tree.branch(node)]


def assert_close(got, expected, label):
    tolerance = 1e-5 * max(1.0, float(np.abs(expected).max()))
    diff = float(np.abs(got - expected).max())
    print(f"{label}: max |logit diff| {diff:.2e} (tolerance {tolerance:.1e})")
    assert diff <= tolerance, f"{label}: {diff:.3e} > {tolerance:.3e}"


# ---------------------------------------------------------------------------------------------
# The tree's structure, positions and mask
# ---------------------------------------------------------------------------------------------

def test_a_tree_knows_its_children_branches_and_depths():
    assert HAND_TREE.children(ROOT) == [0, 1] and HAND_TREE.children(0) == [2, 3] and HAND_TREE.children(6) == []
    assert HAND_TREE.branch(6) == [1, 4, 6] and HAND_TREE.branch(0) == [0]
    assert HAND_TREE.depths == [1, 1, 2, 2, 2, 3, 3]


def test_nodes_sit_at_their_depth_and_see_the_text_their_ancestors_and_themselves():
    n_text = 3
    assert positions(HAND_TREE, n_text).tolist() == [0, 1, 2, 3, 3, 4, 4, 4, 5, 5]
    sees = attention_mask(HAND_TREE, n_text) == 0  # [10, 10]
    assert (sees[:3, :3] == np.tril(np.ones((3, 3), bool))).all() and not sees[:3, 3:].any()  # the text: causal
    for node in range(len(HAND_TREE)):
        expected = list(range(n_text)) + [n_text + i for i in HAND_TREE.branch(node)]
        assert np.flatnonzero(sees[n_text + node]).tolist() == expected


def test_a_chain_shaped_tree_has_the_causal_mask():
    chain = Tree(tokens=(5, 6, 7), parents=(ROOT, 0, 1))
    assert (attention_mask(chain, 4) == np.triu(np.full((7, 7), -np.inf), k=1)).all()
    assert positions(chain, 4).tolist() == list(range(7))


# ---------------------------------------------------------------------------------------------
# One call over a tree = each branch run as a chain
# ---------------------------------------------------------------------------------------------

def models_to_compare():
    teaching = load("tiny-target")
    parity = load_checkpoint(PARITY / "head16" / "model.safetensors")
    return {"teaching target": (teaching, tokenizer().encode("And the LORD said unto")),
            "parity head16": (parity, [int(i) for i in np.load(PARITY / "head16" / "ids.npy")[:6]])}


@pytest.fixture(scope="module")
def models():
    return models_to_compare()


class Plain(ModelView):
    """A model whose call is its reference path, gpt2.py with np.matmul (model.plain)."""

    def __call__(self, ids, cache=None, positions=None, mask=None):
        return self.model.plain(ids, cache, positions, mask)


@pytest.mark.parametrize("name", ["teaching target", "parity head16"])
@pytest.mark.parametrize("path", ["fast", "plain"])
@pytest.mark.parametrize("seen", [0, -1, None])  # the cache holds nothing, all but the last token, the whole text
def test_every_node_of_a_tree_scored_in_one_call_gets_its_branchs_logits(models, name, path, seen):
    model, prompt = models[name]
    run = model if path == "fast" else Plain(model)
    tree = Tree(tuple(t % model.config.n_vocab for t in HAND_TREE.tokens), HAND_TREE.parents)
    cache = model.new_cache()
    if seen:
        run(prompt[:seen], cache)
    elif seen is None:
        run(prompt, cache)
    nodes = ([] if seen is None else [ROOT]) + list(range(len(tree)))
    got = tree_call(run, cache, prompt, tree, nodes)  # one call
    expected = np.stack([run(prompt + branch_tokens(tree, node) if node != ROOT else prompt)[-1] for node in nodes])
    assert len(cache) == len(prompt) + len(tree)
    assert_close(got, expected, f"{name}, {path}, cache held {len(prompt) if seen is None else seen or 0}")


@pytest.mark.parametrize("name", ["teaching target", "parity head16"])
@pytest.mark.parametrize("node", [0, 3, 6])
def test_the_cache_after_keeping_a_branch_equals_the_cache_of_that_branch_alone(models, name, node):
    model, prompt = models[name]
    tree = Tree(tuple(t % model.config.n_vocab for t in HAND_TREE.tokens), HAND_TREE.parents)
    cache = model.new_cache()
    model(prompt[:-1], cache)
    tree_call(model, cache, prompt, tree, [ROOT])
    cache.keep(len(prompt), tree.branch(node))
    alone = model.new_cache()
    model(prompt + branch_tokens(tree, node), alone)
    assert len(cache) == len(alone) == len(prompt) + len(tree.branch(node))
    for name_, kept, expected in (("keys", cache.k, alone.k), ("values", cache.v, alone.v)):
        assert_close(kept[:, :, :len(cache)], expected[:, :, :len(alone)], f"{name}, branch to {node}, {name_}")
    assert_close(model([5], cache), model([5], alone), f"{name}, branch to {node}, the next token")


def test_keep_moves_the_branch_into_place_and_truncate_is_keep_of_nothing():
    model = random_gpt2(0)
    cache = model.new_cache()
    model([1, 2, 3, 4, 5, 6], cache)
    k = cache.k.copy()
    cache.keep(2, [1, 3])
    assert len(cache) == 4
    assert (cache.k[:, :, :4] == k[:, :, [0, 1, 3, 5]]).all()
    cache.keep(3, [])
    assert len(cache) == 3


@pytest.mark.parametrize("start, rows", [(-1, []), (2.0, [0]), (True, [0]), (7, []), (2, [1, 0]), (2, [0, 0]),
                                         (2, [-1]), (2, [4])])
def test_keep_refuses_what_it_cannot_keep(start, rows):
    model = random_gpt2(0)
    cache = model.new_cache()
    model([1, 2, 3, 4, 5, 6], cache)
    with pytest.raises(PicoGPTError, match="cannot keep"):
        cache.keep(start, rows)
    assert len(cache) == 6


def test_a_tree_counts_against_the_context_by_its_depth_not_its_nodes():
    model = random_gpt2(0, n_ctx=8)
    wide = Tree(tokens=(1, 2, 3, 4, 5), parents=(ROOT, ROOT, ROOT, ROOT, ROOT))  # five nodes at depth 1
    text = [0, 1, 2, 3, 4, 5, 6]  # positions 0..6; the nodes all sit at position 7, the context's last
    cache = model.new_cache()
    model(text[:-1], cache)
    got = tree_call(model, cache, text, wide, [ROOT, 0, 4])
    assert len(cache) == 12 > model.config.n_ctx  # briefly: the branches until keep
    assert_close(got[2], model(text + [5])[-1], "a node at the context's last position")
    cache.keep(len(text), [2])
    assert len(cache) == 8
    deeper = Tree(tokens=(1, 2), parents=(ROOT, 0))
    with pytest.raises(PicoGPTError, match="position 8 is past .* context of 8"):
        tree_call(model, model.new_cache(), text, deeper, [ROOT])


@pytest.mark.parametrize("bad, match", [
    (dict(positions=[0, 1]), "positions must be 3 whole numbers"),
    (dict(positions=[0.0, 1.0, 2.0]), "positions must be 3 whole numbers"),
    (dict(positions=[-1, 0, 1]), "positions must be 3 whole numbers"),
    (dict(mask=np.zeros((3, 2))), r"mask must be \[n_new, n_past \+ n_new\] = \[3, 3\]"),
])
def test_a_tree_call_with_malformed_positions_or_mask_is_refused(bad, match):
    model = random_gpt2(0)
    with pytest.raises(PicoGPTError, match=match):
        model([1, 2, 3], model.new_cache(), **bad)


# ---------------------------------------------------------------------------------------------
# The draft's tree, the walk, the loop's calls and caches
# ---------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def pair():
    """A tiny draft and target (vocabulary 8) that genuinely differ (tests/test_speculative.py's)."""
    return random_gpt2(1), random_gpt2(2)


def test_the_draft_grows_a_tree_of_its_shape_with_distinct_siblings_drawn_from_its_rows(pair):
    drafter = ModelTreeDraft(pair[0])
    drafter.start()
    sequence = [3, 1, 4]
    tree = drafter.propose(sequence, (3, 2, 1), dict(temperature=1.0), np.random.default_rng(0))
    assert len(tree) == 3 + 6 + 6 and tree.depths == [1] * 3 + [2] * 6 + [3] * 6
    for node in [ROOT, *range(len(tree))]:
        children = tree.children(node)
        assert len({tree.tokens[c] for c in children}) == len(children)  # without replacement
        if children:  # row i: p at the node without the siblings drawn before it, renormalised
            context = sequence + branch_tokens(tree, node) if node != ROOT else sequence
            p = distribution(pair[0](context)[-1])
            for i, child in enumerate(children):
                expected = p.copy()
                expected[[tree.tokens[c] for c in children[:i]]] = 0
                np.testing.assert_allclose(tree.p[child], expected / expected.sum(), atol=1e-6)
    assert len(drafter.cache) == len(sequence) + 3 + 6  # the deepest level is never fed


def test_the_walk_follows_accepted_children_and_ends_with_one_token():
    tree = Tree(tokens=(1, 2, 3), parents=(ROOT, ROOT, 1), p=np.eye(4)[[1, 2, 3]])  # point masses
    q_rows = np.eye(4)[[2, 0, 3, 0]]  # q after the text wants 2, after node 1 (token 2) wants 3, after node 2 wants 0
    branch, token = walk(tree, q_rows, np.random.default_rng(0))
    assert branch == [1, 2] and token == 0  # 1 rejected, 2 accepted, 3 accepted, then the extra token from q at node 2


class Counting(ModelView):
    """A model that counts its calls and the rows of each."""

    def __init__(self, model):
        super().__init__(model)
        self.calls = []

    def __call__(self, ids, cache, positions=None, mask=None):
        self.calls.append(len(ids))
        return self.model(ids, cache, positions, mask)


@pytest.mark.parametrize("shape", [(2, 2), (3, 1, 1), (1, 1, 1)])
def test_each_loop_makes_one_draft_call_per_level_and_one_target_call(pair, shape):
    draft, target = Counting(pair[0]), Counting(pair[1])
    result = tree_sampling(draft, target, [2, 5, 1], 20, shape=shape, seed=3)
    assert len(target.calls) == len(result.loops)
    assert len(draft.calls) == len(shape) * len(result.loops)
    sizes = [int(np.prod(shape[:d + 1])) for d in range(len(shape))]
    assert all(loop.n_nodes == sum(sizes) for loop in result.loops)


class BranchChecked(ModelView):
    """Wraps a GPT2: every row of every call must give the logits of a fresh full forward pass
    over the tokens that row sees (its branch), so a cache holding any wrong token shows."""

    def __init__(self, model):
        super().__init__(model)
        self.checked = 0

    def new_cache(self):
        cache = self.model.new_cache()
        cache.tokens = []
        keep = cache.keep

        def keep_tokens(start, rows):
            keep(start, rows)
            cache.tokens[start:] = [cache.tokens[start + i] for i in rows]
        cache.keep = keep_tokens
        return cache

    def __call__(self, ids, cache, positions=None, mask=None):
        logits = self.model(ids, cache, positions, mask)
        cache.tokens += [int(t) for t in ids]
        for row, sees in zip(logits, mask == 0):
            seen = [t for t, s in zip(cache.tokens, sees) if s]
            np.testing.assert_allclose(row, self.model(seen)[-1], atol=1e-5)
            self.checked += 1
        return logits


@pytest.mark.parametrize("shape", [(2, 2), (1, 3), (2, 1, 1)])
def test_after_every_loop_both_caches_hold_exactly_the_kept_tokens(pair, shape):
    draft, target = BranchChecked(pair[0]), BranchChecked(pair[1])
    result = tree_sampling(draft, target, [2, 5, 1], 25, shape=shape, seed=5)
    assert target.checked >= len(result.loops) and draft.checked >= len(result.loops)


def test_a_chain_shaped_tree_is_algorithm_2_draw_for_draw(pair):
    for K, seed in product([1, 3, 5], [0, 1]):
        chain = speculative_sampling(*pair, [3, 1, 4], 24, K=K, seed=seed)
        tree = tree_sampling(*pair, [3, 1, 4], 24, shape=(1,) * K, seed=seed)
        assert tree.tokens == chain.tokens, f"K={K}, seed {seed}"


@pytest.mark.parametrize("prompt", [[0], [3, 1, 4, 1], [7, 7, 2, 5, 0, 6]])
def test_greedy_tree_sampling_equals_greedy_autoregressive(pair, prompt):
    draft, target = pair
    N = target.config.n_ctx - len(prompt)  # up to the end of the context
    expected = autoregressive_sampling(target, prompt, N, temperature=0).tokens
    for shape in [(2,), (2, 2), (3, 1, 1), (1, 2, 1, 2)]:
        assert tree_sampling(draft, target, prompt, N, shape=shape, temperature=0, seed=1).tokens == expected, shape


def test_a_chains_draft_is_refused_with_what_to_pass_instead(pair):
    from picogpt.speculative import ModelDraft
    with pytest.raises(PicoGPTError, match="proposes a 'chain', and tree_sampling runs one that proposes a tree: "
                                           "pass it the draft model itself"):
        tree_sampling(ModelDraft(pair[0]), pair[1], [1], 4)


@pytest.mark.parametrize("shape", [(), [0], (2, 1.5), "22", None, np.array([2, 2]), {2, 3}, {2: 2}, (True, 2)])
def test_a_malformed_shape_is_refused(pair, shape):
    with pytest.raises(PicoGPTError, match="shape is a tuple of the number of candidates per level"):
        tree_sampling(*pair, [1], 4, shape=shape)


# ---------------------------------------------------------------------------------------------
# The claim: tree sampling samples exactly from the target
# ---------------------------------------------------------------------------------------------

PROMPT = [3, 1, 4]
# As many generations as the test's power needs and no more: both broken steps below fail at a quarter
# of N_SAMPLES with p < 1e-9 (tests/test_speculative.py sizes its samples the same way).
N_SAMPLES = 5_000
SIGNIFICANCE = 1e-3


@pytest.fixture(scope="module")
def memo_pair(pair):
    return MemoModel(pair[0]), MemoModel(pair[1])


def tree_joint(draft, target, n_tokens, n_samples, shape, step=None, **controls):
    rng = np.random.default_rng(0)
    counts = np.zeros((draft.config.n_vocab,) * n_tokens)
    kwargs = {} if step is None else dict(verify=step)
    for _ in range(n_samples):
        counts[tuple(tree_sampling(draft, target, PROMPT, n_tokens, shape=shape, seed=rng, **controls, **kwargs)
                     .tokens)] += 1
    return counts


@pytest.mark.slow
@pytest.mark.parametrize("shape, controls", [((2, 2), {}), ((3, 1), {}), ((2, 1, 1), dict(temperature=0.7, top_k=4)),
                                             ((4,), dict(top_p=0.9))])
def test_tree_sampling_returns_the_target_joint_distribution(pair, memo_pair, shape, controls):
    exact = joint_distribution(pair[1], PROMPT, 3, **controls)  # q(x1) q(x2 | x1) q(x3 | x1, x2), enumerated
    counts = tree_joint(*memo_pair, 3, N_SAMPLES, shape, **controls)
    statistic, dof, p_value = chi_square_test(counts, exact)
    print(f"shape {shape}, {controls}: chi2={statistic:.1f}, dof={dof}, p={p_value:.3g}")
    assert p_value > SIGNIFICANCE, f"chi2={statistic:.1f} on {dof} dof, p={p_value:.2g}"


def not_updating_the_residual(candidates, p, q, rng):
    """A broken step: every candidate judged against q itself, the fallback from (q - p_1)+."""
    for x, p_i in zip(candidates, p):
        if rng.random() < min(1.0, q[x] / p_i[x]):
            return int(x)
    return sample(residual(p[0], q) if len(p) else q, rng)


def resampling_from_q(candidates, p, q, rng):
    """A broken step: the residual updated between candidates, but the fallback drawn from q."""
    q_i = q
    for x, p_i in zip(candidates, p):
        if rng.random() < min(1.0, q_i[x] / p_i[x]):
            return int(x)
        q_i = residual(p_i, q_i)
    return sample(q, rng)


@pytest.mark.slow
@pytest.mark.parametrize("broken", [not_updating_the_residual, resampling_from_q])
def test_the_same_test_catches_a_broken_multi_candidate_step(pair, memo_pair, broken):
    exact = joint_distribution(pair[1], PROMPT, 3)
    counts = tree_joint(*memo_pair, 3, N_SAMPLES // 4, (3, 1), step=broken)
    statistic, dof, p_value = chi_square_test(counts, exact)
    print(f"{broken.__name__}: chi2={statistic:.1f}, dof={dof}, p={p_value:.3g}")
    assert p_value < 1e-9


def test_a_calls_rows_of_the_mask_are_the_whole_masks_rows():
    whole = attention_mask(HAND_TREE, 5)
    for start in range(len(whole)):
        assert (attention_mask(HAND_TREE, 5, start) == whole[start:]).all()
