"""GPT-2 in NumPy: the forward pass, one small pure function per idea.

Radford et al. 2019, "Language Models are Unsupervised Multitask Learners" (GPT-2);
Vaswani et al. 2017, "Attention Is All You Need". Parameters are nested dicts named exactly
like the Hugging Face checkpoint (`h[0]["attn"]["c_attn"]["weight"]`), computed in float32.
Linear weights are stored [n_in, n_out] (GPT-2's "Conv1D"), so a layer is `x @ weight + bias`.
"""

import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .checkpoint import read_safetensors
from .errors import CheckpointError, PicoGPTError
from .fast import in_memory as copy_in_memory, in_memory_in_background, prepare as prepare_fast
from .kv_cache import KVCache


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
    cube = x * x * x  # x**3, written out: NumPy's float32 power is ~25x slower
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * cube)))


def softmax(x):
    exp_x = np.exp(x - np.max(x, axis=-1, keepdims=True))
    return exp_x / np.sum(exp_x, axis=-1, keepdims=True)


def layer_norm(x, ln, eps):
    """Normalise each row to mean 0, variance 1, then scale and shift."""
    mean = np.mean(x, axis=-1, keepdims=True)
    variance = np.var(x, axis=-1, keepdims=True)
    return ln["weight"] * (x - mean) / np.sqrt(variance + eps) + ln["bias"]  # [n_seq, n_embd]


def linear(x, layer):
    return x @ layer["weight"] + layer["bias"]  # [n_seq, n_in] -> [n_seq, n_out]


def ffn(x, mlp):
    a = gelu(linear(x, mlp["c_fc"]))  # [n_seq, n_embd] -> [n_seq, 4*n_embd]
    return linear(a, mlp["c_proj"])  # [n_seq, 4*n_embd] -> [n_seq, n_embd]


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


def mha(x, attn, n_head, cache=None, layer=0):
    """Causal multi-head self-attention; with a cache, attends over the past positions too."""
    qkv = linear(x, attn["c_attn"])  # [n_new, n_embd] -> [n_new, 3*n_embd]
    q, k, v = (split_heads(part, n_head) for part in np.split(qkv, 3, axis=-1))
    n_past = 0
    if cache is not None:
        n_past = len(cache)
        k, v = cache.store(layer, k, v)  # [n_head, n_past + n_new, head_dim]
    out = attention(q, k, v, causal_mask(x.shape[0], n_past))  # [n_head, n_new, head_dim]
    return linear(merge_heads(out), attn["c_proj"])  # [n_new, n_embd]


def transformer_block(x, block, n_head, eps, cache=None, layer=0):
    """Pre-LayerNorm residual block: x + attention(ln_1(x)), then x + mlp(ln_2(x))."""
    x = x + mha(layer_norm(x, block["ln_1"], eps), block["attn"], n_head, cache, layer)
    return x + ffn(layer_norm(x, block["ln_2"], eps), block["mlp"])  # [n_new, n_embd]


def gpt2(ids, params, config, cache=None):
    """Logits for each position of `ids` [n_new] -> [n_new, n_vocab].

    Without a cache, `ids` is the whole sequence. With one, `ids` continue the positions the
    cache already holds, and their keys/values are appended to it.
    """
    n_past = len(cache) if cache is not None else 0
    if cache is not None:
        cache.reserve(len(ids))
    positions = np.arange(n_past, n_past + len(ids))
    x = params["wte"]["weight"][ids] + params["wpe"]["weight"][positions]  # [n_new, n_embd]
    for layer, block in enumerate(params["h"]):
        x = transformer_block(x, block, config.n_head, config.layer_norm_epsilon, cache, layer)
    if cache is not None:
        cache.advance(len(ids))
    x = layer_norm(x, params["ln_f"], config.layer_norm_epsilon)
    return x @ params["wte"]["weight"].T  # tied LM head: [n_new, n_embd] -> [n_new, n_vocab]


# ---------------------------------------------------------------------------------------------
# From checkpoint tensors to parameters
# ---------------------------------------------------------------------------------------------

