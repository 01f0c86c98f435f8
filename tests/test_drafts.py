"""Other drafts (picogpt/drafts.py): each proposes what it says, and speculative sampling with it
still returns the target's distribution — by enumeration, by greedy equality, by chi-square."""

import numpy as np
import pytest
from helpers import random_gpt2
from helpers_sampling import MemoModel, chi_square_test, joint_distribution

from picogpt import autoregressive_sampling, rejection, speculative_sampling
from picogpt.course import chain_step
from picogpt.drafts import AdaptiveK, PromptLookup, first_layers, lookup
from picogpt.errors import PicoGPTError
from picogpt.gpt2 import gpt2
from picogpt.speculative import ChainDraft, ModelDraft

PROMPT = [3, 1, 4, 3, 1]  # its last 2-gram (3, 1) occurred before: prompt lookup proposes 4, 3, 1
# As many generations as the test's power needs: the broken variant below fails it at this count with
# p < 1e-9 (tests/test_speculative.py sizes its samples the same way)
N_SAMPLES = 5_000
SIGNIFICANCE = 1e-3


def one_hot(x, n_vocab):
    p = np.zeros(n_vocab)
    p[x] = 1.0
    return p


# ---------------------------------------------------------------------------------------------
# Prompt lookup
# ---------------------------------------------------------------------------------------------

def test_lookup_proposes_what_followed_the_latest_earlier_occurrence_of_the_longest_suffix():
    assert lookup([5, 6, 7, 1, 5, 6, 8, 2, 5, 6], K=3) == [8, 2, 5]  # (5, 6) last seen before 8
    assert lookup([1, 2, 3, 9, 2, 3], K=2, ngram_max=3) == [9, 2]  # (9, 2, 3) no, (2, 3) yes
    assert lookup([4, 7, 7], K=5) == [7]  # the 1-gram (7) at position 1, followed by the last token
    assert lookup([1, 2, 3], K=4) == [] and lookup([1], K=4) == []  # nothing earlier matches
    assert lookup([1, 2, 1, 2, 1, 2], K=10) == [1, 2]  # a continuation stops at the end of the text


def test_prompt_lookup_proposes_point_masses():
    drafted, p = PromptLookup(n_vocab=8).propose([3, 1, 4, 3, 1], K=2, controls={}, rng=None)
    assert drafted == [4, 3] and p.shape == (2, 8)
    np.testing.assert_array_equal(p, [one_hot(4, 8), one_hot(3, 8)])
    drafted, p = PromptLookup(n_vocab=8).propose([1, 2, 3], K=2, controls={}, rng=None)
    assert drafted == [] and p.shape == (0, 8)


def test_a_point_mass_draft_keeps_x_with_probability_q_x_and_resamples_q_without_x():
    q = np.array([0.1, 0.2, 0.3, 0.4])
    for x in range(4):
        p = one_hot(x, 4)
        assert rejection.accept_probability(p, q, x) == pytest.approx(q[x])  # r < min(1, q(x)/1)
        without_x = np.where(np.arange(4) == x, 0.0, q) / (1 - q[x])
        np.testing.assert_allclose(rejection.residual(p, q), without_x)
        np.testing.assert_allclose(rejection.output_distribution(p, q), q, atol=1e-15)  # Theorem 1


def test_the_step_graders_enumeration_gives_q_for_point_mass_drafts():
    """Every (drafts, output) of Algorithm 2's step, enumerated as the grader does, when p is a
    point mass: the first token is distributed as q_1, and after an accepted x~_1 the second as q_2."""
    q = np.array([[0.2, 0.5, 0.3], [0.6, 0.1, 0.3], [0.3, 0.3, 0.4]])
    case = chain_step.StepCase(p=np.array([one_hot(1, 3), one_hot(0, 3)]), q=q)
    joint = chain_step.exact_joint(chain_step.ALGORITHM_2, case)
    first, second = np.zeros(3), np.zeros(3)
    for (_, output), prob in joint.items():
        first[output[0]] += prob
        if output[0] == 1 and len(output) > 1:
            second[output[1]] += prob / q[0, 1]  # given the first token was the draft
    np.testing.assert_allclose(first, q[0], atol=1e-15)
    np.testing.assert_allclose(second, q[1], atol=1e-15)


