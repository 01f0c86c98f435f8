"""From checkpoint tensors to a GPT-2's parameters: names, shapes, config, and the tree walk.

A Hugging Face GPT-2 checkpoint is a flat dict of tensors named like `h.3.attn.c_attn.weight`;
the forward pass (picogpt/gpt2.py) takes them nested, `params["h"][3]["attn"]["c_attn"]["weight"]`.
Every name and shape is checked against the config before the model runs.
"""

import json
import re

from ..errors import CheckpointError, PicoGPTError, shown
from ..gpt2 import GPT2Config
from ..sampling import is_finite_number, is_whole
from .files import read_small_text

N_VOCAB = 50257  # GPT-2's BPE vocabulary (OpenAI's published checkpoints)
N_CTX = 1024  # GPT-2's context length
MAX_CONFIG_BYTES = 1 << 20  # a Hugging Face config.json is a few kB

# The public OpenAI GPT-2 checkpoints on the Hugging Face hub (openai-community/<name>).
PRETRAINED = {
    "gpt2": dict(n_layer=12, n_head=12, n_embd=768, params="124M"),
    "gpt2-medium": dict(n_layer=24, n_head=16, n_embd=1024, params="355M"),
    "gpt2-large": dict(n_layer=36, n_head=20, n_embd=1280, params="774M"),
    "gpt2-xl": dict(n_layer=48, n_head=25, n_embd=1600, params="1558M"),
}


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


def strip_names(tensors, path="checkpoint"):
    """Accept bare names (`h.0.ln_1.weight`, as published) and `transformer.`-prefixed ones
    (as `save_pretrained` writes); drop the causal-mask buffers and the tied `lm_head`. A
    tensor given under both names is refused: which of the two is meant cannot be told."""
    out = {}
    for name, array in tensors.items():
        bare = name.removeprefix("transformer.")
        if bare.endswith((".attn.bias", ".attn.masked_bias")) or bare == "lm_head.weight":
            continue
        if bare in out:
            raise CheckpointError(f"{path}: holds both '{shown(bare, 80)}' and 'transformer.{shown(bare, 80)}', the same tensor "
                                  "under two names (perhaps with different values): keep one of them")
        out[bare] = array
    return out


MAX_BLOCK_DIGITS = 9  # GPT-2 XL has 48 blocks; a longer number is a hand-made header's


def layer_index(name, path="checkpoint"):
    """The block a tensor name belongs to ('h.3.ln_1.weight' -> 3), or None. Only ASCII digits
    count: str.isdigit() also accepts '²' and '٣', which a hand-made header may hold. A number
    of more than MAX_BLOCK_DIGITS digits is refused (int() refuses 4,300)."""
    match = re.match(r"h\.(\d+)\.", name, re.ASCII)
    if match and len(match[1]) > MAX_BLOCK_DIGITS:
        raise CheckpointError(f"{path}: tensor '{shown(name, 40)}' numbers its block with {len(match[1]):,} digits; "
                              "a GPT-2's blocks are h.0 to h.<n_layer - 1> (corrupt or hand-made header)")
    return int(match[1]) if match else None


def n_layers_held(names, path="checkpoint"):
    """How many blocks the tensor names reach: one past the highest h.<i> (0 with none)."""
    return max((i for i in (layer_index(name, path) for name in names) if i is not None), default=-1) + 1


def validate_config(config, path="config"):
    """Raise CheckpointError unless every size is a whole number >= 1, n_head divides n_embd,
    and layer_norm_epsilon is a finite number > 0 (0 or less divides by zero, or by a negative
    variance, in layer_norm). Returns the config."""
    for key, json_key in (("n_layer", "n_layer"), ("n_head", "n_head"), ("n_embd", "n_embd"),
                          ("n_ctx", "n_positions"), ("n_vocab", "vocab_size")):
        value = getattr(config, key)
        if not is_whole(value) or value < 1:
            raise CheckpointError(f"{path}: {json_key}={value!r}, expected a whole number >= 1; "
                                  "fix config.json (it must describe the checkpoint beside it)")
    if config.n_embd % config.n_head:
        raise CheckpointError(f"{path}: n_embd={config.n_embd} is not divisible by n_head={config.n_head} "
                              "(each head takes n_embd / n_head of the width); fix config.json")
    eps = config.layer_norm_epsilon
    if not is_finite_number(eps) or eps <= 0:
        raise CheckpointError(f"{path}: layer_norm_epsilon={shown(repr(eps), 40)}, expected a finite number > 0 "
                              "(GPT-2 uses 1e-05); fix config.json")
    return config


