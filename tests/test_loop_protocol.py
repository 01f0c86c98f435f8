"""What both sampling loops ask of a model, of a draft and of a learner's step, and the values that
name what a measurement runs: models and drafts are protocols (any object with their members runs,
a wrapper with no base class included), and a wrong object, a model call that returns no logits, a
proposal that is no distribution, a step that raises or returns something no loop can emit, each
stops the loop with one readable PicoGPTError."""

from pathlib import Path

import hypothesis.strategies as st
import numpy as np
import pytest
from helpers import NoDrafts, random_gpt2
from hypothesis import given, settings
from hypothesis.extra.numpy import arrays

from picogpt import PicoGPTError, autoregressive_sampling, speculative_sampling, tree_sampling
from picogpt.drafts import PromptLookup
from picogpt.loop import Draft, checked_proposal, distributions
from picogpt.measure import trees as tree_measure
from picogpt.model import ModelView
from picogpt.rejection import accept_among
from picogpt.sampling import Model
from picogpt.speculative import Chain, ChainDraft, ModelDraft, speculative_step
from picogpt.tree import VERIFIERS, ModelTreeDraft, Tree, TreeDraft, TreeShape, checked_tree, walk

PACKAGE = Path(__file__).resolve().parent.parent / "picogpt"
N_VOCAB = 8


@pytest.fixture(scope="module")
def pair():
    return random_gpt2(1), random_gpt2(2)


# ---------------------------------------------------------------------------------------------
# A model is what it has: a user's wrapper needs no base class
# ---------------------------------------------------------------------------------------------

class Timed:
    """A forwarding wrapper written the ordinary way: no picogpt base class, the members a model has,
    each call counted (as a user would time or log them)."""

    def __init__(self, model):
        self.model, self.config, self.name, self.calls = model, model.config, f"timed {model.name}", 0

    def __call__(self, ids, cache=None, *tree):
        self.calls += 1
        return self.model(ids, cache, *tree)

    def new_cache(self):
        return self.model.new_cache()

    def validate_ids(self, ids, n_past=0):
        return self.model.validate_ids(ids, n_past)


@pytest.mark.parametrize("verify", ["token", "block"])
def test_a_forwarding_wrapper_with_no_base_class_runs_in_the_chain_loop(pair, verify):
    draft, target = Timed(pair[0]), Timed(pair[1])
    assert isinstance(draft, Model)
    wrapped = speculative_sampling(draft, target, [1, 2], 12, K=3, seed=4, verify=verify)
    assert wrapped.tokens == speculative_sampling(*pair, [1, 2], 12, K=3, seed=4, verify=verify).tokens
    assert target.calls == len(wrapped.loops) and draft.calls == 3 * len(wrapped.loops)


def test_a_forwarding_wrapper_with_no_base_class_runs_in_the_tree_loop_and_algorithm_1(pair):
    draft, target = Timed(pair[0]), Timed(pair[1])
    wrapped = tree_sampling(draft, target, [1, 2], 12, shape=(2, 2), seed=4)
    assert wrapped.tokens == tree_sampling(*pair, [1, 2], 12, shape=(2, 2), seed=4).tokens
    assert target.calls == len(wrapped.loops) and draft.calls == 2 * len(wrapped.loops)  # one draft call a level
    assert autoregressive_sampling(target, [1], 6, seed=2).tokens == autoregressive_sampling(pair[1], [1], 6, seed=2).tokens


class Lacking(Timed):
    """A wrapper that forgot two members."""
    new_cache = None

    def __init__(self, model):
        super().__init__(model)
        del self.config


@pytest.mark.parametrize("loop", [speculative_sampling, tree_sampling])
def test_an_object_that_is_no_model_is_told_what_it_lacks_in_one_line(pair, loop):
    with pytest.raises(PicoGPTError, match="the target must be a model .* lacks config, name, __call__, new_cache, "
                                           "validate_ids$"):
        loop(pair[0], "gpt2-xl", [1], 4)
    with pytest.raises(PicoGPTError, match="lacks config, new_cache$") as error:  # None is no method
        loop(pair[0], Lacking(pair[1]), [1], 4)
    assert "\n" not in str(error.value)


