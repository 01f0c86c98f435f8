"""Sampling controls and autoregressive sampling (Algorithm 1 of Chen et al. 2023).

Chen, Borgeaud, Irving, Lespiau, Sifre, Jumper 2023, "Accelerating Large Language Model
Decoding with Speculative Sampling", arXiv 2302.01318.

`distribution` turns logits into the probabilities we actually sample from, after the three
usual controls, always in this order:

1. temperature T: softmax(logits / T). T = 0 means greedy: a one-hot on the argmax (ties go to
   the lowest token id), not logits / (T + eps). A positive T below MIN_TEMPERATURE (1e-30) is
   refused, not rounded to greedy: there softmax(logits / T) is already one-hot in float64 for
   any two float32 logits that differ, and smaller T (1e-310) makes logits / T overflow to inf
   and the probabilities NaN. Use T = 0 for greedy.
2. top-k: keep the k most probable tokens (ties at the boundary go to the lowest ids, so exactly
   k survive), renormalise.
3. top-p (nucleus, Holtzman et al. 2020): keep the smallest set of most probable tokens whose
   cumulative probability reaches top_p. The token that crosses the threshold is kept; tokens
   of equal probability are ranked by id (lowest first), so the set is deterministic. "Reaches"
   allows 1e-12 of rounding (0.7 + 0.1 reaches 0.8). top_p = 1 keeps everything. Renormalise.

Speculative sampling applies the same controls to both the draft p and the target q, and then
reproduces the *controlled* target distribution exactly.

Reading order: Algorithm 1, then how logits become the distribution it samples from, then the
checks of a request's arguments.
"""

import functools
import math
import numbers
import time
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import numpy as np

from .errors import PicoGPTError, echo, shown

TOP_P_ROUNDING = 1e-12  # cumulative sums within this of top_p count as reaching it
MIN_TEMPERATURE = 1e-30  # smallest positive temperature accepted (0 is greedy); see above
CDF_BLOCK = 256  # tokens per block of `sample`'s two-level cumulative sums


# ---------------------------------------------------------------------------------------------
# Algorithm 1: autoregressive sampling
# ---------------------------------------------------------------------------------------------

@dataclass
class SamplingResult:
    """What autoregressive sampling produced and how long each token took."""
    tokens: list  # the N generated token ids (the prompt excluded)
    token_times_s: list = field(default_factory=list)  # wall time of each token (model call + sampling)
    seconds: float = 0.0  # total wall time, argument checks excluded

    @property
    def tokens_per_s(self):
        return len(self.tokens) / self.seconds if self.seconds else float("inf")


def autoregressive_sampling(model, ids, N, *, temperature=1.0, top_k=None, top_p=None, seed=None,
                            on_token=None):
    """Algorithm 1: sample N tokens from `model` one at a time, with its KV cache.

    One cached model call per token; the first call is the prompt prefill. `seed` is an int,
    None, or a numpy Generator (then used as is). `on_token(token)` is called as each token is
    produced (the command line streams text with it); its time is not counted in the timings.
    """
    check_model(model, "model")
    prompt = validate_sampling_args(ids, N, (model,), temperature=temperature, top_k=top_k, top_p=top_p)
    rng = random_generator(seed)
    cache = model.new_cache()
    result = SamplingResult(tokens=[])
    new = prompt  # the tokens the model has not seen yet
    callback_s = 0.0
    start = time.perf_counter()
    for _ in range(N):
        t = time.perf_counter()
        logits = logits_of(model, new, cache)[-1]  # [n_new, n_vocab] -> [n_vocab]: the next token's logits
        token = sample(distribution(logits, temperature, top_k, top_p), rng)
        result.tokens.append(token)
        result.token_times_s.append(time.perf_counter() - t)
        if on_token is not None:
            t = time.perf_counter()
            on_token(token)
            callback_s += time.perf_counter() - t
        new = [token]
    result.seconds = time.perf_counter() - start - callback_s
    return result


# ---------------------------------------------------------------------------------------------
# From logits to the distribution we sample from
# ---------------------------------------------------------------------------------------------

def softmax64(x, temperature=1.0):
    """softmax(x / temperature) over the last axis, in float64: [..., n] -> [..., n], a new array.
    Its one float64 copy of x is worked on in place (each step one pass, no temporaries)."""
    probs = np.array(x, np.float64)
    if temperature != 1:
        probs /= temperature
    probs -= probs.max(axis=-1, keepdims=True)
    np.exp(probs, out=probs)
    probs /= probs.sum(axis=-1, keepdims=True)
    return probs


def greedy(logits):
    """One-hot on the argmax; np.argmax returns the first maximum, so ties go to the lowest id."""
    probs = np.zeros(logits.shape, np.float64)
    np.put_along_axis(probs, np.argmax(logits, axis=-1)[..., None], 1.0, axis=-1)
    return probs


