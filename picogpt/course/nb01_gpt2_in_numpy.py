"""Notebook 01 (GPT-2 in NumPy): what only it uses, its questions: a block's parameters, what the KV
cache saves and what it costs in bytes.

Every `check_...` is a pure function of the learner's answer returning a `Check` (grading.py):
"✔ right: ..." with the worked solution, or "✘ not yet: ..." with a hint (the method, or the known
mistake it matches) but not the number. The defaults of each checker are the numbers its
notebook's question asks about.
"""

import itertools
import math

from .grading import check_number


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