@pytest.mark.parametrize("config", [None, object(), type("C", (), {"n_vocab": 8, "n_ctx": True})()],
                         ids=["None", "no sizes", "n_ctx True"])
def test_a_config_without_the_two_sizes_is_one_line(pair, config):
    target = Timed(pair[1])
    target.config = config
    for loop in (speculative_sampling, tree_sampling):
        with pytest.raises(PicoGPTError, match="has a config whose sizes are n_vocab=.*, n_ctx=.*: a model's config"):
            loop(pair[0], target, [1], 4)
    with pytest.raises(PicoGPTError, match="the model .* has a config"):
        autoregressive_sampling(target, [1], 4)


class Returns(Timed):
    """A wrapper whose call returns something else than the logits: `wrong(logits)`."""

    def __init__(self, model, wrong):
        super().__init__(model)
        self.wrong = wrong

    def __call__(self, ids, cache=None, *tree):
        return self.wrong(self.model(ids, cache, *tree))


WRONG_LOGITS = {
    "the last row only": lambda logits: logits[-1:],
    "1-D": lambda logits: logits[-1],
    "a column more": lambda logits: np.pad(logits, ((0, 0), (0, 1))),
    "a column less": lambda logits: logits[:, :-1],
    "a list": lambda logits: logits.tolist(),
    "integers": lambda logits: logits.astype(np.int64),
    "None": lambda logits: None,
}


@pytest.mark.parametrize("wrong", WRONG_LOGITS.values(), ids=WRONG_LOGITS.keys())
@pytest.mark.parametrize("role", ["draft", "target"])
def test_a_model_whose_call_returns_no_logits_stops_every_loop_in_one_line(pair, wrong, role):
    """Both chain verifiers, the tree loop and Algorithm 1 check what a model returns, as they check
    what a draft proposes: [len(ids), n_vocab] floats, or one line that names the model."""
    models = [pair[0], pair[1]]
    models[role == "target"] = Returns(models[role == "target"], wrong)
    runs = [lambda: speculative_sampling(*models, [1, 2, 3], 6, K=2, seed=0, verify="token"),
            lambda: speculative_sampling(*models, [1, 2, 3], 6, K=2, seed=0, verify="block"),
            lambda: tree_sampling(*models, [1, 2, 3], 6, shape=(2, 1), seed=0),
            lambda: autoregressive_sampling(models[role == "target"], [1, 2, 3], 6, seed=0)]
    for run in runs:
        with pytest.raises(PicoGPTError, match=r"timed random-\d returned .* for \d+ ids: a model's call returns its "
                                               r"logits \[len\(ids\), n_vocab\] = \[\d+, 8\]") as error:
            run()
        assert "\n" not in str(error.value)


# ---------------------------------------------------------------------------------------------
# A draft is what it has, and says what it proposes: a value, not a type
# ---------------------------------------------------------------------------------------------

def test_a_tree_draft_given_to_the_chain_loop_is_refused_with_what_to_pass(pair):
    with pytest.raises(PicoGPTError, match="proposes a 'tree', and speculative_sampling runs one that proposes a chain"):
        speculative_sampling(ModelTreeDraft(pair[0]), pair[1], [1], 4)


def test_a_chain_draft_given_to_the_tree_loop_is_refused_with_what_to_pass(pair):
    for draft in (ModelDraft(pair[0]), PromptLookup(N_VOCAB)):
        with pytest.raises(PicoGPTError, match="and tree_sampling runs one that proposes a tree: pass it the draft "
                                               "model itself"):
            tree_sampling(draft, pair[1], [1], 4)