def renormalise(probs, keep):
    kept = np.where(keep, probs, 0.0)
    kept /= kept.sum(axis=-1, keepdims=True)
    return kept


def keep_top(probs, k, kth):
    """Mask of the k most probable tokens of each row, given the k-th largest probability kth
    [..., 1]: everything above kth, then as many tokens equal to kth as fit, lowest ids first.
    Counting the ties in id order (a cumsum over the row) is needed only where more tie than fit."""
    keep = probs >= kth
    if (np.count_nonzero(keep, axis=-1)[..., None] > k).any():  # some row has more ties at kth than room
        above = probs > kth
        ties = keep & ~above
        keep = above | (ties & (ties.cumsum(axis=-1) <= k - above.sum(axis=-1, keepdims=True)))
    return keep


def kth_largest(row, k):
    """The k-th largest value of row [n], 1 <= k <= n, in a time that hardly depends on the values.

    np.partition alone takes about 5x longer on a row of few distinct values (the teaching pair's
    probabilities) than on random ones (benchmarks/kernels/truncation.py times both). Here it only
    sees short arrays: the maxima of blocks of about sqrt(n / k) values bound the answer from
    below (t, the k-th largest maximum, is <= it: k blocks hold a value >= t). Fewer than k values
    above t: the answer is t. Otherwise it is among the values above t, which lie in the at most
    k - 1 blocks whose maximum exceeds t."""
    n = len(row)
    starts = np.arange(0, n, max(1, round(math.sqrt(n / k))))
    if len(starts) < k:  # too few blocks to bound it (k close to n)
        return np.partition(row, n - k)[n - k]
    block_max = np.maximum.reduceat(row, starts)  # [n_blocks]
    t = np.partition(block_max, len(starts) - k)[len(starts) - k]
    above = row[row > t]  # at most (k - 1) blocks' worth
    if len(above) < k:
        return t
    return np.partition(above, len(above) - k)[len(above) - k]


def top_k_filter(probs, k):
    """Keep the k most probable tokens of each row (ties at the boundary: lowest ids), renormalise."""
    n_vocab = probs.shape[-1]
    if k >= n_vocab:
        return probs
    kth = np.array([kth_largest(row, k) for row in probs.reshape(-1, n_vocab)])  # the k-th largest
    return renormalise(probs, keep_top(probs, k, kth.reshape(probs.shape[:-1] + (1,))))


def nucleus(row, top_p):
    """(k, kth) of top-p on row [n]: the nucleus's size and its smallest probability.

    A token is kept while the tokens ranked above it have not reached top_p; the first always is.
    The ranking needs only the head of the row: the values >= some t, sorted, are the first values
    of the whole row sorted (ties included), and their cumulative sums its first cumulative sums,
    so once the head's mass reaches top_p the rest of the row cannot change k. To find t without
    sorting the row: the tokens under (1 - top_p) / 2n hold less than (1 - top_p) / 2 of the mass,
    so the nucleus is among the others; of those, t is the highest power of 2 whose head holds
    top_p, from the mass of each binary exponent (a non-negative float64's bits shifted right by
    52 are its exponent, in the order of the values). Should rounding leave that head short of
    top_p, the whole row is sorted, as a flat row needs anyway."""
    threshold = top_p - TOP_P_ROUNDING
    candidates = row[row >= (1 - top_p) / (2 * len(row))]  # [n_candidates]
    bits = np.asarray(candidates, np.float64).view(np.uint64)  # [n_candidates]
    exponent = (bits >> np.uint64(52)).astype(np.intp)  # [n_candidates]
    mass_from = np.bincount(exponent, weights=candidates)[::-1].cumsum()[::-1]  # [n_exponents]: at or above each
    reaching = np.flatnonzero(mass_from >= top_p)
    head = candidates[exponent >= reaching[-1]] if len(reaching) else row
    head = -np.sort(-head)  # descending
    cumulative = head.cumsum()
    if cumulative[-1] < threshold:  # rounding: the whole row
        head = -np.sort(-row)
        cumulative = head.cumsum()
    mass_before = np.concatenate([np.zeros(1, cumulative.dtype), cumulative[:-1]])
    k = max(1, int((mass_before < threshold).sum()))
    return k, head[k - 1]


def top_p_filter(probs, top_p):
    """Keep the smallest most-probable set whose cumulative probability reaches top_p (the token
    that crosses is kept; equal probabilities are ranked by id, lowest first), renormalise."""
    if top_p >= 1:
        return probs
    k, kth = zip(*(nucleus(row, top_p) for row in probs.reshape(-1, probs.shape[-1])))
    shape = probs.shape[:-1] + (1,)
    return renormalise(probs, keep_top(probs, np.reshape(k, shape), np.reshape(kth, shape)))


