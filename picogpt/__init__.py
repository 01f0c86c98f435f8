"""picogpt: GPT-2 in NumPy, and speculative sampling (Chen et al. 2023) on top of it.

    import picogpt
    model = picogpt.load("gpt2")        # or "gpt2-xl", "tiny-draft", a folder, a .safetensors
    logits = model(ids)                  # [len(ids), n_vocab]
    cache = model.new_cache()
    logits = model(ids, cache)           # decode with a KV cache
    tok = picogpt.tokenizer()            # GPT-2's BPE, offline

    draft, target = picogpt.course_models()
    out = picogpt.speculative_sampling(draft, target, ids, N=40, K=4, seed=0)   # Algorithm 2
    out = picogpt.autoregressive_sampling(target, ids, N=40, seed=0)            # Algorithm 1
    out = picogpt.tree_sampling(draft, target, ids, N=40, shape=(2, 2), seed=0) # token trees
"""

__version__ = "0.1.0"  # the one place the version is written (pyproject.toml reads it; CHANGELOG.md says what changed)

import sys

DEPENDENCIES = ("numpy", "threadpoolctl", "tiktoken", "tqdm")  # pyproject.toml's, as Python imports them


def _interrupted():
    """Ctrl-C while `python -m picogpt` imports the package (a command's first half second): one
    line and the status of an interrupted command, as later in the command (cli.main), not a
    traceback through the imports. Imported from Python, the KeyboardInterrupt goes on up."""
    if sys.argv[:1] == ["-m"]:  # `python -m picogpt`: Python imports this package first, argv[0] still "-m"
        print("interrupted", file=sys.stderr)
        raise SystemExit(130) from None


try:
    for _module in DEPENDENCIES:
        __import__(_module)
except KeyboardInterrupt:
    _interrupted()
    raise
except ModuleNotFoundError as missing:
    if sys.argv[:1] == ["-m"]:
        print(f"error: {sys.executable} (Python {sys.version.split()[0]}) has no module {missing.name!r}, which "
              "picogpt needs: in the repository run `make install` (it makes .venv with everything), then "
              "`.venv/bin/python -m picogpt` (or `source .venv/bin/activate` first); or `pip install -e .` into "
              "this Python", file=sys.stderr)
        raise SystemExit(2) from None
    raise
del _module

try:
    from . import loop, rejection, sampling, speculative, theory, tree
    from .course import course_models, course_pair_names
    from .errors import CheckpointError, DownloadError, PicoGPTError
    from .gpt2 import GPT2Config
    from .io.registry import model_names, weights_dir
    from .io.tokenizer import tokenizer
    from .kv_cache import KVCache
    from .model import GPT2, load
    from .sampling import autoregressive_sampling
    from .speculative import speculative_sampling
    from .tree import tree_sampling
except KeyboardInterrupt:
    _interrupted()
    raise

__all__ = [
    "GPT2", "GPT2Config", "course_models", "course_pair_names", "KVCache", "load", "model_names", "weights_dir", "tokenizer",
    "PicoGPTError", "CheckpointError", "DownloadError",
    "autoregressive_sampling", "speculative_sampling", "tree_sampling", "sampling", "rejection", "loop", "speculative",
    "theory", "tree",
]