BLOCK_SHAPES = {  # Hugging Face name inside h.{i} -> shape, in terms of the config
    "ln_1.weight": lambda c: (c.n_embd,),
    "ln_1.bias": lambda c: (c.n_embd,),
    "attn.c_attn.weight": lambda c: (c.n_embd, 3 * c.n_embd),
    "attn.c_attn.bias": lambda c: (3 * c.n_embd,),
    "attn.c_proj.weight": lambda c: (c.n_embd, c.n_embd),
    "attn.c_proj.bias": lambda c: (c.n_embd,),
    "ln_2.weight": lambda c: (c.n_embd,),
    "ln_2.bias": lambda c: (c.n_embd,),
    "mlp.c_fc.weight": lambda c: (c.n_embd, 4 * c.n_embd),
    "mlp.c_fc.bias": lambda c: (4 * c.n_embd,),
    "mlp.c_proj.weight": lambda c: (4 * c.n_embd, c.n_embd),
    "mlp.c_proj.bias": lambda c: (c.n_embd,),
}
TOP_SHAPES = {
    "wte.weight": lambda c: (c.n_vocab, c.n_embd),
    "wpe.weight": lambda c: (c.n_ctx, c.n_embd),
    "ln_f.weight": lambda c: (c.n_embd,),
    "ln_f.bias": lambda c: (c.n_embd,),
}


def expected_shapes(config):
    """Every tensor a GPT-2 checkpoint of this config must hold, with its shape."""
    shapes = {name: shape(config) for name, shape in TOP_SHAPES.items()}
    for i in range(config.n_layer):
        shapes.update({f"h.{i}.{name}": shape(config) for name, shape in BLOCK_SHAPES.items()})
    return shapes


def strip_names(tensors):
    """Accept bare names (`h.0.ln_1.weight`, as published) and `transformer.`-prefixed ones
    (as `save_pretrained` writes); drop the causal-mask buffers and the tied `lm_head`."""
    out = {}
    for name, array in tensors.items():
        name = name.removeprefix("transformer.")
        if name.endswith((".attn.bias", ".attn.masked_bias")) or name == "lm_head.weight":
            continue
        out[name] = array
    return out


def config_from_json(path):
    """Read the Hugging Face config.json keys GPT-2 needs."""
    try:
        hf = json.loads(Path(path).read_text())
        return GPT2Config(
            n_layer=int(hf["n_layer"]), n_head=int(hf["n_head"]), n_embd=int(hf["n_embd"]),
            n_ctx=int(hf.get("n_positions", hf.get("n_ctx"))), n_vocab=int(hf["vocab_size"]),
            layer_norm_epsilon=float(hf.get("layer_norm_epsilon", 1e-5)))
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise CheckpointError(f"{path}: not a usable GPT-2 config.json ({type(e).__name__}: {e})") from None


def infer_config(tensors, path):
    """With no config.json: read the sizes off the tensor shapes, assuming head size 64."""
    try:
        n_vocab, n_embd = tensors["wte.weight"].shape
        n_ctx = tensors["wpe.weight"].shape[0]
    except KeyError as e:
        raise CheckpointError(f"{path}: tensor {e} is missing (is this a GPT-2 checkpoint?)") from None
    if n_embd % 64:
        raise CheckpointError(f"{path}: no config.json beside it, and n_embd={n_embd} is not a "
                              "multiple of GPT-2's head size 64, so n_head cannot be inferred: "
                              "put the model's config.json next to the checkpoint")
    n_layer = len({name.split(".")[1] for name in tensors if name.startswith("h.")})
    return GPT2Config(n_layer=n_layer, n_head=n_embd // 64, n_embd=n_embd,
                      n_ctx=n_ctx, n_vocab=n_vocab)


def params_from_tensors(tensors, config, path="checkpoint"):
    """Check every name and shape, then nest `h.3.attn.c_attn.weight` as
    params["h"][3]["attn"]["c_attn"]["weight"]."""
    if config.n_embd % config.n_head:
        raise CheckpointError(f"{path}: n_embd={config.n_embd} is not divisible by n_head={config.n_head}")
    layers = {int(part) for part in (name.split(".")[1] for name in tensors if name.startswith("h."))
              if part.isdigit()}
    extra_layers = sorted(layer for layer in layers if layer >= config.n_layer)
    if extra_layers:
        raise CheckpointError(f"{path}: holds layer h.{extra_layers[0]} but the config says "
                              f"n_layer={config.n_layer}; config.json does not match the weights")
    params = {"h": [{} for _ in range(config.n_layer)]}
    for name, shape in expected_shapes(config).items():
        if name not in tensors:
            raise CheckpointError(f"{path}: tensor '{name}' is missing")
        if tuple(tensors[name].shape) != shape:
            raise CheckpointError(f"{path}: tensor '{name}' has shape {list(tensors[name].shape)}, "
                                  f"expected {list(shape)} for {config}")
        node, *keys, leaf = name.split(".")
        node = params["h"][int(keys.pop(0))] if node == "h" else params.setdefault(node, {})
        for key in keys:
            node = node.setdefault(key, {})
        node[leaf] = tensors[name]
    return params


