"""GPT-2 in NumPy: the forward pass, one small pure function per idea. Imports NumPy only.

Radford et al. 2019, "Language Models are Unsupervised Multitask Learners" (GPT-2);
Vaswani et al. 2017, "Attention Is All You Need". Parameters are nested dicts named exactly
like the Hugging Face checkpoint (`h[0]["attn"]["c_attn"]["weight"]`), computed in float32.
Linear weights are stored [n_in, n_out] (GPT-2's "Conv1D"), so a layer is `x @ weight + bias`.

Every matrix product with a weight goes through `matmul`, an argument that is `np.matmul`
unless the caller hands in a faster function computing the same product (picogpt/model.py
does, with picogpt/fast/kernels.py): that is the one place where the fast path plugs in.
"""

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class GPT2Config:
    n_layer: int
    n_head: int
    n_embd: int
    n_ctx: int  # context length (Hugging Face: n_positions)
    n_vocab: int  # vocabulary size (Hugging Face: vocab_size)
    layer_norm_epsilon: float = 1e-5

    @property
    def head_dim(self):
        return self.n_embd // self.n_head


# ---------------------------------------------------------------------------------------------
# The building blocks
# ---------------------------------------------------------------------------------------------

def gelu(x):
    """GPT-2's GELU, the tanh approximation (Hendrycks & Gimpel 2016)."""
    cube = x * x * x  # x**3, written out: two multiplies, where NumPy's power calls a general pow per element
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * cube)))


def softmax(x):
    exp_x = np.exp(x - np.max(x, axis=-1, keepdims=True))
    return exp_x / np.sum(exp_x, axis=-1, keepdims=True)


def layer_norm(x, ln, eps):
    """Normalise each row to mean 0, variance 1, then scale and shift."""
    centred = x - np.mean(x, axis=-1, keepdims=True)
    variance = np.mean(centred * centred, axis=-1, keepdims=True)  # np.var, without computing the mean again
    return ln["weight"] * centred / np.sqrt(variance + eps) + ln["bias"]  # [n_seq, n_embd]


def linear(x, layer, matmul=np.matmul):
    """x @ weight + bias; `matmul` is np.matmul or a faster function of the same product."""
    return matmul(x, layer["weight"]) + layer["bias"]  # [n_seq, n_in] -> [n_seq, n_out]


def ffn(x, mlp, matmul=np.matmul):
    a = gelu(linear(x, mlp["c_fc"], matmul))  # [n_seq, n_embd] -> [n_seq, 4*n_embd]
    return linear(a, mlp["c_proj"], matmul)  # [n_seq, 4*n_embd] -> [n_seq, n_embd]


def causal_mask(n_new, n_past):
    """Query i (at position n_past + i) may attend to keys 0..n_past + i: -inf above that."""
    return np.triu(np.full((n_new, n_past + n_new), -np.inf, np.float32), k=n_past + 1)


def attention(q, k, v, mask):
    """Scaled dot-product attention, all heads at once."""
    # q [n_head, n_new, head_dim], k and v [n_head, n_seq, head_dim], mask [n_new, n_seq]
    scores = q @ k.transpose(0, 2, 1) / np.float32(math.sqrt(q.shape[-1])) + mask
    return softmax(scores) @ v  # [n_head, n_new, n_seq] @ [n_head, n_seq, head_dim]


def split_heads(x, n_head):
    n_seq, n_embd = x.shape
    return x.reshape(n_seq, n_head, n_embd // n_head).transpose(1, 0, 2)  # [n_head, n_seq, head_dim]


def merge_heads(x):
    n_head, n_seq, head_dim = x.shape
    return x.transpose(1, 0, 2).reshape(n_seq, n_head * head_dim)  # [n_seq, n_embd]


def mha(x, attn, n_head, cache=None, layer=0, matmul=np.matmul, mask=None):
    """Causal multi-head self-attention; with a cache, attends over the past positions too.
    `mask` [n_new, n_past + n_new] replaces the causal mask (a token tree's: picogpt/tree.py)."""
    qkv = linear(x, attn["c_attn"], matmul)  # [n_new, n_embd] -> [n_new, 3*n_embd]
    q, k, v = (split_heads(part, n_head) for part in np.split(qkv, 3, axis=-1))
    n_past = 0
    if cache is not None:
        n_past = len(cache)
        k, v = cache.store(layer, k, v)  # [n_head, n_past + n_new, head_dim]
    if mask is None:
        mask = causal_mask(x.shape[0], n_past)  # [n_new, n_past + n_new]
    out = attention(q, k, v, mask)  # [n_head, n_new, head_dim]
    return linear(merge_heads(out), attn["c_proj"], matmul)  # [n_new, n_embd]


def transformer_block(x, block, n_head, eps, cache=None, layer=0, matmul=np.matmul, mask=None):
    """Pre-LayerNorm residual block: x + attention(ln_1(x)), then x + mlp(ln_2(x))."""
    x = x + mha(layer_norm(x, block["ln_1"], eps), block["attn"], n_head, cache, layer, matmul, mask)
    return x + ffn(layer_norm(x, block["ln_2"], eps), block["mlp"], matmul)  # [n_new, n_embd]


def gpt2(ids, params, config, cache=None, matmul=np.matmul, positions=None, mask=None):
    """Logits for each position of `ids` [n_new] -> [n_new, n_vocab].

    Without a cache, `ids` is the whole sequence. With one, `ids` continue the positions the
    cache already holds, and their keys/values are appended to it. `matmul(x, weight)`
    multiplies by every weight matrix: np.matmul, or a faster function of the same product.

    By default the new tokens form a chain: token i sits at position n_past + i and sees the
    past and the new tokens up to itself. A token tree (picogpt/tree.py) scores several
    continuations in one call instead: `positions` [n_new] gives each token's position number
    (its depth in the tree, after the past) and `mask` [n_new, n_past + n_new] which keys it
    may see (0) or not (-inf): the past, its ancestors and itself.
    """
    n_past = len(cache) if cache is not None else 0
    if cache is not None:
        cache.reserve(len(ids))
    if positions is None:
        positions = np.arange(n_past, n_past + len(ids))  # a chain: one position after another
    x = params["wte"]["weight"][ids] + params["wpe"]["weight"][positions]  # [n_new, n_embd]
    for layer, block in enumerate(params["h"]):
        x = transformer_block(x, block, config.n_head, config.layer_norm_epsilon, cache, layer, matmul, mask)
    if cache is not None:
        cache.advance(len(ids))
    x = layer_norm(x, params["ln_f"], config.layer_norm_epsilon)
    return matmul(x, params["wte"]["weight"].T)  # tied LM head: [n_new, n_embd] -> [n_new, n_vocab]
