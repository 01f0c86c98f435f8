"""picogpt computes the same logits as Hugging Face's GPT2LMHeadModel (golden-reference test).

The references were written once by tools/make_parity_fixtures.py (torch + transformers) for
small random GPT-2s; this test needs neither. Tolerance: 1e-4 x max(1, max |logit|), float32.
"""

from pathlib import Path

import numpy as np
import pytest

from picogpt.model import load_checkpoint

FIXTURES = Path(__file__).parent / "fixtures" / "parity"
CONFIGS = sorted(p.name for p in FIXTURES.iterdir() if p.is_dir())
VARIANTS = {  # checkpoint file -> the reference logits it must reproduce
    "model.safetensors": "logits.npy",  # save_pretrained: transformer.-prefixed, float32
    "bare-f32.safetensors": "logits.npy",  # hub-style bare names, float32
    "bare-f16.safetensors": "logits-f16.npy",  # float16 on disk, computed in float32
}
CASES = [(config, variant) for config in CONFIGS for variant in VARIANTS]


def load_case(config, variant):
    folder = FIXTURES / config
    model = load_checkpoint(folder / variant)
    return model, np.load(folder / "ids.npy"), np.load(folder / VARIANTS[variant])


def assert_matches_hf(got, reference, label):
    tolerance = 1e-4 * max(1.0, float(np.abs(reference).max()))
    max_diff = float(np.abs(got - reference).max())
    print(f"{label}: max |logit diff| {max_diff:.2e} (tolerance {tolerance:.1e})")
    assert got.shape == reference.shape and got.dtype == np.float32
    assert max_diff <= tolerance, f"{label}: {max_diff:.3e} > {tolerance:.3e}"


def test_fixtures_are_present():
    assert len(CONFIGS) >= 3, f"expected at least three parity configs in {FIXTURES}"


@pytest.mark.parametrize("config, variant", CASES)
def test_full_forward_matches_hugging_face(config, variant):
    model, ids, reference = load_case(config, variant)
    assert_matches_hf(model(ids), reference, f"{config}/{variant} full forward")


@pytest.mark.parametrize("config, variant", CASES)
def test_cached_decoding_token_by_token_matches_hugging_face(config, variant):
    model, ids, reference = load_case(config, variant)
    cache = model.new_cache()
    logits = np.concatenate([model(ids[i:i + 1], cache) for i in range(len(ids))])
    assert len(cache) == len(ids)
    assert_matches_hf(logits, reference, f"{config}/{variant} cached, one token at a time")


@pytest.mark.parametrize("config, variant", CASES)
def test_truncate_and_refeed_matches_hugging_face(config, variant):
    model, ids, reference = load_case(config, variant)
    cache = model.new_cache()
    model(ids, cache)  # the whole sequence, then roll back as after a rejected draft
    n_keep = len(ids) // 3
    cache.truncate(n_keep)
    chunks = np.array_split(np.arange(n_keep, len(ids)), 4)  # re-feed in uneven chunks
    logits = np.concatenate([model(ids[chunk], cache) for chunk in chunks])
    assert len(cache) == len(ids)
    assert_matches_hf(logits, reference[n_keep:], f"{config}/{variant} truncate to {n_keep} + re-feed")