class DuckDraft:
    """A draft written from scratch, with no base class: every member of loop.Draft."""
    name, models, proposes = "duck", (), "chain"

    def __init__(self):
        self.kept = []

    def start(self):
        self.kept.clear()

    def propose(self, sequence, K, controls, rng):
        return [], np.zeros((0, N_VOCAB))

    def keep(self, n, branch):
        self.kept.append((n, len(branch)))


def test_a_draft_with_no_base_class_runs_and_is_told_what_was_kept(pair):
    duck = DuckDraft()
    assert isinstance(duck, Draft)
    result = speculative_sampling(duck, pair[1], [1], 5, seed=0)
    assert result.tokens == speculative_sampling(NoDrafts(N_VOCAB), pair[1], [1], 5, seed=0).tokens
    assert duck.kept == [(n, 0) for n in range(1, 6)]


class HalfDuck:
    """The members of a draft but `keep` and `proposes`: neither loop guesses what it is."""
    name, models = "half", ()

    def start(self):
        pass

    def propose(self, sequence, K, controls, rng):
        return [], np.zeros((0, N_VOCAB))


@pytest.mark.parametrize("draft", [HalfDuck(), "gpt2", None, 3])
def test_anything_else_is_neither_a_model_nor_a_draft_and_is_told_what_it_lacks(pair, draft):
    for loop, proposes in ((speculative_sampling, "chain"), (tree_sampling, "tree")):
        with pytest.raises(PicoGPTError, match=f"the draft must be a model .* or a draft that proposes a {proposes} "
                                               ".* lacks config, .* for a model, .*proposes.* for a draft"):
            loop(draft, pair[1], [1], 4)


def test_a_drafts_models_are_checked_as_models(pair):
    class Runs(ChainDraft):
        name, models = "runs a string", ("gpt2",)

    with pytest.raises(PicoGPTError, match="the draft runs a string's model must be a model .* lacks"):
        speculative_sampling(Runs(), pair[1], [1], 4)


def test_a_drafts_models_must_be_a_tuple(pair):
    class Runs(ChainDraft):
        name, models = "runs one", pair[0]

    with pytest.raises(PicoGPTError, match="the draft runs one's models must be a tuple of the models it runs"):
        speculative_sampling(Runs(), pair[1], [1], 4)


def test_the_target_must_be_a_model(pair):
    with pytest.raises(PicoGPTError, match="must be a model"):
        speculative_sampling(pair[0], "gpt2-xl", [1], 4)


def test_no_loop_dispatches_on_what_an_object_happens_to_have():
    sources = {path.name: path.read_text() for path in PACKAGE.rglob("*.py")}
    for pattern in ("hasattr(draft", "isinstance(K, tuple)", "hasattr(step", "isinstance(draft, ChainDraft)",
                    "isinstance(draft, TreeDraft)", "isinstance(draft, kind)"):
        assert not [name for name, text in sources.items() if pattern in text], pattern


def test_no_loop_names_a_course_module():
    """The teaching core sits below the course: not even a message names a module above it."""
    for name in ("loop.py", "speculative.py", "tree.py", "sampling.py", "rejection.py", "theory.py"):
        text = (PACKAGE / name).read_text()
        assert not [where for where in ("course.", "course/", "_exercise") if where in text], name


# ---------------------------------------------------------------------------------------------
# What propose is handed: a copy of the text
# ---------------------------------------------------------------------------------------------

class Scribbles(ChainDraft):
    """A draft that writes into the text it is handed (as scratch space), after proposing from it."""

    def __init__(self, inner):
        self.inner, self.name, self.models = inner, "scribbles", inner.models

    def start(self):
        self.inner.start()

    def propose(self, sequence, K, controls, rng):
        proposal = self.inner.propose(sequence, K, controls, rng)
        sequence.append(0)
        sequence[0] = 7
        return proposal

    def keep(self, n, branch):
        self.inner.keep(n, branch)


