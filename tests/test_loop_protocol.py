"""What both sampling loops ask of a draft and of a learner's step, and the values that name what a
measurement runs: a draft of the wrong kind, a proposal that is no distribution, a step that
raises or returns something no loop can emit, each stops the loop with one readable PicoGPTError."""

from pathlib import Path

import numpy as np
import pytest
from helpers import NoDrafts, random_gpt2

from picogpt import PicoGPTError, speculative_sampling, tree_sampling
from picogpt.drafts import PromptLookup
from picogpt.measure import trees as tree_measure
from picogpt.rejection import accept_among
from picogpt.speculative import Chain, ChainDraft, ModelDraft, speculative_step
from picogpt.tree import ModelTreeDraft, TreeDraft, TreeShape

PACKAGE = Path(__file__).resolve().parent.parent / "picogpt"
N_VOCAB = 8


@pytest.fixture(scope="module")
def pair():
    return random_gpt2(1), random_gpt2(2)


# ---------------------------------------------------------------------------------------------
# One draft contract, checked by type
# ---------------------------------------------------------------------------------------------

def test_a_tree_draft_given_to_the_chain_loop_is_refused_with_what_to_pass(pair):
    with pytest.raises(PicoGPTError, match="is a ModelTreeDraft, and speculative_sampling runs a ChainDraft"):
        speculative_sampling(ModelTreeDraft(pair[0]), pair[1], [1], 4)


def test_a_chain_draft_given_to_the_tree_loop_is_refused_with_what_to_pass(pair):
    for draft in (ModelDraft(pair[0]), PromptLookup(N_VOCAB)):
        with pytest.raises(PicoGPTError, match="and tree_sampling runs a TreeDraft .* pass it the draft model itself"):
            tree_sampling(draft, pair[1], [1], 4)


class DuckDraft:
    """The members of a draft without its contract: neither loop guesses what it is."""
    name, models = "duck", ()

    def start(self):
        pass

    def propose(self, sequence, K, controls, rng):
        return [], np.zeros((0, N_VOCAB))


@pytest.mark.parametrize("draft", [DuckDraft(), "gpt2", None, 3])
def test_anything_else_is_neither_a_model_nor_a_draft(pair, draft):
    with pytest.raises(PicoGPTError, match="the draft must be a model .*ChainDraft"):
        speculative_sampling(draft, pair[1], [1], 4)
    with pytest.raises(PicoGPTError, match="the draft must be a model .*TreeDraft"):
        tree_sampling(draft, pair[1], [1], 4)


def test_the_target_must_be_a_model(pair):
    with pytest.raises(PicoGPTError, match="must be a model"):
        speculative_sampling(pair[0], "gpt2-xl", [1], 4)


def test_no_loop_dispatches_on_what_an_object_happens_to_have():
    sources = {path.name: path.read_text() for path in PACKAGE.rglob("*.py")}
    for pattern in ("hasattr(draft", "isinstance(K, tuple)", "hasattr(step"):
        assert not [name for name, text in sources.items() if pattern in text], pattern


# ---------------------------------------------------------------------------------------------
# A chain draft's proposal is checked on every loop
# ---------------------------------------------------------------------------------------------

class Proposes(ChainDraft):
    """A draft that proposes what it is told, whatever the text."""
    name = "scripted"

    def __init__(self, drafted, p):
        self.drafted, self.p = drafted, p

    def propose(self, sequence, K, controls, rng):
        return self.drafted, self.p


def uniform(rows):
    return np.full((rows, N_VOCAB), 1 / N_VOCAB)


@pytest.mark.parametrize("drafted, p, problem", [
    ([1, 2], np.full((2, N_VOCAB), np.nan), "not distributions"),
    ([1, 2], uniform(1), "shape"),
    ([1, 2], np.full((2, N_VOCAB + 1), 1 / (N_VOCAB + 1)), "shape"),
    ([1, 2], uniform(2) * 2, "not summing to 1"),
    ([1, 2], np.where(np.arange(N_VOCAB) == 0, 1.0, 0.0) * np.ones((2, 1)), "probability 0"),
    ([1, 99], uniform(2), "the drafts"),
    ([1, True], uniform(2), "the drafts"),
    ([1, 2, 3, 4, 5], uniform(5), "the drafts"),  # more than K = 4
    ("12", uniform(2), "the drafts"),
    (None, None, "the drafts"),
])
def test_a_proposal_that_is_no_distribution_stops_the_loop_naming_the_draft(pair, drafted, p, problem):
    with pytest.raises(PicoGPTError, match=f"the draft scripted proposed .*{problem}"):
        speculative_sampling(Proposes(drafted, p), pair[1], [1], 4, K=4, seed=0)


def test_a_proposal_that_is_no_pair_is_refused(pair):
    class Single(ChainDraft):
        def propose(self, sequence, K, controls, rng):
            return [1]

    with pytest.raises(PicoGPTError, match="not a pair"):
        speculative_sampling(Single(), pair[1], [1], 4)


def test_a_draft_with_nothing_to_propose_still_runs(pair):
    assert len(speculative_sampling(NoDrafts(N_VOCAB), pair[1], [1], 6, seed=0).tokens) == 6


# ---------------------------------------------------------------------------------------------
# A learner's step, in either loop
# ---------------------------------------------------------------------------------------------

