"""Write the Hugging Face parity fixtures under tests/fixtures/parity/ (dev tool; needs torch).

For each small config below: a `GPT2LMHeadModel` with seeded random weights (every parameter
randomised, LayerNorm gains/biases and linear biases included, scaled so logits are O(1..10)),
saved three ways, plus the logits Hugging Face computes for a fixed id sequence:

    model.safetensors      save_pretrained(safe_serialization=True): `transformer.`-prefixed names
    bare-f32.safetensors   bare names (`h.0.attn.c_attn.weight`, as the hub publishes), float32
    bare-f16.safetensors   the same weights rounded to float16
    config.json            Hugging Face's config
    ids.npy                the token ids fed to the model            [n_seq] int64
    logits.npy             HF logits with the float32 weights        [n_seq, n_vocab] float32
    logits-f16.npy         HF logits with the float16-rounded weights, computed in float32

tests/test_parity.py compares picogpt against these without torch. Re-run after changing a
config, with the project's environment (`make .venv/.installed`) plus torch and transformers
(the `reference` extra; see pyproject.toml for the CPU build of torch):

    .venv/bin/python -m pip install -e '.[reference]'
    .venv/bin/python tools/make_parity_fixtures.py
"""

import json
import platform
import shutil
from pathlib import Path

import numpy as np
import torch
import transformers
from transformers import GPT2Config, GPT2LMHeadModel

from picogpt.io.checkpoint import write_safetensors
from picogpt.io.params import strip_names

OUT = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "parity"
SEED = 1234

# name -> GPT2Config keywords. Cover: head size 64 (GPT-2's own), n_head * 64 != n_embd, a
# non-default layer_norm_epsilon, and more than one layer.
CONFIGS = {
    "head64": dict(n_layer=1, n_head=2, n_embd=128, n_positions=32, vocab_size=200),
    "head16": dict(n_layer=3, n_head=3, n_embd=48, n_positions=40, vocab_size=257),
    "eps1e-2": dict(n_layer=2, n_head=4, n_embd=64, n_positions=48, vocab_size=300,
                    layer_norm_epsilon=1e-2),
}


def randomise_(model, generator):
    """Give every parameter a random value at a scale that keeps activations and logits O(1..10)."""
    with torch.no_grad():
        for name, param in model.named_parameters():
            noise = torch.randn(param.shape, generator=generator)
            if name.endswith(("ln_1.weight", "ln_2.weight", "ln_f.weight")):
                param.copy_(1 + 0.2 * noise)  # LayerNorm gains around 1
            elif name.endswith(".bias"):
                param.copy_(0.1 * noise)  # every bias nonzero
            elif name.endswith("wte.weight"):
                param.copy_(noise * 3 / param.shape[1] ** 0.5)  # logits = ln_f(x) @ wte.T ~ O(3)
            elif name.endswith("wpe.weight"):
                param.copy_(0.3 * noise)
            else:  # Conv1D weights [n_in, n_out]
                param.copy_(noise / param.shape[0] ** 0.5)
    return model


def hf_logits(model, ids):
    with torch.no_grad():
        return model(torch.tensor(ids)[None]).logits[0].float().numpy()


def bare_tensors(model):
    """The state dict under the hub's bare names, without buffers or the tied lm_head."""
    state = {k: v.detach().numpy().astype(np.float32) for k, v in model.state_dict().items()}
    return strip_names(state)


def make_fixture(name, keywords, generator):
    end_of_text = keywords["vocab_size"] - 1  # GPT-2's 50256 would be outside the small vocab
    config = GPT2Config(**keywords, bos_token_id=end_of_text, eos_token_id=end_of_text,
                        activation_function="gelu_new", resid_pdrop=0.0,
                        embd_pdrop=0.0, attn_pdrop=0.0, attn_implementation="eager")
    model = randomise_(GPT2LMHeadModel(config).eval(), generator)
    ids = torch.randint(0, config.vocab_size, (config.n_positions,), generator=generator).numpy()

    folder = OUT / name
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    model.save_pretrained(folder, safe_serialization=True)
    (folder / "generation_config.json").unlink(missing_ok=True)
    tensors = bare_tensors(model)
    write_safetensors(folder / "bare-f32.safetensors", tensors, "F32")
    write_safetensors(folder / "bare-f16.safetensors", tensors, "F16")
    np.save(folder / "ids.npy", ids.astype(np.int64))
    logits = hf_logits(model, ids)
    np.save(folder / "logits.npy", logits)

    with torch.no_grad():  # the same model with float16-rounded weights, computed in float32
        for param in model.parameters():
            param.copy_(param.half().float())
    logits_f16 = hf_logits(model, ids)
    np.save(folder / "logits-f16.npy", logits_f16)
    print(f"{name}: {sum(p.numel() for p in model.parameters()):,} parameters, "
          f"max |logit| {np.abs(logits).max():.2f}, logit std {logits.std():.2f}, "
          f"f16 rounding moves logits by up to {np.abs(logits - logits_f16).max():.2e}")


def main():
    generator = torch.Generator().manual_seed(SEED)
    for name, keywords in CONFIGS.items():
        make_fixture(name, keywords, generator)
    versions = {"torch": torch.__version__, "transformers": transformers.__version__,
                "numpy": np.__version__, "python": platform.python_version(), "seed": SEED,
                "made_by": "tools/make_parity_fixtures.py"}
    (OUT / "versions.json").write_text(json.dumps(versions, indent=2) + "\n")
    total = sum(f.stat().st_size for f in OUT.rglob("*") if f.is_file())
    print(f"wrote {OUT} ({total / 2**20:.1f} MiB)")


if __name__ == "__main__":
    main()
