"""Exercise checkers for the notebooks: each says whether an answer is right, and why.

Every `check_...` is a pure function of the student's answer (a number, or a function to try),
returning a `Check`: truthy when right, and shown in a notebook as one line, "✔ right: ..." or
"✘ not yet: ...". A wrong answer gets a hint (the method, or the known mistake it matches)
but not the number, so the exercise stays an exercise; a right one gets the worked solution.
The defaults of each checker are the numbers its notebook's exercise asks about.
"""

import itertools
import math
from dataclasses import dataclass

import numpy as np

from ..sampling import distribution


@dataclass(frozen=True)
class Check:
    ok: bool
    message: str

    def __bool__(self):
        return self.ok

    def __repr__(self):
        return ("✔ right: " if self.ok else "✘ not yet: ") + self.message

    __str__ = __repr__


def not_answered(answer):
    """The notebooks' placeholder is `answer = None` (or `...`)."""
    return answer is None or answer is Ellipsis


def as_number(answer):
    """The answer as a float, or None when it is not a finite number (True is not one, nor an
    integer too large for a float)."""
    try:
        value = float(answer)
    except (TypeError, ValueError, OverflowError):
        return None
    return value if math.isfinite(value) and not isinstance(answer, bool) else None


def shown_number(value):
    """A number as the student gave it, exactly: a whole number with thousands separators
    (7,087,872, never 7.08787e+06), any other float in the shortest form that reads back as it."""
    if float(value).is_integer() and abs(value) < 2**53:
        return f"{int(value):,}"
    return f"{value:,}"


def check_number(answer, expected, how, solution, mistakes=(), rel_tol=0.01):
    """Right when within rel_tol of `expected`: then show the worked `solution`. Wrong: the hint
    of a known mistake, given as (the value that mistake gives, what went wrong), else `how`.
    The answer is shown as given (shown_number): a hint about a number the student did not type
    would be about someone else's answer."""
    if not_answered(answer):
        return Check(False, "replace the placeholder None with your number, then run the cell again.")
    value = as_number(answer)
    if value is None:
        return Check(False, f"expected a number, got {answer!r}.")
    if math.isclose(value, expected, rel_tol=rel_tol):
        return Check(True, f"{shown_number(value)}. {solution}")
    for mistaken, hint in mistakes:
        if math.isclose(value, mistaken, rel_tol=rel_tol):
            return Check(False, f"{shown_number(value)}: {hint}.")
    return Check(False, f"{shown_number(value)} is not it. Hint: {how}")


# ---------------------------------------------------------------------------------------------
# Notebook 01: GPT-2 in NumPy
# ---------------------------------------------------------------------------------------------

def block_params(n_embd):
    """Parameters of one GPT-2 block: 2 LayerNorms, attention (c_attn, c_proj), MLP (c_fc, c_proj)."""
    d = n_embd
    layer_norms = 2 * (d + d)  # ln_1, ln_2: weight + bias
    attention = (d * 3 * d + 3 * d) + (d * d + d)  # c_attn [d, 3d] + bias, c_proj [d, d] + bias
    mlp = (d * 4 * d + 4 * d) + (4 * d * d + d)  # c_fc [d, 4d] + bias, c_proj [4d, d] + bias
    return layer_norms + attention + mlp  # = 12 d**2 + 13 d


def check_block_params(answer, n_embd=768):
    """How many parameters does one transformer block of GPT-2 small (n_embd = 768) hold?"""
    how = ("add up every array of one block (params['h'][0] in the notebook): ln_1 and ln_2 "
           "(weight and bias), attn's c_attn and c_proj, mlp's c_fc and c_proj (weights and biases); "
           "write their shapes in terms of n_embd.")
    solution = (f"ln_1 + ln_2: 4 n_embd; c_attn: 3 n_embd² + 3 n_embd; attn c_proj: n_embd² + n_embd; "
                f"c_fc: 4 n_embd² + 4 n_embd; mlp c_proj: 4 n_embd² + n_embd. In all "
                f"12 n_embd² + 13 n_embd = {block_params(n_embd):,} for n_embd = {n_embd}.")
    mistakes = [(12 * n_embd**2, "close, but the biases and the LayerNorm weights count too")]
    return check_number(answer, block_params(n_embd), how, solution, mistakes, rel_tol=1e-9)


def positions_processed(n_prompt, N, use_cache):
    """Positions the model runs over to generate N tokens after an n_prompt-token prompt."""
    if use_cache:
        return n_prompt + (N - 1)  # the prompt once, then one new position per further token
    return sum(n_prompt + t for t in range(N))  # token t recomputes all n_prompt + t positions