def distribution(logits, temperature=1.0, top_k=None, top_p=None):
    """Probabilities (float64) after temperature, then top-k, then top-p.

    logits [n_vocab] -> [n_vocab], or [n, n_vocab] -> [n, n_vocab] (each row separately).
    """
    validate_controls(temperature, top_k, top_p)
    logits = np.asarray(logits)
    if not np.isfinite(logits).all():
        raise PicoGPTError("the logits hold NaN or inf, so they give no distribution: the model's "
                           "weights or config are bad (a GPT2 model says which model)")
    if temperature == 0:
        return greedy(logits)
    probs = softmax64(logits, temperature)
    if top_k is not None:
        probs = top_k_filter(probs, top_k)
    if top_p is not None:
        probs = top_p_filter(probs, top_p)
    return probs


def sample(probs, rng):
    """One token from probs [n_vocab] by inverse CDF: the first id whose cumulative probability
    exceeds u * total, u ~ U[0, 1). Zero-probability tokens are never returned.

    The cumulative sums are taken in two levels, because a cumsum adds one number after another
    (over 50,257 tokens that is most of a draw's time): the sums of blocks of CDF_BLOCK tokens
    find the block where the cumulative probability crosses u * total, and a cumsum inside that
    block finds the token, the one a single cumsum over every token would find (up to rounding)."""
    probs = np.asarray(probs, np.float64)
    block_cdf = np.add.reduceat(probs, np.arange(0, len(probs), CDF_BLOCK)).cumsum()  # [n_blocks]
    target = rng.random() * block_cdf[-1]  # u * total
    block = int(block_cdf.searchsorted(target, side="right"))  # the first block whose cdf exceeds it
    start = block * CDF_BLOCK
    in_block = probs[start: start + CDF_BLOCK]
    token = int(in_block.cumsum().searchsorted(target - (block_cdf[block - 1] if block else 0.0), side="right"))
    if token == len(in_block):  # the subtraction rounded up to the block's whole sum: its last possible token
        token = int(np.flatnonzero(in_block)[-1])
    return start + token


# ---------------------------------------------------------------------------------------------
# Checking the arguments once, with messages a student can act on
# ---------------------------------------------------------------------------------------------

def is_whole(x):
    """An integer, not a bool (True is 1 to Python, never a count to a student)."""
    return isinstance(x, numbers.Integral) and not isinstance(x, bool)


def is_finite_number(x):
    """A real number, not a bool, that a float holds finitely: not inf or NaN, and not an
    integer too large for a float (10**400, where math.isfinite raises OverflowError)."""
    try:
        return isinstance(x, numbers.Real) and not isinstance(x, bool) and math.isfinite(float(x))
    except OverflowError:
        return False


def validate_controls(temperature=1.0, top_k=None, top_p=None):
    """Raise PicoGPTError unless temperature is 0 or in [MIN_TEMPERATURE, inf), top_k >= 1 (or
    None), 0 < top_p <= 1 (or None)."""
    if not is_finite_number(temperature) or temperature < 0:
        raise PicoGPTError(f"temperature must be a number >= 0 (0 means greedy), got {temperature!r}")
    if 0 < temperature < MIN_TEMPERATURE:
        raise PicoGPTError(f"temperature {temperature!r} is below {MIN_TEMPERATURE:g}, where logits / "
                           "temperature overflow and sampling is greedy anyway: use temperature=0 for greedy")
    if top_k is not None and (not is_whole(top_k) or top_k < 1):
        raise PicoGPTError(f"top_k must be a whole number >= 1 (or None to keep every token), got {top_k!r}")
    if top_p is not None and (not is_finite_number(top_p) or not 0 < top_p <= 1):
        raise PicoGPTError(f"top_p must be in (0, 1] (1 keeps every token), got {top_p!r}")


def random_generator(seed):
    """The numpy Generator every random draw uses: from an int >= 0, None (fresh entropy), or a
    Generator, used as is (anything else numpy.random.default_rng takes works too)."""
    try:
        if isinstance(seed, bool) or is_whole(seed) and seed < 0:
            raise ValueError
        return np.random.default_rng(seed)
    except (TypeError, ValueError):
        raise PicoGPTError(f"seed must be a whole number >= 0 (or None for a random one), got {seed!r}") from None


@runtime_checkable
class Model(Protocol):
    """What the samplers ask of a model: `model(ids, cache)` -> logits [len(ids), n_vocab] (a token
    tree's call adds positions and a mask: tree.py), its own `new_cache()`, `validate_ids(ids,
    n_past)`, a `config` with the sizes `n_vocab` and `n_ctx`, a `name`. picogpt.load's GPT2 is
    one (picogpt/model.py); so is any object with these members, a user's wrapper that times or
    logs the calls of one included, with no base class to inherit (model.ModelView forwards all
    but the call, for wrappers that only change it)."""

    config: object
    name: str

    def __call__(self, ids, cache=None): ...

    def new_cache(self): ...

    def validate_ids(self, ids, n_past=0): ...


