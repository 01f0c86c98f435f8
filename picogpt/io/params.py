"""From checkpoint tensors to a GPT-2's parameters: names, shapes, config, and the tree walk.

A Hugging Face GPT-2 checkpoint is a flat dict of tensors named like `h.3.attn.c_attn.weight`;
the forward pass (picogpt/gpt2.py) takes them nested, `params["h"][3]["attn"]["c_attn"]["weight"]`.
Every name and shape is checked against the config before the model runs.
"""

import json
from pathlib import Path

from ..errors import CheckpointError
from ..gpt2 import GPT2Config

N_VOCAB = 50257  # GPT-2's BPE vocabulary (OpenAI's published checkpoints)
N_CTX = 1024  # GPT-2's context length


def hf_config(n_layer, n_head, n_embd, n_ctx=N_CTX, n_vocab=N_VOCAB, layer_norm_epsilon=1e-5):
    """The Hugging Face config.json dict of a GPT-2 with these sizes."""
    return {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "n_layer": n_layer,
            "n_head": n_head, "n_embd": n_embd, "n_positions": n_ctx, "n_ctx": n_ctx,
            "vocab_size": n_vocab, "layer_norm_epsilon": layer_norm_epsilon}


def map_leaves(function, node):
    """The same tree of dicts and lists, with every leaf (an array) replaced by function(leaf)."""
    if isinstance(node, dict):
        return {key: map_leaves(function, child) for key, child in node.items()}
    if isinstance(node, list):
        return [map_leaves(function, child) for child in node]
    return function(node)


def leaves(node):
    """Every leaf of a parameter tree, in the order map_leaves visits them."""
    found = []
    map_leaves(found.append, node)
    return found


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
        *keys, leaf = tree_path(name)
        node = params
        for key in keys:
            node = node[key] if isinstance(key, int) else node.setdefault(key, {})
        node[leaf] = tensors[name]
    return params


def tree_path(name):
    """Where a checkpoint name sits in the parameter tree: 'h.3.attn.c_attn.weight' ->
    ('h', 3, 'attn', 'c_attn', 'weight')."""
    return tuple(int(key) if key.isdigit() else key for key in name.split("."))


def named_tensors(params, config):
    """{checkpoint name: array} of a parameter tree: the inverse of params_from_tensors."""
    named = {}
    for name in expected_shapes(config):
        node = params
        for key in tree_path(name):
            node = node[key]
        named[name] = node
    return named