def check_kv_cache_saving(answer, n_prompt=10, N=100):
    """How many times fewer positions does a decoder with a KV cache run the model over, to
    generate N = 100 tokens after a prompt of n_prompt = 10?"""
    without = positions_processed(n_prompt, N, use_cache=False)
    with_cache = positions_processed(n_prompt, N, use_cache=True)
    how = ("without a cache, token t (t = 0 .. N-1) reruns all n_prompt + t positions: add those "
           "up. With one, the prompt runs once and every later token runs 1 new position. "
           "Divide the first total by the second.")
    solution = (f"Without a cache: N n_prompt + N(N-1)/2 = {without:,} positions. With one: "
                f"n_prompt + N - 1 = {with_cache:,}. Ratio {without / with_cache:.1f}, and it grows "
                f"with N: without a cache, generation is quadratic in its length.")
    mistakes = [(with_cache / without, "that is with/without; the question asks without/with"),
                (without / (n_prompt + N), f"with the cache the prompt runs once and each of the N − 1 tokens after the "
                 f"first adds one position: n_prompt + N − 1 = {with_cache}, not n_prompt + N"),
                (sum(n_prompt + t for t in range(1, N + 1)) / with_cache,
                 "without a cache, token t = 0 .. N − 1 reruns n_prompt + t positions: the first token runs "
                 "the prompt alone")]
    # 3 significant digits: rounding is fine, an off-by-one in either count (54.1, 55.5) is not
    return check_number(answer, without / with_cache, how, solution, mistakes, rel_tol=0.002)


def kv_cache_bytes(n_layer, n_embd, n_positions, bytes_per_number=4):
    """Bytes of a KV cache: a key and a value vector of n_embd numbers per layer and position."""
    return 2 * n_layer * n_positions * n_embd * bytes_per_number


def kv_cache_slips(n_layer):
    """Each factor of the KV cache's size: (its right value, {a wrong value: the slip that gives it})."""
    return [(2, {1: "counting keys or values but not both"}),
            (4, {1: "counting numbers rather than bytes", 2: "counting 2 bytes per number (float16)",
                 8: "counting 8 bytes per number (float64)"}),
            (n_layer, {1: "counting one layer instead of all of them"})]


def kv_cache_mistakes(n_layer, n_embd, n_positions):
    """[(a wrong size, [every way of getting it])]: each combination of slips, grouped by the size
    it gives (two slips can give one number: keys only, or float16, both halve it), so that a hint
    names every cause a number could have, never only one of them."""
    by_size = {}
    choices = [[(right, None), *((value, slip) for value, slip in wrong.items() if value != right)]
               for right, wrong in kv_cache_slips(n_layer)]  # with n_layer = 1, one layer is no slip
    for factors in itertools.product(*choices):
        slips = [slip for _, slip in factors if slip]
        size = math.prod(value for value, _ in factors) * n_positions * n_embd
        if slips and size != kv_cache_bytes(n_layer, n_embd, n_positions):
            by_size.setdefault(size, []).append(" and ".join(slips))
    return list(by_size.items())


def check_kv_cache_bytes(answer, n_layer=48, n_embd=1600, n_positions=1024):
    """How many bytes does GPT-2 XL's KV cache hold at its full context of 1024 positions (float32)?"""
    expected = kv_cache_bytes(n_layer, n_embd, n_positions)
    how = ("for every layer and every position the cache keeps a key and a value, each a vector "
           "of n_embd float32 numbers (all heads together).")
    solution = (f"2 (key and value) × {n_layer} layers × {n_positions} positions × {n_embd} numbers "
                f"× 4 bytes = {expected:,} bytes ({expected / 2**20:,.0f} MiB), read again, on "
                f"top of the weights, for every new token.")
    mistakes = [(size, "that is the size you get by " + ", or by ".join(ways) + ": the cache holds keys and values, "
                 "4 bytes each (float32), in every layer")
                for size, ways in kv_cache_mistakes(n_layer, n_embd, n_positions)]
    return check_number(answer, expected, how, solution, mistakes, rel_tol=1e-9)


# ---------------------------------------------------------------------------------------------
# Notebook 02: autoregressive sampling
# ---------------------------------------------------------------------------------------------

def trial_logits(seed=0, n_vocab=1000):
    """A few logit vectors to try a student's sampling function on (one with a huge gap)."""
    rng = np.random.default_rng(seed)
    peaked = rng.normal(size=n_vocab)
    peaked[7] += 30
    return [rng.normal(scale=3, size=n_vocab), rng.normal(size=20), peaked]