@functools.cache
def members(protocol):
    """(the annotated attributes, the methods) of `protocol`, a typing.Protocol."""
    methods = tuple(name for name, value in vars(protocol).items()
                    if callable(value) and (name == "__call__" or not name.startswith("_")))
    return tuple(protocol.__annotations__), methods


def lacks(thing, protocol):
    """The members of `protocol` (a typing.Protocol) that `thing` does not have, a method it has
    counting only if it can be called: [] for a thing that is one. The loops ask this, not
    isinstance(thing, protocol), which on Python 3.11 works the protocol's members out again at
    every call, several times in every generation."""
    attributes, methods = members(protocol)
    return [*(name for name in attributes if not hasattr(thing, name)),
            *(name for name in methods if not callable(getattr(thing, name, None)))]


def check_model(model, role, alternative=""):
    """Raise one readable PicoGPTError unless `model` has what a Model has, its config the two
    sizes the loops read (whole numbers >= 1)."""
    if lacks(model, Model):
        raise PicoGPTError(f"the {role} must be a model (picogpt.load(...)){' ' + alternative if alternative else ''}: "
                           f"{echo(model, 80)} lacks {', '.join(lacks(model, Model))}")
    sizes = {size: getattr(model.config, size, None) for size in ("n_vocab", "n_ctx")}
    if not all(is_whole(value) and value >= 1 for value in sizes.values()):
        raise PicoGPTError(f"the {role} {echo(model.name, 60)} has a config whose sizes are "
                           f"{', '.join(f'{size}={echo(value, 20)}' for size, value in sizes.items())}: a model's config "
                           "gives n_vocab and n_ctx as whole numbers >= 1 (a GPT2Config)")


def logits_of(model, ids, cache, *tree):
    """One call of a model as the loops make it, `model(ids, cache)` (a token tree's adds its
    positions and mask), and what it returned checked: logits [len(ids), n_vocab], an array of
    floats. A wrapper that returns the last row only, a list, or a row of another vocabulary stops
    the loop here, in one line that names the model, not at a later index."""
    logits = model(ids, cache, *tree)
    expected = (len(ids), model.config.n_vocab)
    if not isinstance(logits, np.ndarray) or logits.dtype.kind != "f" or logits.shape != expected:
        got = (f"shape {list(logits.shape)} of {logits.dtype}" if isinstance(logits, np.ndarray)
               else shown(type(logits).__name__, 40))
        raise PicoGPTError(f"{shown(model.name, 60)} returned {got} for {len(ids)} ids: a model's call returns "
                           f"its logits [len(ids), n_vocab] = {list(expected)}, an array of floats")
    return logits


def validate_sampling_args(ids, N, models=(), *, K=None, temperature=1.0, top_k=None, top_p=None):
    """Validate a generation request before any model runs; return the prompt as a list of ints.

    `models` are the models that will run (the target for Algorithm 1, draft and target for
    Algorithm 2): a draft and target must share one vocabulary, and each model checks that the
    prompt's ids are in its vocabulary and that the prompt plus N tokens fit its context (its
    `validate_ids`, the one home of those checks: picogpt/model.py).
    """
    if not is_whole(N) or N < 1:
        raise PicoGPTError(f"N, the number of tokens to generate, must be a whole number >= 1, got {N!r}")
    if K is not None and (not is_whole(K) or K < 1):
        raise PicoGPTError(f"K, the number of draft tokens per loop, must be a whole number >= 1, got {K!r}")
    validate_controls(temperature, top_k, top_p)
    prompt = np.asarray(ids)
    if prompt.size == 0:
        raise PicoGPTError("the prompt is empty: give at least one token (some text, or '<|endoftext|>')")
    if prompt.ndim != 1 or not np.issubdtype(prompt.dtype, np.integer):
        raise PicoGPTError(f"the prompt must be a 1-D sequence of token ids, got shape {prompt.shape} "
                           f"of {prompt.dtype}")
    vocabularies = {model.config.n_vocab for model in models}
    if len(vocabularies) > 1:
        sizes = " vs ".join(f"{model.name}: {model.config.n_vocab:,}" for model in models)
        raise PicoGPTError(f"the draft and target vocabularies differ ({sizes} tokens): speculative "
                           "sampling compares p and q token by token, so both models must share one tokenizer")
    for model in models:
        # the N generated tokens follow the prompt: prompt + N positions, as if N came before it
        model.validate_ids(prompt, n_past=N)
    return [int(t) for t in prompt]
