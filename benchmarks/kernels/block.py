"""gpt2.py's forward pass for a few positions with a KV cache, its work between the matrix
products compiled (numba; imported only when numba is installed, by fast/compiled.py).

Decoding one token of GPT-2 small is 49 products of a few hundred microseconds, and between
them some 40 NumPy operations per layer on arrays of one row: layer norms, adding biases, the
heads' split, the cache's write, attention over the cache, GELU, the residual adds. Each NumPy
operation costs a few microseconds however small its array, so for few rows they add up to a
share of the call that the products, once on every core (fast/team.py), no longer hide. Here
each idea between two products is one compiled loop over the rows:

    layer_norm  ->  [c_attn product]  ->  attention (bias, cache write, causal softmax, heads)
    -> [c_proj product] -> residual (bias + add) -> layer_norm -> [c_fc product] -> bias + GELU
    -> [c_proj product] -> residual

The mathematics is gpt2.py's, in the same order: the products are the same `matmul`; sums over
a row (layer-norm moments, attention's dot products and softmax) are taken in float64 or in
another order than NumPy's, so logits agree with gpt2.py to ~1e-6 relative, not bit for bit.
llm.c's pattern: the reference (gpt2.py, which reads as the paper does) and the fast version
side by side, bound by the same tests (tests/test_block.py, and the fast path's parity tests).
"""

import math

import numba
import numpy as np

from picogpt.gpt2 import gelu

jit = dict(nogil=True, cache=True, boundscheck=False, fastmath={"contract"})
sums = dict(jit, fastmath={"contract", "reassoc"})  # sums over a row in vector lanes: another order


@numba.njit(**sums)
def layer_norm(x, weight, bias, eps):
    """gpt2.layer_norm for each row of x [n_rows, n_embd] -> [n_rows, n_embd]."""
    n_rows, n_embd = x.shape
    out = np.empty_like(x)
    for r in range(n_rows):
        mean = 0.0
        for j in range(n_embd):
            mean += x[r, j]
        mean /= n_embd
        variance = 0.0
        for j in range(n_embd):
            centred = x[r, j] - mean
            variance += centred * centred
        scale = 1.0 / math.sqrt(variance / n_embd + eps)
        for j in range(n_embd):
            out[r, j] = weight[j] * np.float32((x[r, j] - mean) * scale) + bias[j]
    return out


@numba.njit(**sums)
def attention(qkv, bias, k_cache, v_cache, layer, n_past, n_head):
    """gpt2.mha between its two products, for n_rows new positions after n_past cached ones:
    qkv + bias split into queries, keys and values; the keys and values written to the cache
    (k_cache, v_cache [n_layer, n_head, capacity, head_dim], room reserved); each head's causal
    attention of each new position over positions 0..n_past + its row; the heads merged.
    qkv [n_rows, 3 * n_embd] -> [n_rows, n_embd]."""
    n_rows = qkv.shape[0]
    n_embd = qkv.shape[1] // 3
    head_dim = n_embd // n_head
    root = np.float32(math.sqrt(head_dim))
    for r in range(n_rows):  # the keys and values of the new positions, into the cache
        for h in range(n_head):
            for e in range(head_dim):
                c = h * head_dim + e
                k_cache[layer, h, n_past + r, e] = qkv[r, n_embd + c] + bias[n_embd + c]
                v_cache[layer, h, n_past + r, e] = qkv[r, 2 * n_embd + c] + bias[2 * n_embd + c]
    out = np.zeros((n_rows, n_embd), np.float32)
    q = np.empty(head_dim, np.float32)
    weights = np.empty(n_past + n_rows, np.float32)
    for h in range(n_head):
        keys, values = k_cache[layer, h], v_cache[layer, h]  # [capacity, head_dim]
        for r in range(n_rows):
            for e in range(head_dim):
                q[e] = qkv[r, h * head_dim + e] + bias[h * head_dim + e]
            n_seen = n_past + r + 1  # causal: position n_past + r sees positions 0..n_past + r
            largest = np.float32(-np.inf)
            for t in range(n_seen):
                score = np.float32(0)
                for e in range(head_dim):
                    score += q[e] * keys[t, e]
                score /= root
                weights[t] = score
                largest = max(largest, score)
            total = 0.0
            for t in range(n_seen):
                weights[t] = math.exp(np.float32(weights[t] - largest))
                total += weights[t]
            o = out[r, h * head_dim:(h + 1) * head_dim]
            for t in range(n_seen):
                w = np.float32(weights[t] / total)
                for e in range(head_dim):
                    o[e] += w * values[t, e]
    return out


@numba.njit(**jit)
def residual(x, y, bias):
    """x + (y + bias): a sublayer's output (a product, its bias added) joins the residual stream."""
    n_rows, n_embd = x.shape
    out = np.empty_like(x)
    for r in range(n_rows):
        for j in range(n_embd):
            out[r, j] = x[r, j] + (y[r, j] + bias[j])
    return out


def gpt2_cached(ids, params, config, cache, matmul):
    """gpt2.gpt2(ids, params, config, cache, matmul) for a few new positions with a cache, the
    work between products compiled: logits [n_new, n_vocab], and the cache advanced."""
    n_past, eps = len(cache), config.layer_norm_epsilon
    cache.reserve(len(ids))
    x = params["wte"]["weight"][ids] + params["wpe"]["weight"][n_past:n_past + len(ids)]  # [n_new, n_embd]
    for layer, block in enumerate(params["h"]):
        attn, mlp = block["attn"], block["mlp"]
        h = layer_norm(x, block["ln_1"]["weight"], block["ln_1"]["bias"], eps)
        a = attention(matmul(h, attn["c_attn"]["weight"]), attn["c_attn"]["bias"], cache.k, cache.v, layer,
                      n_past, config.n_head)
        x = residual(x, matmul(a, attn["c_proj"]["weight"]), attn["c_proj"]["bias"])
        h = layer_norm(x, block["ln_2"]["weight"], block["ln_2"]["bias"], eps)
        f = gelu(matmul(h, mlp["c_fc"]["weight"]) + mlp["c_fc"]["bias"])  # NumPy's tanh is vectorised
        x = residual(x, matmul(f, mlp["c_proj"]["weight"]), mlp["c_proj"]["bias"])
    cache.advance(len(ids))
    x = layer_norm(x, params["ln_f"]["weight"], params["ln_f"]["bias"], eps)
    return matmul(x, params["wte"]["weight"].T)  # tied LM head: [n_new, n_embd] -> [n_new, n_vocab]


def example_calls():
    """(function, arguments) that compile every specialisation, on tiny arrays: parameters
    memory-mapped (read-only) or in memory (writable)."""
    x = np.ones((1, 8), np.float32)
    qkv = np.ones((1, 24), np.float32)
    k_cache = np.zeros((1, 2, 4, 4), np.float32)
    calls = []
    for writable in (True, False):
        vector, vector_3 = np.ones(8, np.float32), np.ones(24, np.float32)
        vector.flags.writeable = vector_3.flags.writeable = writable
        calls += [(layer_norm, (x, vector, vector, 1e-5)), (residual, (x, x, vector)),
                  (attention, (qkv, vector_3, k_cache, k_cache.copy(), 0, 0, 2))]
    return calls