# ---------------------------------------------------------------------------------------------
# The model object: parameters + config, callable with or without a cache
# ---------------------------------------------------------------------------------------------

IN_MEMORY = (False, True, "background")


class GPT2:
    """A loaded GPT-2. `model(ids)` is the full forward pass; `model(ids, cache)` decodes.

    Both run `gpt2` on the fast path's parameters (picogpt/fast.py: the same forward pass with
    the linear weights stored transposed, made by `prepare` on the first call); `model.plain(...)`
    runs it on the checkpoint's own arrays. Treat `params` as read-only once the model has run.
    """

    def __init__(self, params, config, name="gpt2", checkpoint=None, in_memory=False):
        if in_memory not in IN_MEMORY:
            raise PicoGPTError(f"in_memory={in_memory!r}: expected False (memory-mapped weights), True (copied "
                               "into memory when the model is first run) or 'background' (copied while it runs)")
        self.params, self.config, self.name = params, config, name
        self.checkpoint = checkpoint  # the file params were read from, if any
        self.in_memory = in_memory  # copy the fast path's weights out of the mapped files
        self.fast_params = None
        self.copying = None  # the background copy's thread, with in_memory="background"

    def __repr__(self):
        c = self.config
        return (f"GPT2({self.name!r}: {self.n_params / 1e6:.1f}M parameters, n_layer={c.n_layer}, "
                f"n_head={c.n_head}, n_embd={c.n_embd}, n_ctx={c.n_ctx}, n_vocab={c.n_vocab})")

    @property
    def arrays(self):
        def walk(node):
            if isinstance(node, dict):
                for child in node.values():
                    yield from walk(child)
            elif isinstance(node, list):
                for child in node:
                    yield from walk(child)
            else:
                yield node
        return list(walk(self.params))

    @property
    def n_params(self):
        return sum(a.size for a in self.arrays)

    @property
    def nbytes(self):
        """Bytes of float32 weights (what one decoded token reads, give or take wpe)."""
        return sum(a.nbytes for a in self.arrays)

    def new_cache(self):
        c = self.config
        return KVCache(c.n_layer, c.n_head, c.head_dim, c.n_ctx)

    def check_ids(self, ids, n_past=0):
        ids = np.asarray(ids)
        if ids.ndim != 1 or ids.size == 0 or not np.issubdtype(ids.dtype, np.integer):
            raise PicoGPTError(f"expected a non-empty 1-D sequence of token ids, got shape "
                               f"{ids.shape} of {ids.dtype}")
        bad = ids[(ids < 0) | (ids >= self.config.n_vocab)]
        if bad.size:
            raise PicoGPTError(f"token id {int(bad[0])} is outside {self.name}'s vocabulary "
                               f"of {self.config.n_vocab} (ids 0..{self.config.n_vocab - 1})")
        if n_past + ids.size > self.config.n_ctx:
            raise PicoGPTError(f"{n_past + ids.size} positions exceed {self.name}'s context of "
                               f"{self.config.n_ctx} tokens; shorten the prompt or generate fewer")
        return ids.astype(np.int64)

    def prepare(self):
        """Get the fast path's transposed weights now rather than on the first call (fast.py:
        GPT-2 small and bigger keep them in a file beside the checkpoint, made once, and
        memory-map it; with in_memory=True they are then copied into this process, and with
        in_memory="background" copied while the model already runs: self.copying.join() waits)."""
        if self.fast_params is None:
            fast_params = prepare_fast(self.params, self.checkpoint)
            if self.in_memory == "background":
                fast_params, self.copying = in_memory_in_background(fast_params, self.name)
            elif self.in_memory:
                fast_params = copy_in_memory(fast_params, self.name)
            self.fast_params = fast_params
        return self

    def __call__(self, ids, cache=None):
        ids = self.check_ids(ids, len(cache) if cache is not None else 0)
        return gpt2(ids, self.prepare().fast_params, self.config, cache)

    def plain(self, ids, cache=None):
        """The same logits from the checkpoint's arrays as they are: the reference path."""
        ids = self.check_ids(ids, len(cache) if cache is not None else 0)
        return gpt2(ids, self.params, self.config, cache)


def load_checkpoint(path, name=None, in_memory=False):
    """Load a model.safetensors file (or the folder holding it) with its config.json
    (in_memory: see GPT2.prepare)."""
    path = Path(path)
    if path.is_dir():
        path = path / "model.safetensors"
    tensors = strip_names(read_safetensors(path))
    config_path = path.with_name("config.json")
    config = config_from_json(config_path) if config_path.exists() else infer_config(tensors, path)
    return GPT2(params_from_tensors(tensors, config, path), config, name or path.parent.name, path, in_memory)