class ScribblesTree(TreeDraft):
    def __init__(self, inner):
        self.inner, self.name, self.models = inner, "scribbles", inner.models

    def start(self):
        self.inner.start()

    def propose(self, sequence, shape, controls, rng):
        tree = self.inner.propose(sequence, shape, controls, rng)
        sequence.extend([0, 0])
        return tree

    def keep(self, n, branch):
        self.inner.keep(n, branch)


def test_a_draft_that_writes_into_the_text_cannot_change_what_the_loop_emits(pair):
    """propose gets a copy: what the loop returns is what its own trace emitted, and what it returns
    with a draft that keeps its hands off the text."""
    for verify in ("token", "block"):
        run = speculative_sampling(Scribbles(ModelDraft(pair[0])), pair[1], [1, 2], 12, K=3, seed=5, verify=verify)
        assert run.tokens == [t for loop in run.loops for t in loop.tokens][:12]
        assert run.tokens == speculative_sampling(*pair, [1, 2], 12, K=3, seed=5, verify=verify).tokens
    run = tree_sampling(ScribblesTree(ModelTreeDraft(pair[0])), pair[1], [1, 2], 12, shape=(2, 1), seed=5)
    assert run.tokens == [t for loop in run.loops for t in loop.tokens][:12]
    assert run.tokens == tree_sampling(*pair, [1, 2], 12, shape=(2, 1), seed=5).tokens


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
    ([1, 2], [["0.125"] * N_VOCAB] * 2, "not numbers"),
    ([1, 2], [[10**400] + [0] * (N_VOCAB - 1)] * 2, "not numbers"),
    ([1, 2], [[0.5, 0.5], [1.0]], "rows"),  # ragged
])
def test_a_proposal_that_is_no_distribution_stops_the_loop_naming_the_draft(pair, drafted, p, problem):
    with pytest.raises(PicoGPTError, match=f"the draft scripted proposed .*{problem}"):
        speculative_sampling(Proposes(drafted, p), pair[1], [1], 4, K=4, seed=0)


@pytest.mark.parametrize("proposal", [[1], {1: 0, 2: 1}, {(1,), (2,)}, ([1], uniform(1), None), None],
                         ids=["one item", "a dict", "a set", "three items", "None"])
def test_a_proposal_that_is_no_pair_is_refused(pair, proposal):
    class Single(ChainDraft):
        def propose(self, sequence, K, controls, rng):
            return proposal

    with pytest.raises(PicoGPTError, match="not a pair"):
        speculative_sampling(Single(), pair[1], [1], 4)


def test_a_proposal_of_lists_is_the_same_proposal_as_arrays():
    drafted, p = checked_proposal(((np.int64(1), 2), uniform(2).tolist()), 4, N_VOCAB, "lists")
    assert drafted == [1, 2] and all(type(x) is int for x in drafted) and p.dtype == np.float64


# ---------------------------------------------------------------------------------------------
# A tree draft's proposal is checked on every loop
# ---------------------------------------------------------------------------------------------

def a_tree(**fields):
    """A right tree of shape (2,) after any text, with `fields` replaced."""
    return Tree(**{"tokens": (1, 2), "parents": (-1, -1), "p": np.array([uniform(1)[0], uniform(1)[0]]), **fields})


@pytest.mark.parametrize("tree, problem", [
    (a_tree(parents=(0.0, -1)), "parents"),
    (a_tree(parents=("0", -1)), "parents"),
    (a_tree(parents=(-1, 0, 0)), "parents"),
    (a_tree(parents=(-1, 1)), "parents"),  # its own parent
    (a_tree(tokens=None), "the tokens"),
    (a_tree(tokens=(1, True)), "the tokens"),
    (a_tree(tokens=(1, N_VOCAB)), "the tokens"),
    (a_tree(p=[["x"] * N_VOCAB] * 2), "not numbers"),
    (a_tree(p=[[10**400] * N_VOCAB] * 2), "not numbers"),
    (a_tree(p=None), "not numbers"),
    (a_tree(p=uniform(3)), "shape"),
    (a_tree(p=np.full((2, N_VOCAB), np.nan)), "not distributions"),
    ({"tokens": (1,), "parents": (-1,)}, r"'tokens': \(1,\)"),
    (((1, 2), (-1, -1)), r"\(\(1, 2\)"),
])
def test_a_malformed_tree_is_refused_in_one_line_naming_the_draft(tree, problem):
    with pytest.raises(PicoGPTError, match=f"the tree draft mine proposed .*{problem}") as error:
        checked_tree(tree, (2,), N_VOCAB, "mine")
    assert "\n" not in str(error.value)