# ---------------------------------------------------------------------------------------------
# The target's first layers
# ---------------------------------------------------------------------------------------------

def test_first_layers_runs_the_first_blocks_then_the_final_norm_and_head_on_the_same_arrays():
    target = random_gpt2(2, n_layer=3)
    draft = first_layers(target, 2)
    assert draft.config.n_layer == 2 and draft.params["wte"]["weight"] is target.params["wte"]["weight"]
    assert draft.params["h"][1] is target.params["h"][1] and draft.n_params < target.n_params
    ids = np.array([3, 1, 4, 1])
    expected = gpt2(ids, {**target.params, "h": target.params["h"][:2]}, draft.config)
    np.testing.assert_allclose(draft(ids), expected, atol=1e-5)
    assert not np.allclose(draft(ids), target(ids), atol=1e-3)  # the third layer mattered
    for bad in (0, 3, 4, True, 2.5):  # True used to be taken as 1, 2.5 to fail in a slice
        with pytest.raises(PicoGPTError, match="first layers"):
            first_layers(target, bad)


@pytest.mark.parametrize("ngram_max", [0, True, 2.5])
def test_prompt_lookup_takes_a_whole_number_of_tokens_per_n_gram(ngram_max):
    with pytest.raises(PicoGPTError, match="ngram_max must be a whole number >= 1"):
        PromptLookup(n_vocab=8, ngram_max=ngram_max)


# ---------------------------------------------------------------------------------------------
# Adaptive K
# ---------------------------------------------------------------------------------------------

class Scripted(ChainDraft):
    """A draft that proposes K copies of token 0 (p a point mass), and records what it was asked."""
    models = ()
    name = "scripted"

    def __init__(self):
        self.asked = []

    def propose(self, sequence, K, controls, rng):
        self.asked.append(K)
        return [0] * K, np.tile(one_hot(0, 4), (K, 1))


def test_adaptive_K_adds_2_after_a_full_acceptance_and_takes_1_otherwise():
    inner = Scripted()
    adaptive = AdaptiveK(inner, K_start=4)
    adaptive.start()
    n = 10
    for accepted_of_proposed, K_next in ((4, 6), (6, 8), (3, 7), (0, 6), (6, 8), (8, 10)):
        adaptive.propose([0] * n, K=10, controls={}, rng=None)
        adaptive.keep(n, range(accepted_of_proposed))
        assert adaptive.K == K_next
        n += accepted_of_proposed + 1
    adaptive.propose([0] * n, K=10, controls={}, rng=None)  # asked for 10 at most
    assert inner.asked == [4, 6, 8, 7, 6, 8, 10]
    for _ in range(12):  # rejections all the way down: never below 1
        adaptive.propose([0] * n, K=10, controls={}, rng=None)
        adaptive.keep(n, [])
    assert adaptive.K == 1
    adaptive.start()
    assert adaptive.K == 4  # a new run starts again


def test_adaptive_K_with_a_perfect_draft_grows_to_the_cap():
    target = random_gpt2(2)
    result = speculative_sampling(AdaptiveK(target, K_start=2), target, [3, 1], 24, K=7, seed=0)
    assert [loop.K for loop in result.loops][:4] == [2, 4, 6, 7]
    assert result.alpha_hat == 1.0


# ---------------------------------------------------------------------------------------------
# Every draft, inside Algorithm 2: exact
# ---------------------------------------------------------------------------------------------

def drafts_of(draft, target):
    return {"the paper's draft model": draft, "ModelDraft": ModelDraft(draft),
            "prompt lookup": PromptLookup(target.config.n_vocab),
            "the target's first layer": first_layers(target, 1),
            "adaptive K": AdaptiveK(draft, K_start=1)}


@pytest.fixture(scope="module")
def pair():
    return random_gpt2(1), random_gpt2(2, n_layer=2)


