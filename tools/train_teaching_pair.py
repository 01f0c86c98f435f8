"""Train the embedded teaching pair: a tiny GPT-2 target q and a tinier draft p distilled from it.

Dev-only tool (PyTorch, CPU). picogpt itself never imports torch: this script writes ordinary
GPT-2 checkpoints (`picogpt/io/data/tiny-target/`, `picogpt/io/data/tiny-draft/`) in the layout of the published
`openai-community/gpt2` files, which picogpt's NumPy loader reads.

Recipe (speculative sampling, Chen et al. 2023, arXiv 2302.01318, wants a draft p whose
next-token distribution is close to the target q's):
  1. train the target q on the King James Bible (next-token cross-entropy);
  2. distil the draft p from q: minimise KL(q || p) to q's temperature-1 softmax, mixed with a
     little next-token cross-entropy on the data. The draft then imitates q directly, which is
     what the acceptance rate alpha = E[sum_x min(p(x), q(x))] rewards.

Corpus: Debian's `bible-kjv-text` (the 1611 King James Version, public domain), dumped with the
`bible` program of the `bible-kjv` package, one verse per line:
    sudo apt-get install bible-kjv        # pulls in bible-kjv-text
    bible -f Gen1:1-Rev22:21 > build/kjv.txt
(this script runs that command itself when build/kjv.txt is missing and `bible` is installed).

Vocabulary trick (exact, for speed only): both models keep GPT-2's 50,257-token vocabulary, but
the corpus uses fewer than 10,000 of those tokens. During training, the embedding table holds one
row per token seen in the training split plus one shared row for "an unseen token"; the logit of
that shared row gets + log(n_unseen), so the softmax over the compact table equals, exactly, the
softmax over 50,257 tokens in which every unseen token has that shared row. At export each unseen
token is given a copy of it: the saved model is a plain 50,257-token GPT-2 with tied embeddings
whose distribution is the one we trained (`check_export` verifies this).

Run it with the project's environment, picogpt installed in it (`make .venv/.installed`) plus
torch and transformers (the `bench` extra; see pyproject.toml for the CPU build of torch):
    .venv/bin/python -m pip install -e '.[bench]'
The defaults reproduce the committed weights (tens of minutes on a laptop's CPU; the training
report records how long each model took, and weights/README.md renders it):
    .venv/bin/python tools/train_teaching_pair.py                                    # both, into picogpt/io/data/
    .venv/bin/python tools/train_teaching_pair.py --target-from picogpt/io/data/tiny-target  # the draft only
The checkpoints go to --out (picogpt/io/data/, package data); the training report and log, the
model card's sources, to --report-dir (weights/).
"""

import argparse
import hashlib
import json
import math
import re
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from safetensors.numpy import save_file
from transformers import GPT2Config, GPT2LMHeadModel

import picogpt

REPO = Path(__file__).resolve().parent.parent
N_VOCAB = 50257  # GPT-2's BPE vocabulary; <|endoftext|> is 50256
VERSE = re.compile(r"^(?P<book>\d?[A-Za-z]+)(?P<chapter>\d+):(?P<verse>\d+) (?P<text>.*)$")


# ---------------------------------------------------------------------------------------------
# Configuration


@dataclass(frozen=True)
class ModelShape:
    n_layer: int
    n_head: int
    n_embd: int
    n_positions: int = 384


@dataclass(frozen=True)
class TrainConfig:
    steps: int
    batch_size: int      # sequences per step
    block_size: int      # tokens per sequence
    lr: float
    warmup_steps: int = 100
    min_lr_ratio: float = 0.1
    weight_decay: float = 0.1
    grad_clip: float = 1.0


TARGET = ModelShape(n_layer=48, n_head=2, n_embd=64)  # deep and narrow: see weights/README.md
DRAFT = ModelShape(n_layer=2, n_head=2, n_embd=64)
TARGET_TRAINING = TrainConfig(steps=800, batch_size=12, block_size=384, lr=1e-3)
DRAFT_TRAINING = TrainConfig(steps=250, batch_size=12, block_size=384, lr=3e-3)
DISTILL_DATA_WEIGHT = 0.1  # draft loss = 0.9 * KL(q || p) + 0.1 * cross-entropy(data, p)
VAL_EVERY_NTH_CHAPTER = 20  # chapters 19, 39, 59, ... (0-based, in canonical order) are held out
SEED = 1611


