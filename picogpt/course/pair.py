"""Which pair of models the course runs on, and where their weights come from.

GPT-2 small (124M) drafting for GPT-2 XL (1558M) when both are at hand: downloaded (`make
weights`), or in the user's Hugging Face cache with the pinned size and sha256 (io/hf_cache.py:
used in place, nothing downloaded); else the embedded teaching pair `tiny-draft` / `tiny-target`
that ships with the repository. Set PICOGPT_COURSE_MODELS=tiny or =gpt2 to force one.
"""

import os

from ..errors import PicoGPTError
from ..io.registry import is_available, source_of
from ..model import load

PAIRS = {"gpt2": ("gpt2", "gpt2-xl"), "tiny": ("tiny-draft", "tiny-target")}
ENV = "PICOGPT_COURSE_MODELS"


def forced_pair():
    """The pair PICOGPT_COURSE_MODELS names (None where it is unset), or a clear error."""
    choice = os.environ.get(ENV, "").strip().lower()
    if choice and choice not in PAIRS:
        raise PicoGPTError(f"{ENV}={choice[:40]!r}: expected one of {', '.join(PAIRS)} (or unset it "
                           "for GPT-2 small and XL when both are at hand, else the teaching pair)")
    return PAIRS[choice] if choice else None


def course_pair_names():
    """(draft name, target name) by the rule above."""
    real = PAIRS["gpt2"]
    return forced_pair() or (real if all(is_available(name) for name in real) else PAIRS["tiny"])


def course_models(verbose=True):
    """Load (draft p, target q) for the course, and say which pair it is and where it came from."""
    draft_name, target_name = course_pair_names()
    draft, target = load(draft_name), load(target_name)
    if verbose:
        print(f"course models: draft p = {draft!r}\n               target q = {target!r}")
        for model in (draft, target):
            print(f"  {model.name} from {source_of(model.name, model.checkpoint)}")
    return draft, target


# Notebook 05 times autoregressive against speculative sampling for K = 1..8, ten repeats (the pairs
# of measure/compare.py's verdict: a 95% sign test concludes from 6 at the least), all in one cell on
# the teaching pair's 64 tokens. GPT-2 XL reads 6.2 GB per token, so a target that big gets fewer
# tokens and repeats, too few to resolve anything at 95%. Either way notebook 05 says on screen
# whether its run resolved the best K, or what would (course/speed_panels.py).
BIG_TARGET_BYTES = 1e9  # weight bytes read per token
# Every race and seed sweep of notebooks 02 and 05-09 takes its count from `repeats`. The notebook
# checks (`make notebooks`, `make browser-test`) set PICOGPT_COURSE_REPEATS=3: the same cells run,
# on fewer pairs (too few for a verdict, so they print "not resolved"); the committed notebooks are
# executed without it.
REPEATS_ENV = "PICOGPT_COURSE_REPEATS"


def repeats(n):
    """n repeats (pairs, seeds) for a notebook's race, or at most PICOGPT_COURSE_REPEATS of them."""
    cap = os.environ.get(REPEATS_ENV, "").strip()
    if not cap:
        return n
    if not (cap.isascii() and cap.isdigit()) or int(cap) < 1:
        raise PicoGPTError(f"{REPEATS_ENV}={cap[:40]!r}: expected a whole number of repeats, 1 or more "
                           "(or unset it for each race's own count)")
    return min(n, int(cap))


def speedup_run_size(target):
    """(N tokens per run, repeats) for notebook 05's measurement on this target (see above)."""
    return (32, repeats(3)) if target.bytes_per_token > BIG_TARGET_BYTES else (64, repeats(10))