@pytest.mark.parametrize("name", list(drafts_of(random_gpt2(1), random_gpt2(2, n_layer=2))))
def test_greedy_speculative_with_every_draft_equals_greedy_autoregressive(pair, name):
    draft, target = pair
    for prompt in ([0], PROMPT, [7, 7, 2, 5, 7, 7]):
        N = target.config.n_ctx - len(prompt)
        expected = autoregressive_sampling(target, prompt, N, temperature=0).tokens
        for K in (1, 3, 6):
            result = speculative_sampling(drafts_of(draft, target)[name], target, prompt, N, K=K, temperature=0, seed=K)
            assert result.tokens == expected, f"K={K}, prompt {prompt}"


def test_prompt_lookup_runs_loops_with_no_draft_and_costs_one_target_call_each(pair):
    target = pair[1]
    result = speculative_sampling(PromptLookup(target.config.n_vocab), target, [1, 2, 3], 6, K=4, seed=0)
    first = result.loops[0]
    assert first.K == 0 and first.r == () and len(first.tokens) == 1 and not first.resampled
    assert len(result.tokens) == 6


@pytest.mark.slow
@pytest.mark.parametrize("name", ["prompt lookup", "the target's first layer", "adaptive K"])
def test_speculative_sampling_with_every_draft_returns_the_target_joint_distribution(pair, name):
    draft, target = pair
    strategy = {"prompt lookup": PromptLookup(target.config.n_vocab),
                "the target's first layer": ModelDraft(MemoModel(first_layers(target, 1))),
                "adaptive K": AdaptiveK(MemoModel(draft), K_start=1)}[name]
    memo_target = MemoModel(target)
    exact = joint_distribution(target, PROMPT, 2)
    rng = np.random.default_rng(0)
    counts = np.zeros((target.config.n_vocab,) * 2)
    for _ in range(N_SAMPLES):
        counts[tuple(speculative_sampling(strategy, memo_target, PROMPT, 2, K=3, seed=rng).tokens)] += 1
    statistic, dof, p_value = chi_square_test(counts, exact)
    print(f"{name}: chi2={statistic:.1f}, dof={dof}, p={p_value:.3g}")
    assert p_value > SIGNIFICANCE


@pytest.mark.slow
def test_the_same_test_catches_a_point_mass_draft_resampled_from_q(pair, monkeypatch):
    target = pair[1]
    monkeypatch.setattr(rejection, "residual", lambda p, q: q)  # the classic bug, with a point-mass draft
    exact = joint_distribution(target, PROMPT, 2)
    rng = np.random.default_rng(0)
    counts = np.zeros((target.config.n_vocab,) * 2)
    memo_target, lookup_draft = MemoModel(target), PromptLookup(target.config.n_vocab)
    for _ in range(N_SAMPLES):
        counts[tuple(speculative_sampling(lookup_draft, memo_target, PROMPT, 2, K=3, seed=rng).tokens)] += 1
    assert chi_square_test(counts, exact)[2] < 1e-9


@pytest.mark.parametrize("K_start", [0, -3, 2.5, "4", True, None])
def test_adaptive_K_takes_a_whole_number_of_drafts_to_start_with(pair, K_start):
    with pytest.raises(PicoGPTError, match=f"AdaptiveK's K_start must be a whole number >= 1, got {K_start!r}"):
        AdaptiveK(pair[0], K_start=K_start)


@pytest.mark.parametrize("step", ["up", "down"])
@pytest.mark.parametrize("value", [-1, 0.5, False])
def test_adaptive_K_takes_whole_steps(pair, step, value):
    with pytest.raises(PicoGPTError, match=f"AdaptiveK's {step} must be a whole number >= 0"):
        AdaptiveK(pair[0], **{step: value})


@pytest.mark.parametrize("n_vocab", [0, -1, 8.0, True, "8", None])
def test_prompt_lookup_takes_the_targets_vocabulary_size(n_vocab):
    with pytest.raises(PicoGPTError, match="n_vocab must be the target's vocabulary size, a whole number >= 1"):
        PromptLookup(n_vocab)