# ---------------------------------------------------------------------------------------------
# Corpus and tokens


def dump_bible(path):
    """Write the KJV, one verse per line, with the `bible` program (Debian package bible-kjv)."""
    if shutil.which("bible") is None:
        sys.exit(f"{path} not found, and neither is the `bible` program to create it.\n"
                 f"Install it (sudo apt-get install bible-kjv), or pass --corpus FILE with lines "
                 f"like 'Ge1:1 In the beginning God created the heaven and the earth.'")
    path.parent.mkdir(parents=True, exist_ok=True)
    text = subprocess.run(["bible", "-f", "Gen1:1-Rev22:21"], check=True, capture_output=True,
                          text=True).stdout
    path.write_text(text)


def shown(path):
    """A path as the log shows it: relative to the repository, or .../<name> outside it (a
    committed log names no folder of the machine that wrote it)."""
    path = Path(path).resolve()
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else f".../{path.name}"


def read_chapters(path):
    """Lines 'Ge1:1 In the beginning ...' -> list of chapters, each the text of its verses."""
    chapters, current, key = [], [], None
    for n, line in enumerate(Path(path).read_text().splitlines(), 1):
        match = VERSE.match(line)
        if match is None:
            sys.exit(f"{path}:{n}: expected 'Book<chapter>:<verse> text', got {line[:60]!r}")
        if (match["book"], match["chapter"]) != key and current:
            chapters.append("".join(current))
            current = []
        key = (match["book"], match["chapter"])
        current.append(match["text"] + "\n")
    chapters.append("".join(current))
    return chapters


def split_tokens(chapters, tokenizer):
    """Every VAL_EVERY_NTH_CHAPTER-th chapter is held out; returns (train ids, val ids)."""
    def is_val(i):
        return i % VAL_EVERY_NTH_CHAPTER == VAL_EVERY_NTH_CHAPTER - 1

    train = "".join(c for i, c in enumerate(chapters) if not is_val(i))
    val = "".join(c for i, c in enumerate(chapters) if is_val(i))
    return (np.array(tokenizer.encode_ordinary(train), dtype=np.int64),
            np.array(tokenizer.encode_ordinary(val), dtype=np.int64))


@dataclass(frozen=True)
class CompactVocab:
    """GPT-2 token id -> row of the training embedding table (see the module docstring)."""
    seen: np.ndarray        # [n_seen] GPT-2 ids present in the training split, sorted
    to_compact: np.ndarray  # [N_VOCAB] row for each GPT-2 id; unseen ids -> n_seen (shared row)

    @property
    def size(self):
        return len(self.seen) + 1

    @property
    def n_unseen(self):
        return N_VOCAB - len(self.seen)

    def to_gpt2(self, compact_ids):
        """Compact ids -> GPT-2 ids; the shared row becomes the first unseen GPT-2 id."""
        first_unseen = int(np.flatnonzero(self.to_compact == len(self.seen))[0])
        return np.append(self.seen, first_unseen)[compact_ids]

    def logit_offset(self):
        """[size] added to the logits: log(n_unseen) on the shared row stands for n_unseen rows."""
        offset = torch.zeros(self.size)
        offset[-1] = math.log(self.n_unseen)
        return offset


def compact_vocab(train_ids):
    seen = np.unique(train_ids)
    to_compact = np.full(N_VOCAB, len(seen), dtype=np.int64)
    to_compact[seen] = np.arange(len(seen))
    return CompactVocab(seen, to_compact)


def batches(ids, batch_size, block_size, generator):
    """Endless random windows [batch_size, block_size + 1] of a token stream (seeded)."""
    ids = torch.from_numpy(ids)
    while True:
        starts = torch.randint(len(ids) - block_size - 1, (batch_size,), generator=generator)
        yield torch.stack([ids[s:s + block_size + 1] for s in starts.tolist()])


# ---------------------------------------------------------------------------------------------
# Models


def new_model(shape, vocab_size):
    config = GPT2Config(vocab_size=vocab_size, n_positions=shape.n_positions, n_ctx=shape.n_positions,
                        n_embd=shape.n_embd, n_layer=shape.n_layer, n_head=shape.n_head,
                        activation_function="gelu_new", resid_pdrop=0.0, embd_pdrop=0.0,
                        attn_pdrop=0.0, layer_norm_epsilon=1e-5, tie_word_embeddings=True,
                        bos_token_id=None, eos_token_id=None)
    return GPT2LMHeadModel(config)


