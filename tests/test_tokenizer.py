"""picogpt's offline tokenizer is token-for-token tiktoken's official `gpt2` encoding.

The reference is `tiktoken.get_encoding("gpt2")` itself, built the way tiktoken builds it
(tiktoken_ext/openai_public.py), with its download cache seeded from our bundled files so no
network is needed: tiktoken stores each file under sha1(url) in $TIKTOKEN_CACHE_DIR and checks
its sha256 on read.
"""

import hashlib
import random

import pytest
import tiktoken
import tiktoken.load
import tiktoken.registry

from picogpt.io.tokenizer import DATA, ENDOFTEXT, tokenizer

BPE_URLS = {  # the URLs tiktoken_ext.openai_public.gpt2() fetches, and our file for each
    "https://openaipublic.blob.core.windows.net/gpt-2/encodings/main/vocab.bpe": "vocab.bpe",
    "https://openaipublic.blob.core.windows.net/gpt-2/encodings/main/encoder.json": "encoder.json",
}

TEXTS = [
    "Hello, world!",
    "In the beginning God created the heaven and the earth.",
    "naïve café — résumé, Zürich, Ærøskøbing, İstanbul",
    "日本語のテキストと中文文本，还有한국어도.",
    "emoji: 🙂🚀👩‍👩‍👧‍👦 and flags 🇫🇷🇯🇵",
    "def f(x):\n\treturn {'a': [1, 2, 3]}  # comment\n\n\nif x != 0: print(x ** 2)",
    "   leading spaces, trailing spaces    ",
    "tabs\t\tand\nnewlines\n\n\n\r\n and    runs     of      spaces",
    "I'm, you're, they've, she'll, he'd, it's, we'RE, 'tis",
    "numbers 1234567890 3.14159 1e-10 0x1F",
    "<|endoftext|>The next document starts here<|endoftext|>",
    "",
    " ",
    "\u200b\u00a0zero-width and no-break spaces\u3000",
]


@pytest.fixture(scope="module")
def ours():
    return tokenizer()


@pytest.fixture(scope="module")
def official(tmp_path_factory):
    """tiktoken.get_encoding("gpt2"), from a cache seeded with our files, network disabled."""
    cache_dir = tmp_path_factory.mktemp("tiktoken-cache")
    for url, name in BPE_URLS.items():
        key = hashlib.sha1(url.encode()).hexdigest()
        (cache_dir / key).write_bytes((DATA / name).read_bytes())

    def no_network(url):
        raise AssertionError(f"tiktoken tried to download {url}: the seeded cache was not used")

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TIKTOKEN_CACHE_DIR", str(cache_dir))
        patch.setattr(tiktoken.load, "read_file", no_network)
        patch.setitem(tiktoken.registry.ENCODINGS, "gpt2", None)  # forget any earlier one...
        del tiktoken.registry.ENCODINGS["gpt2"]  # ...and build it afresh from the seeded cache
        encoding = tiktoken.get_encoding("gpt2")
    return encoding  # leaving the context restores the registry as it was


def random_text(rng, n_chars):
    """Characters from many scripts, plus punctuation and whitespace."""
    ranges = [(0x20, 0x7E), (0xA0, 0x24F), (0x370, 0x3FF), (0x400, 0x4FF), (0x600, 0x6FF),
              (0x900, 0x97F), (0x3040, 0x30FF), (0x4E00, 0x9FFF), (0xAC00, 0xD7A3), (0x1F300, 0x1FAFF)]
    chars = []
    for _ in range(n_chars):
        if rng.random() < 0.15:
            chars.append(rng.choice(" \t\n  "))
        else:
            low, high = rng.choice(ranges)
            chars.append(chr(rng.randint(low, high)))
    return "".join(chars)


def test_same_vocabulary_and_special_token(ours, official):
    assert ours.n_vocab == official.n_vocab == 50257
    assert ours.eot_token == official.eot_token == 50256
    assert ours.special_tokens_set == official.special_tokens_set == {ENDOFTEXT}


@pytest.mark.parametrize("text", TEXTS)
def test_same_tokens_as_tiktoken(ours, official, text):
    expected = official.encode(text, allowed_special="all")
    assert ours.encode(text, allowed_special="all") == expected
    assert ours.decode(expected) == text


def test_endoftext_is_one_token_only_when_allowed(ours, official):
    text = "a<|endoftext|>b"
    assert ours.encode(text, allowed_special={ENDOFTEXT}) == official.encode(text, allowed_special={ENDOFTEXT})
    assert 50256 in ours.encode(text, allowed_special={ENDOFTEXT})
    with pytest.raises(ValueError):
        ours.encode(text)  # tiktoken's default: special tokens in text are an error
    assert ours.encode(text, disallowed_special=()) == official.encode(text, disallowed_special=())
    assert 50256 not in ours.encode(text, disallowed_special=())


def test_long_random_strings_match_and_round_trip(ours, official):
    rng = random.Random(0)
    for n_chars in [1, 7, 100, 1000, 20_000]:
        text = random_text(rng, n_chars)
        tokens = official.encode(text)
        assert ours.encode(text) == tokens
        assert ours.decode(tokens) == text


def test_every_single_byte_round_trips(ours):
    for byte in range(256):
        tokens = ours.encode_ordinary(bytes([byte]).decode("latin-1"))
        assert ours.decode(tokens) == bytes([byte]).decode("latin-1")
