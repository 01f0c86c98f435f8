"""GPT-2's tokenizer, offline: tiktoken's `gpt2` encoding built from files shipped in the package.

`tiktoken.get_encoding("gpt2")` downloads `vocab.bpe` and `encoder.json` on first use. We ship
those two files (OpenAI, MIT licence) in `picogpt/io/data/`, check their published sha256, and
hand them to tiktoken, so tokenising never touches the network and the tokens are identical.
"""

import functools
import hashlib
from pathlib import Path

import tiktoken
from tiktoken.load import data_gym_to_mergeable_bpe_ranks
from tiktoken_ext.openai_public import r50k_pat_str

from ..errors import PicoGPTError
from .params import N_VOCAB

DATA = Path(__file__).parent / "data"
BPE_FILES = {  # file -> sha256, as pinned by tiktoken (tiktoken_ext/openai_public.py, gpt2())
    "vocab.bpe": "1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5",
    "encoder.json": "196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783",
}
ENDOFTEXT = "<|endoftext|>"


def verify_bpe_files(folder=DATA):
    for name, sha256 in BPE_FILES.items():
        path = Path(folder) / name
        if not path.is_file():
            raise PicoGPTError(f"{path} not found: reinstall picogpt (pip install -e .)")
        if hashlib.sha256(path.read_bytes()).hexdigest() != sha256:
            raise PicoGPTError(f"{path} does not match GPT-2's published sha256 {sha256}: "
                               "reinstall picogpt")


@functools.cache
def tokenizer():
    """The GPT-2 tokenizer (a `tiktoken.Encoding`, identical to `tiktoken.get_encoding("gpt2")`)."""
    verify_bpe_files()
    ranks = data_gym_to_mergeable_bpe_ranks(
        vocab_bpe_file=str(DATA / "vocab.bpe"), encoder_json_file=str(DATA / "encoder.json"),
        vocab_bpe_hash=BPE_FILES["vocab.bpe"], encoder_json_hash=BPE_FILES["encoder.json"])
    return tiktoken.Encoding(name="gpt2", explicit_n_vocab=N_VOCAB, pat_str=r50k_pat_str,
                             mergeable_ranks=ranks, special_tokens={ENDOFTEXT: 50256})