def test_a_tree_of_lists_is_checked_into_the_tree_the_walk_reads(pair):
    """A Tree whose p is a list of rows used to pass the check and crash in the walk."""
    tree = checked_tree(a_tree(p=uniform(2).tolist(), tokens=[np.int64(1), 2]), (2,), N_VOCAB, "lists")
    assert tree.tokens == (1, 2) and tree.parents == (-1, -1) and tree.p.dtype == np.float64
    branch, token = walk(tree, np.vstack([uniform(3)]), np.random.default_rng(0))
    assert 0 <= token < N_VOCAB

    class Lists(TreeDraft):
        name = "lists"

        def propose(self, sequence, shape, controls, rng):
            return a_tree(p=uniform(2).tolist(), tokens=[1, 2])

    assert len(tree_sampling(Lists(), pair[1], [1], 6, shape=(2,), seed=0).tokens) == 6


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
        sample(*pair, [1], 4, seed=0, verify=raising_step)


@pytest.mark.parametrize("output", [10**6, -1, 373.9, "7", True, None, np.array([1]), [1], 10**5000],
                         ids=["10**6", "-1", "373.9", "'7'", "True", "None", "array", "list", "10**5000"])
def test_a_tree_step_must_return_one_token_id_in_the_vocabulary(pair, output):
    with pytest.raises(PicoGPTError, match="step=<lambda> returned .* inside tree_sampling") as error:
        tree_sampling(*pair, [1], 4, seed=0, verify=lambda candidates, p, q, rng: output)
    assert len(str(error.value)) < 400


def test_a_tree_step_gets_copies_and_a_right_one_runs_as_the_library_does(pair):
    def spoiling(candidates, p, q, rng):
        token = accept_among(candidates, p, q, rng)
        p[:], q[:] = np.nan, np.nan
        candidates.clear()
        return np.int64(token)

    expected = tree_sampling(*pair, [1, 2], 12, shape=(2, 2), seed=3).tokens
    assert tree_sampling(*pair, [1, 2], 12, shape=(2, 2), seed=3, verify=spoiling).tokens == expected


@pytest.mark.parametrize("output", [[10**5000], list(range(10**6))], ids=["[10**5000]", "a million ids"])
def test_a_chain_step_echoes_a_huge_output_in_a_short_line(pair, output):
    with pytest.raises(PicoGPTError, match="inside speculative_sampling") as error:
        speculative_sampling(*pair, [1], 4, seed=0, verify=lambda drafted, p, q, rng: output)
    assert len(str(error.value)) < 400


@pytest.mark.parametrize("verify", ["tokens", None, 3, ["block"]])
def test_steps_3_4_are_one_slot_a_name_or_a_step(pair, verify):
    with pytest.raises(PicoGPTError, match=r"verify=.*: expected one of 'token', 'block', or a step function of your "
                                           r"own, step\(drafted, p, q, rng\)"):
        speculative_sampling(*pair, [1], 4, verify=verify)
    with pytest.raises(PicoGPTError, match=r"verify=.*: expected one of 'token', 'traversal', or a step function of your own, "
                                           r"step\(candidates, p, q, rng\) -> token"):
        tree_sampling(*pair, [1], 4, verify=verify)