def raising_step(*args):
    return [][0]


@pytest.mark.parametrize("loop", ["speculative_sampling", "tree_sampling"])
def test_a_step_that_raises_is_named_with_its_loop(pair, loop):
    sample = speculative_sampling if loop == "speculative_sampling" else tree_sampling
    with pytest.raises(PicoGPTError, match=f"step=raising_step raised IndexError inside {loop}: list index out of range"):
        sample(*pair, [1], 4, seed=0, step=raising_step)


@pytest.mark.parametrize("output", [10**6, -1, 373.9, "7", True, None, np.array([1]), [1], 10**5000],
                         ids=["10**6", "-1", "373.9", "'7'", "True", "None", "array", "list", "10**5000"])
def test_a_tree_step_must_return_one_token_id_in_the_vocabulary(pair, output):
    with pytest.raises(PicoGPTError, match="step=<lambda> returned .* inside tree_sampling") as error:
        tree_sampling(*pair, [1], 4, seed=0, step=lambda candidates, p, q, rng: output)
    assert len(str(error.value)) < 400


def test_a_tree_step_gets_copies_and_a_right_one_runs_as_the_library_does(pair):
    def spoiling(candidates, p, q, rng):
        token = accept_among(candidates, p, q, rng)
        p[:], q[:] = np.nan, np.nan
        candidates.clear()
        return np.int64(token)

    expected = tree_sampling(*pair, [1, 2], 12, shape=(2, 2), seed=3).tokens
    assert tree_sampling(*pair, [1, 2], 12, shape=(2, 2), seed=3, step=spoiling).tokens == expected


@pytest.mark.parametrize("output", [[10**5000], list(range(10**6))], ids=["[10**5000]", "a million ids"])
def test_a_chain_step_echoes_a_huge_output_in_a_short_line(pair, output):
    with pytest.raises(PicoGPTError, match="inside speculative_sampling") as error:
        speculative_sampling(*pair, [1], 4, seed=0, step=lambda drafted, p, q, rng: output)
    assert len(str(error.value)) < 400


def test_the_verifier_is_named_by_value(pair):
    with pytest.raises(PicoGPTError, match="verify='tokens': expected one of 'token'"):
        speculative_sampling(*pair, [1], 4, verify="tokens")
    assert speculative_sampling(*pair, [1], 8, seed=2, verify="token").tokens == \
        speculative_sampling(*pair, [1], 8, seed=2, step=speculative_step).tokens


# ---------------------------------------------------------------------------------------------
# Tree shapes: whole numbers, and no more nodes than the context holds
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("shape", [(100, 100), (10**30,), (2,) * 40, (1,) * 49], ids=["100x100", "10**30", "2**40", "deep"])
def test_a_tree_with_more_nodes_than_the_context_is_refused_at_once(pair, shape):
    with pytest.raises(PicoGPTError, match="more than 32 nodes"):  # random_gpt2's n_ctx
        tree_sampling(*pair, [1], 4, shape=shape)


def test_a_tree_of_exactly_the_context_is_accepted(pair):
    assert len(tree_sampling(*pair, [1], 2, shape=(2, 2, 2, 2), seed=0).tokens) == 2  # 30 nodes <= 32


# ---------------------------------------------------------------------------------------------
# What a measurement runs is a value
# ---------------------------------------------------------------------------------------------

def test_a_chain_and_a_tree_are_values_that_sample(pair):
    chain, tree = Chain(3), TreeShape((2, 1))
    assert chain.name == "chain K = 3" and chain.shape == (1, 1, 1) and tree.name == "tree (2, 1)"
    assert chain.sample(*pair, [1, 2], 10, seed=4).tokens == speculative_sampling(*pair, [1, 2], 10, K=3, seed=4).tokens
    assert tree.sample(*pair, [1, 2], 10, seed=4).tokens == tree_sampling(*pair, [1, 2], 10, shape=(2, 1), seed=4).tokens
    assert tree_measure.method((1, 1, 1)) == chain and tree_measure.method((2, 1)) == tree


def test_measure_trees_takes_values_not_shapes(pair):
    with pytest.raises(PicoGPTError, match="speculative.Chain"):
        tree_measure.measure_trees(*pair, [1], 4, [(2, 2)])


def test_both_loops_report_each_loop_to_on_loop(pair):
    for method in (Chain(2), TreeShape((2, 2))):
        seen = []
        result = method.sample(*pair, [1, 2], 10, seed=0, on_loop=seen.append)
        assert seen == result.loops and all(loop.t_score_s > 0 for loop in seen)


def test_a_tree_draft_of_your_own_runs_through_the_same_contract(pair):
    class Chainlike(TreeDraft):
        """A tree draft that wraps the model's own, to show the contract is all the loop needs."""
        name = "mine"

        def __init__(self, model):
            self.inner, self.models = ModelTreeDraft(model), (model,)

        def start(self):
            self.inner.start()

        def propose(self, sequence, shape, controls, rng):
            return self.inner.propose(sequence, shape, controls, rng)

        def keep(self, n, branch):
            self.inner.keep(n, branch)

    expected = tree_sampling(*pair, [1, 2], 10, shape=(2, 2), seed=5).tokens
    assert tree_sampling(Chainlike(pair[0]), pair[1], [1, 2], 10, shape=(2, 2), seed=5).tokens == expected