def compact_logits(model, ids, vocab, bfloat16=False):
    """[B, T] compact ids -> [B, T, vocab.size] logits equal to the 50,257-token model's.

    bfloat16=True runs the transformer body in bfloat16 (training speed); the tied LM head
    always runs in float32, so the softmax the draft learns from is accurate."""
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bfloat16):
        hidden = model.transformer(ids).last_hidden_state                    # [B, T, n_embd]
    wte = model.transformer.wte.weight                                        # [V, n_embd]
    return hidden.float() @ wte.T + vocab.logit_offset()                     # [B, T, V]


def n_params(model):
    return sum(p.numel() for p in model.parameters())


def optimizer(model, train):
    decay = [p for p in model.parameters() if p.dim() >= 2]  # matrices and embeddings
    no_decay = [p for p in model.parameters() if p.dim() < 2]  # biases and layer norms
    return torch.optim.AdamW([{"params": decay, "weight_decay": train.weight_decay},
                              {"params": no_decay, "weight_decay": 0.0}],
                             lr=train.lr, betas=(0.9, 0.95))


def learning_rate(step, train):
    """Linear warm-up, then cosine decay to min_lr_ratio * lr."""
    if step < train.warmup_steps:
        return train.lr * (step + 1) / train.warmup_steps
    progress = (step - train.warmup_steps) / max(1, train.steps - train.warmup_steps)
    return train.lr * (train.min_lr_ratio + (1 - train.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress)))


def full_vocab_nll(logits, targets, vocab):
    """Mean -log q(token) over the 50,257-token vocabulary, from compact logits.

    An unseen token has probability (shared row's probability) / n_unseen."""
    nll = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), reduction="none")
    return (nll + (targets.flatten() == vocab.size - 1) * math.log(vocab.n_unseen)).mean()


def distillation_loss(draft_logits, target_logits, targets, vocab):
    """(1 - w) * KL(q || p) + w * cross-entropy(data, p), per token, w = DISTILL_DATA_WEIGHT."""
    log_p = F.log_softmax(draft_logits, -1)   # [B, T, V] draft
    log_q = F.log_softmax(target_logits, -1)  # [B, T, V] target
    kl = (log_q.exp() * (log_q - log_p)).sum(-1).mean()
    return (1 - DISTILL_DATA_WEIGHT) * kl + DISTILL_DATA_WEIGHT * full_vocab_nll(draft_logits, targets, vocab)


def train_loop(name, model, loss_fn, train_ids, train, generator, log):
    """AdamW on random windows; loss_fn(model, batch [B, T+1]) -> scalar."""
    opt = optimizer(model, train)
    data = batches(train_ids, train.batch_size, train.block_size, generator)
    t0, recent = time.time(), []
    model.train()
    for step in range(train.steps):
        for group in opt.param_groups:
            group["lr"] = learning_rate(step, train)
        loss = loss_fn(model, next(data))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), train.grad_clip)
        opt.step()
        recent.append(loss.item())
        if (step + 1) % 50 == 0 or step + 1 == train.steps:
            log(f"{name} step {step + 1:5d}/{train.steps}  loss {np.mean(recent):.4f}  "
                f"lr {learning_rate(step, train):.2e}  {time.time() - t0:6.0f} s")
            recent = []
    model.eval()
    return time.time() - t0