def check_top_k(my_top_k, ks=(1, 5, 50)):
    """Does my_top_k(logits, k) return the top-k distribution: softmax over the k largest logits,
    probability 0 elsewhere? Tried against picogpt.sampling.distribution on a few logit vectors."""
    if not_answered(my_top_k):
        return Check(False, "write your function my_top_k(logits, k), then pass it in instead of None.")
    if not callable(my_top_k):
        return Check(False, f"expected a function my_top_k(logits, k), got {type(my_top_k).__name__}.")
    for logits in trial_logits():
        for k in (k for k in ks if k <= len(logits)):
            expected = distribution(logits, top_k=k)
            case = f"for k = {k} on {len(logits)} logits"
            try:
                probs = np.asarray(my_top_k(logits.copy(), k), dtype=np.float64)
            except Exception as e:  # the student's code: report it, don't crash the notebook
                return Check(False, f"{case}, my_top_k raised {type(e).__name__}: {e}")
            if probs.shape != expected.shape:
                return Check(False, f"{case} it returned shape {probs.shape}, expected "
                                    f"{expected.shape}: one probability per token.")
            if not math.isclose(probs.sum(), 1.0, rel_tol=1e-6):
                return Check(False, f"{case} the probabilities sum to {probs.sum():.6g}, not 1: "
                                    "renormalise after zeroing the tokens outside the top k.")
            if np.count_nonzero(probs) != k:
                return Check(False, f"{case}, {np.count_nonzero(probs)} tokens have nonzero "
                                    f"probability; expected exactly k = {k}.")
            if not np.allclose(probs, expected, atol=1e-9):
                return Check(False, f"{case} the probabilities differ from a softmax over the "
                                    "k largest logits (the *largest*? a softmax, not logits / sum?).")
    return Check(True, "a softmax over the k largest logits and zero elsewhere, on every trial.")


def check_min_time_per_token_ms(answer, bandwidth_gbs, n_params=1_557_611_200, bytes_per_param=4):
    """At bandwidth_gbs, the least time in milliseconds GPT-2 XL (float32) can take per token."""
    n_bytes = n_params * bytes_per_param
    expected_ms = n_bytes / (bandwidth_gbs * 1e9) * 1e3
    how = ("each decoded token reads every weight once: bytes of weights / (bytes per second) "
           "= seconds; then convert to milliseconds. 1 GB/s = 10⁹ bytes per second.")
    solution = (f"{n_params:,} parameters × {bytes_per_param} bytes = {n_bytes / 1e9:.2f} GB read "
                f"per token; at {bandwidth_gbs:.3g} GB/s that is {expected_ms:,.3g} ms, however "
                f"fast the arithmetic is.")
    mistakes = [(expected_ms / 1e3, "that is in seconds; the question asks for milliseconds"),
                (expected_ms * 1e3, "that is in microseconds; the question asks for milliseconds"),
                (expected_ms / bytes_per_param, f"each float32 parameter is {bytes_per_param} bytes")]
    return check_number(answer, expected_ms, how, solution, mistakes)


DECODING_FLOPS_PER_BYTE = 0.5  # a float32 weight: 4 bytes read, one multiply-add (2 FLOPs)


def machine_line(machine_flops_per_byte):
    """Where decoding stands on a machine that does machine_flops_per_byte FLOPs in the time its
    memory delivers a byte, as a sentence. The verdict is read from the ratio as printed (3
    significant digits), so that the number and the words beside it always agree."""
    need = DECODING_FLOPS_PER_BYTE
    if machine_flops_per_byte is None:
        return (f"Compare it with a machine's FLOPs per byte (its GFLOP/s over its GB/s): where that "
                f"ratio is above {need}, decoding waits on memory.")
    ratio = float(f"{machine_flops_per_byte:.3g}")
    said = f"This machine does {ratio:.3g} FLOPs in the time its memory delivers one byte"
    if ratio > need:
        return f"{said}, {ratio / need:.3g} times what decoding needs: decoding waits on memory."
    if ratio == need:
        return f"{said}, just what decoding needs: memory and arithmetic would finish together."
    return f"{said}, less than the {need} decoding needs: here the arithmetic, not memory, sets the pace."


def check_arithmetic_intensity(answer, machine_flops_per_byte=None):
    """How many FLOPs per byte of weights read does decoding one token (float32) do? The
    notebook passes this machine's ratio, matmul GFLOP/s over bandwidth GB/s, for the solution."""
    how = ("in x @ W with x a single vector, each weight of W is read once and used in one "
           "multiply and one add; a float32 weight takes 4 bytes.")
    machine = machine_line(machine_flops_per_byte)
    solution = f"2 FLOPs (a multiply and an add) per weight / 4 bytes per weight = 0.5 FLOP per byte. {machine}"
    mistakes = [(2, "that is FLOPs per weight; divide by the 4 bytes each float32 weight takes"),
                (0.25, "a multiply-add is 2 FLOPs, not 1")]
    return check_number(answer, 0.5, how, solution, mistakes)