def config_from_hf(hf, path="config"):
    """A GPT2Config from the Hugging Face config.json keys GPT-2 needs (a dict), validated."""
    try:
        config = GPT2Config(
            n_layer=hf["n_layer"], n_head=hf["n_head"], n_embd=hf["n_embd"],
            n_ctx=hf.get("n_positions", hf.get("n_ctx")), n_vocab=hf["vocab_size"],
            layer_norm_epsilon=hf.get("layer_norm_epsilon", 1e-5))
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise CheckpointError(f"{path}: not a usable GPT-2 config.json ({type(e).__name__}: {shown(e, 200)})") from None
    return validate_config(config, path)


def config_from_json(path):
    """Read the Hugging Face config.json keys GPT-2 needs, and validate them."""
    try:
        hf = json.loads(read_small_text(path, MAX_CONFIG_BYTES))
    except PicoGPTError:  # not a regular file, or far too long (io/files.py): said already
        raise
    except (OSError, ValueError, RecursionError) as e:
        raise CheckpointError(f"{path}: not a usable GPT-2 config.json ({type(e).__name__}: {shown(e, 200)})") from None
    return config_from_hf(hf, path)


def published_n_head(n_layer, n_embd):
    """n_head of the published GPT-2 with this depth and width, or None if there is none."""
    for shape in PRETRAINED.values():
        if (shape["n_layer"], shape["n_embd"]) == (n_layer, n_embd):
            return shape["n_head"]
    return None


def infer_config(shapes, path):
    """With no config.json: read the sizes off the tensor shapes ({name: shape}, from the header).

    The shapes give n_layer, n_embd, n_ctx and n_vocab but not n_head (any divisor of n_embd
    fits the same tensors, and each gives different text). So n_head is inferred only when
    n_layer and n_embd are those of a published GPT-2 (PRETRAINED: head size 64); any other
    checkpoint is refused, with a request for its config.json."""
    held = sizes_held(shapes, path)
    for name, size in (("wte.weight", "n_embd"), ("wpe.weight", "n_ctx")):
        if size not in held:
            raise CheckpointError(f"{path}: tensor '{name}' is missing or not 2-D (is this a GPT-2 checkpoint?)")
    n_layer, n_embd, n_ctx, n_vocab = (held[key] for key in ("n_layer", "n_embd", "n_ctx", "n_vocab"))
    n_head = published_n_head(n_layer, n_embd)
    if n_head is None:
        raise CheckpointError(f"{path}: no config.json beside it, and its shapes (n_layer={n_layer}, "
                              f"n_embd={n_embd}) are not those of a published GPT-2, so its head count "
                              "n_head cannot be inferred (each choice gives different text): put the "
                              "model's config.json next to the checkpoint")
    return validate_config(GPT2Config(n_layer=n_layer, n_head=n_head, n_embd=n_embd, n_ctx=n_ctx,
                                      n_vocab=n_vocab), path)


def sizes_held(shapes, path="checkpoint"):
    """The sizes a checkpoint's tensors fix ({name: shape}): n_layer, n_embd, n_vocab, n_ctx
    (a size is absent where its tensor is missing or not 2-D: params_from_tensors names it)."""
    held = {"n_layer": n_layers_held(shapes, path)}
    if len(shapes.get("wte.weight", ())) == 2:
        held["n_vocab"], held["n_embd"] = shapes["wte.weight"]
    if len(shapes.get("wpe.weight", ())) == 2:
        held["n_ctx"] = shapes["wpe.weight"][0]
    return held


HF_KEYS = {"n_layer": "n_layer", "n_embd": "n_embd", "n_vocab": "vocab_size", "n_ctx": "n_positions"}


def shown_size(n):
    """A size as an error message shows it: exact, or its order of magnitude when too long to read."""
    return str(n) if n < 10**15 else f"about 10**{len(str(n)) - 1}"


def check_config_fits(config, shapes, path="checkpoint"):
    """Raise CheckpointError, naming both numbers, if the config's layer count, width,
    vocabulary or context disagrees with the tensors ({name: shape}). Runs on the header before
    anything is allocated: a config.json claiming two million layers is refused at once,
    not after building two million layers' worth of parameters."""
    validate_config(config, path)
    for key, held in sizes_held(shapes, path).items():
        said = getattr(config, key)
        if said != held:
            raise CheckpointError(f"{path}: the config says {HF_KEYS[key]}={shown_size(said)} but the checkpoint's tensors "
                                  f"have {key}={held}; config.json does not match the weights beside it")
    return config


def params_from_tensors(tensors, config, path="checkpoint"):
    """Check every name and shape, then nest `h.3.attn.c_attn.weight` as
    params["h"][3]["attn"]["c_attn"]["weight"]."""
    check_config_fits(config, {name: tuple(array.shape) for name, array in tensors.items()}, path)
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
    return tuple(int(key) if key.isascii() and key.isdigit() else key for key in name.split("."))


def named_tensors(params, config):
    """{checkpoint name: array} of a parameter tree: the inverse of params_from_tensors."""
    named = {}
    for name in expected_shapes(config):
        node = params
        for key in tree_path(name):
            node = node[key]
        named[name] = node
    return named