def test_a_step_in_the_slot_runs_as_the_library_does_and_step_is_gone(pair):
    assert speculative_sampling(*pair, [1], 8, seed=2, verify="token").tokens == \
        speculative_sampling(*pair, [1], 8, seed=2, verify=speculative_step).tokens
    assert tree_sampling(*pair, [1], 8, seed=2, verify="token").tokens == \
        tree_sampling(*pair, [1], 8, seed=2, verify=accept_among).tokens
    assert VERIFIERS["token"] is walk  # and the traversal: tests/test_traversal.py
    for loop in (speculative_sampling, tree_sampling):
        with pytest.raises(TypeError, match="step"):
            loop(*pair, [1], 4, step=speculative_step)


def test_the_library_verifier_returns_its_draws_to_the_trace(pair):
    """The trace's r come back from the verifier the loop ran (no list handed in and cleared)."""
    for verify in ("token", "block"):
        result = speculative_sampling(*pair, [1], 12, K=3, seed=3, verify=verify)
        assert all(len(loop.r) == (loop.decisions if verify == "token" else loop.K) for loop in result.loops)
        assert len({loop.r for loop in result.loops}) == len(result.loops)  # each loop's own draws
    assert all(loop.r == () for loop in speculative_sampling(*pair, [1], 12, K=3, seed=3,
                                                             verify=speculative_step).loops)


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


@pytest.mark.parametrize("value, options, says", [
    (Chain(4), dict(verify="block"), "not verify: the value holds its K and verify"),
    (Chain(4), dict(K=2), "not K: the value holds its K and verify"),
    (Chain(4), dict(shape=(2, 2)), "not shape"),
    (TreeShape((2, 2)), dict(shape=(3,)), "not shape: the value holds its shape"),
    (TreeShape((2, 2)), dict(K=3), "not K"),
])
def test_a_value_refuses_the_options_it_holds_in_one_line(pair, value, options, says):
    with pytest.raises(PicoGPTError, match=f"sample\\(...\\) takes .*seed.*, {says}"):
        value.sample(*pair, [1], 4, **options)


def test_a_chain_may_hold_a_step_of_your_own(pair):
    chain = Chain(3, verify=speculative_step)
    assert chain.name == "chain K = 3, speculative_step verification"
    assert chain.sample(*pair, [1, 2], 10, seed=4).tokens == Chain(3).sample(*pair, [1, 2], 10, seed=4).tokens


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


def test_a_model_view_of_an_object_that_is_no_model_is_one_line(pair):
    with pytest.raises(PicoGPTError, match="the model a ModelView sees must be a model .* lacks config, new_cache$"):
        ModelView(Lacking(pair[1]))


# ---------------------------------------------------------------------------------------------
# The rows check, over its whole domain
# ---------------------------------------------------------------------------------------------

@settings(max_examples=200, deadline=None)
@given(weights=arrays(np.float64, st.tuples(st.integers(0, 4), st.integers(1, 6)), elements=st.floats(0.01, 100)),
       spoil=st.sampled_from([None, np.nan, np.inf, -0.5, 0.0]), data=st.data())
def test_rows_are_accepted_exactly_when_each_is_a_distribution_that_makes_its_token_possible(weights, spoil, data):
    """Any rows that are distributions pass with any token of positive probability; one entry made
    NaN, inf, negative, or 0 at a row's own token, makes them fail, and the answer is a sentence."""
    rows = weights / weights.sum(axis=1, keepdims=True)
    tokens = [data.draw(st.integers(0, rows.shape[1] - 1)) for _ in rows]
    if spoil is not None and len(rows):
        t = data.draw(st.integers(0, len(rows) - 1))
        rows[t, tokens[t]] = spoil
    array, problem = distributions(rows, rows.shape, tokens)
    if spoil is None or not len(rows):
        assert problem is None and array.dtype == np.float64 and np.array_equal(array, rows)
    else:
        assert array is None and isinstance(problem, str) and "\n" not in problem
