"""The engines the bench times on the same weights: picogpt's fast path, its plain path
(gpt2.py with np.matmul on the checkpoint's arrays), and Hugging Face transformers'
GPT2LMHeadModel (torch CPU) when the `bench` extra is installed. Each has start(ids) (a fresh
cache holding ids), forward(ids) (a cached call) and rollback(n) (keep the first n positions)."""

import os
import sys
import warnings

import numpy as np

from ..io.params import leaves, named_tensors
from ..fast import threads


class NumpyEngine:
    """picogpt with its KV cache; plain=True runs the reference path on the checkpoint arrays."""

    def __init__(self, model, plain=False):
        self.model, self.plain = model, plain
        self.forward_fn = model.plain if plain else model
        self.cache = None

    @property
    def weights(self):
        """The arrays this engine reads."""
        return leaves(self.model.params if self.plain else self.model.fast_params)

    def start(self, ids):
        self.cache = self.model.new_cache()
        self.forward_fn(ids, self.cache)

    def forward(self, ids):
        return self.forward_fn(ids, self.cache)

    def rollback(self, n):
        self.cache.truncate(n)


TORCH_ENV = {"OMP_WAIT_POLICY": "PASSIVE"}


def torch_available():
    """Whether the `bench` extra is installed. Before torch is first imported, its OpenMP threads
    are told to sleep, not spin, while they wait (TORCH_ENV), as picogpt's threads do: on a
    machine that other programs share, threads that spin while waiting take the cores the other
    programs need, and every call waits on the slowest of them."""
    for key, value in TORCH_ENV.items():
        if "torch" not in sys.modules:
            os.environ.setdefault(key, value)
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
        return True
    except ImportError:
        return False


def torch_gpt2(model):
    """Hugging Face GPT2LMHeadModel holding picogpt's own checkpoint arrays (zero-copy, so both
    read the same memory), float32, eval mode, torch threads = picogpt's threads."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    c = model.config
    torch.set_num_threads(threads.n_threads())
    config = GPT2Config(n_layer=c.n_layer, n_head=c.n_head, n_embd=c.n_embd, n_positions=c.n_ctx,
                        vocab_size=c.n_vocab, layer_norm_epsilon=c.layer_norm_epsilon,
                        bos_token_id=0, eos_token_id=0)
    with torch.device("meta"):
        hf = GPT2LMHeadModel(config)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "the given NumPy array is not writable": we only read
        state = {f"transformer.{name}": torch.from_numpy(array)
                 for name, array in named_tensors(model.params, model.config).items()}
    hf.load_state_dict(state, assign=True, strict=False)  # lm_head is tied to wte
    hf.tie_weights()
    return hf.eval()


class TorchEngine:
    def __init__(self, model):
        self.hf, self.past = torch_gpt2(model), None

    def run(self, ids):
        import torch

        with torch.inference_mode():
            out = self.hf(input_ids=torch.as_tensor(np.asarray(ids, np.int64))[None],
                          past_key_values=self.past, use_cache=True)
        self.past = out.past_key_values
        return out.logits[0].numpy()

    def start(self, ids):
        self.past = None
        self.run(ids)

    def forward(self, ids):
        return self.run(ids)

    def rollback(self, n):
        extra = self.past.get_seq_length() - n
        if extra > 0:
            self.past.crop(-extra)  # transformers 5: a negative crop drops that many positions


def make_engines(model, s, copy=None):
    """{name: engine} for one model (copy: the same model with its weights in memory), and a note
    if torch was asked for but is not installed."""
    engines, note = {"picogpt": NumpyEngine(model)}, None
    if copy is not None:
        engines["picogpt-in-memory"] = NumpyEngine(copy)
    if s["with_plain"]:
        engines["picogpt-plain"] = NumpyEngine(model, plain=True)
    if s["with_torch"]:
        if torch_available():
            engines["torch"] = TorchEngine(model)
        else:
            note = ("torch/transformers not installed: pip install -e '.[bench]' torch==2.13.0 "
                    "--extra-index-url https://download.pytorch.org/whl/cpu")
    return engines, note