@torch.no_grad()
def evaluate(model, ids, vocab, block_size, loss_fn=None, max_windows=128):
    """Mean loss over consecutive (non-overlapping) windows of a token stream."""
    n = min(max_windows, (len(ids) - 1) // block_size)
    x = torch.from_numpy(ids[:n * block_size + 1])
    windows = torch.stack([x[i * block_size:(i + 1) * block_size + 1] for i in range(n)])
    losses = []
    for chunk in windows.split(8):
        if loss_fn is None:
            losses.append(full_vocab_nll(compact_logits(model, chunk[:, :-1], vocab), chunk[:, 1:], vocab).item())
        else:
            losses.append(loss_fn(model, chunk).item())
    return float(np.mean(losses))


# ---------------------------------------------------------------------------------------------
# Acceptance rate (preliminary, in torch; the model card's numbers come from picogpt's NumPy code)


@torch.no_grad()
def sample_from(model, prompts, n_new, vocab, generator):
    """Ancestral sampling at temperature 1: prompts [B, T0] -> [B, T0 + n_new] compact ids."""
    ids = prompts
    for _ in range(n_new):
        logits = compact_logits(model, ids, vocab)[:, -1]                    # [B, V]
        next_id = torch.multinomial(F.softmax(logits, -1), 1, generator=generator)  # [B, 1]
        ids = torch.cat([ids, next_id], 1)
    return ids


@torch.no_grad()
def acceptance_rate(draft, target, ids, n_prompt, vocab):
    """alpha = mean over positions of sum_x min(p(x), q(x)) (Chen et al. 2023, Eq. 1's overlap)."""
    p = F.softmax(compact_logits(draft, ids[:, :-1], vocab), -1)[:, n_prompt - 1:]   # [B, N, V]
    q = F.softmax(compact_logits(target, ids[:, :-1], vocab), -1)[:, n_prompt - 1:]  # [B, N, V]
    overlap = torch.minimum(p, q).sum(-1)                                            # [B, N]
    return overlap.mean().item(), overlap.numel()


# ---------------------------------------------------------------------------------------------
# Export: compact training model -> plain 50,257-token GPT-2 checkpoint


def gpt2_tensors(model, vocab):
    """Bare GPT-2 names (wte.weight, h.0.attn.c_attn.weight, ...) -> float16 arrays, full vocab."""
    state = model.transformer.state_dict()
    tensors = {}
    for name, value in state.items():
        if name.endswith(".attn.bias") or name.endswith(".attn.masked_bias"):
            continue  # causal-mask buffers, not parameters
        tensors[name] = value.detach().to(torch.float16).numpy()
    compact_wte = tensors["wte.weight"]                                  # [vocab.size, n_embd]
    tensors["wte.weight"] = np.ascontiguousarray(compact_wte[vocab.to_compact])  # [50257, n_embd]
    return tensors


def hf_config(shape):
    return {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"],
            "vocab_size": N_VOCAB, "n_positions": shape.n_positions, "n_ctx": shape.n_positions,
            "n_embd": shape.n_embd, "n_layer": shape.n_layer, "n_head": shape.n_head,
            "layer_norm_epsilon": 1e-5, "activation_function": "gelu_new",
            "bos_token_id": 50256, "eos_token_id": 50256, "tie_word_embeddings": True,
            "torch_dtype": "float16"}


def save_checkpoint(folder, model, shape, vocab):
    folder.mkdir(parents=True, exist_ok=True)
    save_file(gpt2_tensors(model, vocab), folder / "model.safetensors", metadata={"format": "pt"})
    (folder / "config.json").write_text(json.dumps(hf_config(shape), indent=2) + "\n")


def load_exported(folder):
    """The exported checkpoint as a full-vocabulary Hugging Face model (float32)."""
    from safetensors.numpy import load_file
    config = json.loads((folder / "config.json").read_text())
    model = new_model(ModelShape(config["n_layer"], config["n_head"], config["n_embd"],
                                 config["n_positions"]), config["vocab_size"])
    tensors = {k: torch.from_numpy(v.astype(np.float32)) for k, v in load_file(folder / "model.safetensors").items()}
    missing, unexpected = model.transformer.load_state_dict(tensors, strict=False)
    assert not unexpected and all(k.endswith("attn.bias") for k in missing), (missing, unexpected)
    model.tie_weights()
    return model.eval()


def compact_from_exported(folder, vocab):
    """Inverse of the export: a saved 50,257-token checkpoint -> compact training model."""
    full = load_exported(folder)
    state = full.transformer.state_dict()
    state["wte.weight"] = state["wte.weight"][torch.from_numpy(vocab.to_gpt2(np.arange(vocab.size)))]
    model = new_model(ModelShape(full.config.n_layer, full.config.n_head, full.config.n_embd,
                                 full.config.n_positions), vocab.size)
    model.transformer.load_state_dict(state)
    return model.eval()


def rounded_to_float16(model):
    """A copy of the training model with float16-rounded weights, as they are exported."""
    import copy
    model = copy.deepcopy(model)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(p.to(torch.float16).to(torch.float32))
    return model


@torch.no_grad()
def check_export(folder, model, vocab, val_ids):
    """The saved 50,257-token model gives the trained model's log-probabilities; returns max |diff|."""
    full = load_exported(folder)
    ids = torch.from_numpy(val_ids[:129])[None]                                     # [1, 129]
    log_q_full = F.log_softmax(full(ids[:, :-1]).logits, -1)                         # [1, 128, 50257]
    compact = torch.from_numpy(vocab.to_compact)[ids[:, :-1]]
    log_q_compact = F.log_softmax(compact_logits(rounded_to_float16(model), compact, vocab), -1)
    seen = torch.from_numpy(vocab.seen)
    diff_seen = (log_q_full[..., seen] - log_q_compact[..., :-1]).abs().max().item()
    unseen = torch.from_numpy(np.setdiff1d(np.arange(N_VOCAB), vocab.seen))
    unseen_mass = torch.logsumexp(log_q_full[..., unseen], -1)
    diff_unseen = (unseen_mass - log_q_compact[..., -1]).abs().max().item()
    return max(diff_seen, diff_unseen)


def sha256(path):
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


# ---------------------------------------------------------------------------------------------


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--corpus", type=Path, default=REPO / "build" / "kjv.txt",
                        help="KJV text, one verse per line (default: build/kjv.txt, created with "
                             "`bible -f Gen1:1-Rev22:21` if missing)")
    parser.add_argument("--out", type=Path, default=REPO / "picogpt" / "io" / "data",
                        help="writes OUT/tiny-target/ and OUT/tiny-draft/ (default: picogpt/io/data/)")
    parser.add_argument("--report-dir", type=Path, default=REPO / "weights",
                        help="writes training-report.json and training-log.txt there (default: weights/)")
    parser.add_argument("--target-steps", type=int, default=TARGET_TRAINING.steps)
    parser.add_argument("--draft-steps", type=int, default=DRAFT_TRAINING.steps)
    parser.add_argument("--target-layers", type=int, default=TARGET.n_layer)
    parser.add_argument("--target-heads", type=int, default=TARGET.n_head)
    parser.add_argument("--target-embd", type=int, default=TARGET.n_embd)
    parser.add_argument("--draft-layers", type=int, default=DRAFT.n_layer)
    parser.add_argument("--draft-heads", type=int, default=DRAFT.n_head)
    parser.add_argument("--draft-embd", type=int, default=DRAFT.n_embd)
    parser.add_argument("--target-from", type=Path, default=None,
                        help="skip step 1: distil from this already-exported tiny-target folder")
    parser.add_argument("--threads", type=int, default=2)
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.use_deterministic_algorithms(True)
    torch.manual_seed(SEED)
    generator = torch.Generator().manual_seed(SEED)
    log_lines = []

    def log(message):
        print(message, flush=True)
        log_lines.append(message)

    if not args.corpus.exists():
        dump_bible(args.corpus)
    chapters = read_chapters(args.corpus)
    tokenizer = picogpt.tokenizer()  # the offline GPT-2 encoding shipped in the package
    train_ids, val_ids = split_tokens(chapters, tokenizer)
    vocab = compact_vocab(train_ids)
    train_c, val_c = vocab.to_compact[train_ids], vocab.to_compact[val_ids]  # compact ids
    log(f"corpus {shown(args.corpus)} (sha256 {sha256(args.corpus)[:16]}...): {len(chapters)} chapters, "
        f"{len(train_ids):,} train / {len(val_ids):,} val tokens, {len(vocab.seen):,} distinct "
        f"training tokens (+1 shared row for the {vocab.n_unseen:,} unseen)")

    target_shape = replace(TARGET, n_layer=args.target_layers, n_head=args.target_heads, n_embd=args.target_embd)
    draft_shape = replace(DRAFT, n_layer=args.draft_layers, n_head=args.draft_heads, n_embd=args.draft_embd)
    target_train = replace(TARGET_TRAINING, steps=args.target_steps)
    draft_train = replace(DRAFT_TRAINING, steps=args.draft_steps)
    report = {"seed": SEED, "threads": args.threads, "torch": torch.__version__,
              "corpus_sha256": sha256(args.corpus), "train_tokens": len(train_ids),
              "val_tokens": len(val_ids), "distinct_train_tokens": len(vocab.seen),
              "target": asdict(target_shape), "draft": asdict(draft_shape),
              "target_training": asdict(target_train), "draft_training": asdict(draft_train),
              "distill_data_weight": DISTILL_DATA_WEIGHT}

    # 1. the target q: next-token cross-entropy
    def data_loss(model, batch):
        return full_vocab_nll(compact_logits(model, batch[:, :-1], vocab, bfloat16=model.training),
                              batch[:, 1:], vocab)

    if args.target_from is None:
        target = new_model(target_shape, vocab.size)
        log(f"target q: {asdict(target_shape)}, {n_params(target):,} training parameters")
        report["target_seconds"] = train_loop("target", target, data_loss, train_c, target_train, generator, log)
        save_checkpoint(args.out / "tiny-target", target, target_shape, vocab)
        target_dir = args.out / "tiny-target"
    else:
        target_dir = args.target_from
    # Step 2 restarts from the seed and from the target as exported (float16 weights, the model
    # the draft must imitate), so `--target-from picogpt/io/data/tiny-target` gives the same draft as
    # one run of both steps.
    torch.manual_seed(SEED)
    generator = torch.Generator().manual_seed(SEED)
    target = compact_from_exported(target_dir, vocab)
    log(f"target q loaded from {shown(target_dir)}")
    for p in target.parameters():
        p.requires_grad_(False)
    report["target_train_loss"] = evaluate(target, train_c, vocab, TARGET_TRAINING.block_size)
    report["target_val_loss"] = evaluate(target, val_c, vocab, TARGET_TRAINING.block_size)
    log(f"target q: train loss {report['target_train_loss']:.4f}, val loss {report['target_val_loss']:.4f} (nats/token)")

    # 2. the draft p: distilled from q
    def distill_loss(model, batch):
        with torch.no_grad():
            target_logits = compact_logits(target, batch[:, :-1], vocab, bfloat16=model.training)
        draft_logits = compact_logits(model, batch[:, :-1], vocab, bfloat16=model.training)
        return distillation_loss(draft_logits, target_logits, batch[:, 1:], vocab)

    draft = new_model(draft_shape, vocab.size)
    log(f"draft p: {asdict(draft_shape)}, {n_params(draft):,} training parameters")
    report["draft_seconds"] = train_loop("draft", draft, distill_loss, train_c, draft_train, generator, log)
    save_checkpoint(args.out / "tiny-draft", draft, draft_shape, vocab)
    draft = rounded_to_float16(draft)
    report["draft_train_loss"] = evaluate(draft, train_c, vocab, DRAFT_TRAINING.block_size)
    report["draft_val_loss"] = evaluate(draft, val_c, vocab, DRAFT_TRAINING.block_size)
    report["draft_val_distill_loss"] = evaluate(draft, val_c, vocab, DRAFT_TRAINING.block_size, distill_loss)
    log(f"draft p: train loss {report['draft_train_loss']:.4f}, val loss {report['draft_val_loss']:.4f}, "
        f"val distillation loss {report['draft_val_distill_loss']:.4f}")

    # 3. checks and a preliminary acceptance rate
    for name, model, folder in (("tiny-target", target, target_dir), ("tiny-draft", draft, args.out / "tiny-draft")):
        diff = check_export(folder, model, vocab, val_ids)
        log(f"{name}: exported 50,257-token model matches the trained one, max |log-prob diff| {diff:.2e}")
        report[f"{name}_export_max_abs_logprob_diff"] = diff
        path = folder / "model.safetensors"
        report[f"{name}_bytes"] = path.stat().st_size
        report[f"{name}_sha256"] = sha256(path)
    prompt_starts = torch.randint(len(val_c) - 8, (16,), generator=generator)
    prompts = torch.stack([torch.from_numpy(val_c[s:s + 8]) for s in prompt_starts.tolist()])  # [16, 8]
    samples = sample_from(target, prompts, 128, vocab, generator)                               # [16, 136]
    alpha, n_positions = acceptance_rate(draft, target, samples, prompts.shape[1], vocab)
    report["torch_alpha"], report["torch_alpha_positions"] = alpha, n_positions
    log(f"preliminary alpha (torch, {n_positions} positions sampled from q at temperature 1): {alpha:.3f}")
    text = tokenizer.decode(vocab.to_gpt2(samples[0].numpy()).tolist())
    log(f"a sample from q:\n{text}")
    args.report_dir.mkdir(parents=True, exist_ok=True)
    (args.report_dir / "training-report.json").write_text(json.dumps(report, indent=2) + "\n")
    (args.report_dir / "training-log.txt").write_text("\n".join(log_lines) + "\n")


if __name__ == "__main__":
    main()
