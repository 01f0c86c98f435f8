"""The command line, `python -m picogpt COMMAND` (or `picogpt COMMAND`): info, download,
generate (Algorithm 1), speculate (Algorithm 2) and bench; `--help` shows each one's examples.

Every command turns bad input into one readable line on stderr and exit status 2, and a
mistyped command or flag into the closest one it knows.
"""

import argparse
import codecs
import contextlib
import dataclasses
import difflib
import json
import os
import secrets
import signal
import sys
import textwrap

from .errors import PicoGPTError, shown

# The default prompt suits the target that continues it: the teaching pair learned its English
# from the King James Bible; GPT-2 from the web.
TEACHING_PROMPT = "And God said"
GPT2_PROMPT = "Alan Turing theorized that computers would one day become"


def default_prompt(target_name):
    """The prompt used when --prompt is left out: the teaching pair's for a tiny-* target, else GPT-2's."""
    from .io.registry import EMBEDDED

    return TEACHING_PROMPT if target_name in EMBEDDED else GPT2_PROMPT


def cmd_info(args):
    from .io.registry import model_names, source_of
    from .model import load

    model = load(args.model)
    c = model.config
    print(f"model       {model.name}  ({shown(model.checkpoint)})")
    print(f"source      {source_of(args.model if args.model in model_names() else None, model.checkpoint)}")
    print(f"n_layer     {c.n_layer}\nn_head      {c.n_head}\nn_embd      {c.n_embd}")
    print(f"n_ctx       {c.n_ctx}\nn_vocab     {c.n_vocab}\nln epsilon  {c.layer_norm_epsilon:g}")
    print(f"parameters  {model.n_params:,}")
    print(f"bytes       {model.nbytes:,} as float32 ({model.nbytes / 2**20:,.1f} MiB)")


def cmd_download(args):
    from .io.download import download, spec_for

    specs = [spec_for(name) for name in args.models]  # reject a bad name before any download
    for spec in specs:
        download(spec.name, progress=not args.quiet)


# ---------------------------------------------------------------------------------------------
# generate and speculate: Algorithms 1 and 2 on GPT-2 text
# ---------------------------------------------------------------------------------------------

class IncrementalText:
    """Token ids -> text as they arrive. A character whose UTF-8 bytes span two tokens is held
    back until its last byte comes; invalid bytes become U+FFFD, as in tiktoken's decode. GPT-2
    has a token for every byte, ESC included: what a model writes is shown, never obeyed by the
    terminal (control characters other than line breaks and tabs are printed as escapes)."""

    def __init__(self, tok):
        self.tok = tok
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def add(self, tokens):
        return shown("".join(self.decoder.decode(self.tok.decode_single_token_bytes(t)) for t in tokens), keep="\n\t")

    def finish(self):
        return shown(self.decoder.decode(b"", final=True), keep="\n\t")


class StreamedText:
    """Prints the first N tokens of a speculative run's loops as they come (the last loop may
    emit more than N; the run keeps N), then ends the line."""

    def __init__(self, tok, N):
        self.text, self.left = IncrementalText(tok), N

    def __call__(self, loop):
        tokens, self.left = loop.tokens[: max(self.left, 0)], self.left - len(loop.tokens)
        print(self.text.add(tokens), end="", flush=True)
        if self.left <= 0 and tokens:
            print(self.text.finish(), flush=True)


def encode_prompt(text):
    """GPT-2 token ids of the prompt ('<|endoftext|>' allowed, as GPT-2's document separator)."""
    from .io.tokenizer import ENDOFTEXT, tokenizer

    return tokenizer().encode(text, allowed_special={ENDOFTEXT})


def load_gpt2_vocab_model(name_or_path, in_memory=False):
    """Load a model and check that it speaks GPT-2's tokenizer, which the command line decodes with."""
    from .io.tokenizer import tokenizer
    from .model import load

    model = load(name_or_path, in_memory)
    n_vocab = tokenizer().n_vocab
    if model.config.n_vocab != n_vocab:
        raise PicoGPTError(f"{model.name} has a vocabulary of {model.config.n_vocab:,} tokens, but the command "
                           f"line uses GPT-2's tokenizer ({n_vocab:,} tokens); sample it from Python instead "
                           "(picogpt.speculative_sampling takes token ids)")
    return model


def sampling_controls(args):
    """temperature, top_k and top_p: applied alike to every model and algorithm."""
    return dict(temperature=args.temperature, top_k=args.top_k, top_p=args.top_p)


def sampling_options(args):
    return sampling_controls(args) | dict(seed=args.seed)


def validate_request(args, ids, models=()):
    """Check the request (before loading any model, then against the models) so that bad input
    is reported before any text is printed."""
    from .sampling import validate_sampling_args

    validate_sampling_args(ids, args.N, models, K=getattr(args, "K", None), temperature=args.temperature,
                        top_k=args.top_k, top_p=args.top_p)


def parse_request(args, target_name):
    """Tokenise the prompt (the target's default one when none was given), check the request, and
    pick a seed if none was given. Greedy sampling (temperature 0) draws nothing at random: its
    seed changes nothing, so it runs with seed 0 and none is printed or reported."""
    if args.prompt is None:
        args.prompt = default_prompt(target_name)
    ids = encode_prompt(args.prompt)
    validate_request(args, ids)
    if args.seed is not None and args.seed < 0:  # reported before any model loads
        raise PicoGPTError(f"--seed {args.seed}: the seed must be a whole number >= 0 (leave --seed out for "
                           "a random one, which is printed so that the run can be repeated)")
    if args.seed is None:
        args.seed = 0 if greedy(args) else secrets.randbelow(2**31)  # reported, so the run can be repeated
    return ids


def greedy(args):
    return args.temperature == 0


def seed_text(args, repeats=1):
    """How a run's seeds are printed: 'seed 5', 'seeds 4-5', or 'greedy' (no seed matters)."""
    if greedy(args):
        return "greedy"
    return f"seed {args.seed}" if repeats == 1 else f"seeds {args.seed}-{args.seed + repeats - 1}"


def cmd_generate(args):
    from .course import course_pair_names
    from .io.tokenizer import tokenizer
    from .sampling import autoregressive_sampling

    target_name = args.model or course_pair_names()[1]
    ids = parse_request(args, target_name)
    model = load_gpt2_vocab_model(target_name, args.in_memory)
    validate_request(args, ids, (model,))
    model(ids[:1])  # before the timing: memory-mapped weights are read from disk on first use
    text = IncrementalText(tokenizer())
    print(args.prompt, end="", flush=True)
    result = autoregressive_sampling(model, ids, args.N, **sampling_options(args),
                                     on_token=lambda t: print(text.add([t]), end="", flush=True))
    print(text.finish())
    print(f"\n[{model.name}: {len(result.tokens)} tokens in {result.seconds:.2f} s "
          f"({result.tokens_per_s:.1f} tokens/s), {seed_text(args)}]")


def speculate_report(args, draft, target, result, ars, measurements):
    """The JSON object of `speculate --json`: the first run of --verify's chain (its tokens, text,
    seconds and tokens per loop: the run the text shows), and with --compare the first
    autoregressive run (ars_*), the medians over the repeats (median_seconds, ars_median_seconds),
    the speedup (the median of the repeat-by-repeat ratios; speedup_runs their quartiles), the
    verdict measure/compare.py draws from the pairs, and under "verifiers" each verifier measured
    (token by token always; block verification too with --verify block) with its tokens per loop
    over all runs and each repeat's seconds and tokens per loop (the pairs of the verdicts)."""
    from .io.tokenizer import tokenizer
    from .measure import compare
    from .measure.speedup import versus, versus_autoregressive

    report = dict(draft=draft.name, target=target.name, prompt=args.prompt, N=args.N, K=args.K, verify=args.verify,
                  temperature=args.temperature, top_k=args.top_k, top_p=args.top_p,
                  seed=None if greedy(args) else args.seed,
                  tokens=result.tokens, text=tokenizer().decode(result.tokens), loops=len(result.loops),
                  tokens_per_loop=result.tokens_per_loop, seconds=result.seconds)
    if args.tree:
        return report | dict(K=None, tree=list(result.shape))
    report.update(K_drafted=K_drafted(result), accepted=result.accepted, alpha_hat=result.alpha_hat)
    if measurements is not None:
        m, at = measurements[args.verify], measurements[args.verify].by_K[args.K]
        report.update(repeats=m.repeats, median_seconds=at.seconds.median,
                      ars_tokens=ars.tokens, ars_text=tokenizer().decode(ars.tokens), ars_seconds=ars.seconds,
                      ars_median_seconds=m.autoregressive_s.median, speedup=at.speedup,
                      speedup_runs=dataclasses.asdict(at.speedup_runs),
                      verdict=compare.sentence(versus_autoregressive(m, args.K, chain_name(args))),
                      verifiers={verify: dict(tokens_per_loop_all_runs=v.by_K[args.K].tokens_per_loop,
                                              median_seconds=v.by_K[args.K].seconds.median,
                                              speedup=v.by_K[args.K].speedup,
                                              speedup_runs=dataclasses.asdict(v.by_K[args.K].speedup_runs),
                                              runs_s=v.by_K[args.K].runs_s,
                                              tokens_per_loop_runs=v.by_K[args.K].tokens_per_loop_runs)
                                 for verify, v in measurements.items()})
        if len(measurements) > 1:
            token, chosen = measurements["token"].by_K[args.K], at
            report["verifier_verdicts"] = [compare.sentence(versus(args.verify, chosen, "token", token, words))
                                           for words in (compare.TOKENS_PER_CALL, compare.TIME)]
    return report


def chain_name(args):
    return "speculative sampling" + ("" if args.verify == "token" else f" ({args.verify} verification)")


def compare(args, draft, target, ids, on_loop):
    """--compare: measure/speedup.measure_chains, as the bench and notebook 05 time it (a warm-up of
    every algorithm, then `--repeats` interleaved timed runs of each, seeds seed .. seed + repeats - 1,
    the order alternated): --verify's chain first (its first run is the one streamed), Algorithm 2
    token by token when --verify names another verifier, and autoregressive sampling. Returns (the
    first run of --verify's chain, the first autoregressive run, {verify: SpeedupMeasurement})."""
    from .measure.speedup import measure_chains
    from .speculative import Chain

    chosen, first = Chain(args.K, args.verify), {}  # chain (None: autoregressive) -> its first timed run, printed
    measurements = measure_chains(draft, target, ids, args.N, [chosen, Chain(args.K)], repeats=args.repeats,
                                  seed=args.seed, **sampling_controls(args), on_loop=on_loop, progress=not args.json,
                                  on_run=lambda chain, run: first.setdefault(chain, run))
    return first[chosen], first[None], measurements


def K_drafted(result):
    """The most drafts a loop of `result` proposed: K, or fewer where the context had no room left."""
    return max((loop.K for loop in result.loops), default=0)


def K_text(args, result):
    """'K=4', or what the loops drafted when the context left capped K."""
    drafted = K_drafted(result)
    if drafted >= args.K:
        return f"K={args.K}"
    return f"K capped at {drafted} by the context left (asked -K {args.K})"


def speculate_method(args):
    """What `speculate` runs: Algorithm 2's chain of K drafts (speculative.Chain), or with --tree a
    token tree of that shape (tree.TreeShape), each with --verify's verifier. One line otherwise."""
    from .speculative import VERIFIERS, Chain
    from .tree import VERIFIERS as TREE_VERIFIERS
    from .tree import TreeShape, validate_shape

    if args.tree is None:
        if args.verify not in VERIFIERS:
            raise PicoGPTError(f"--verify {args.verify} verifies a token tree: give its shape too, e.g. --tree 2,2 "
                               f"(a chain's verifiers: {', '.join(VERIFIERS)})")
        return Chain(args.K, args.verify)
    try:
        shape = tuple(int(m) for m in args.tree.split(","))
    except ValueError:
        shape = args.tree
    shape = validate_shape(shape, max_nodes=10**6)
    if args.verify not in TREE_VERIFIERS:
        raise PicoGPTError(f"--verify {args.verify} with --tree: a tree's verifiers are {', '.join(TREE_VERIFIERS)} "
                           "(traversal on a chain-shaped tree such as --tree 1,1,1 is block verification)")
    if args.compare:
        raise PicoGPTError("--compare times chains: drop --tree, or see `python -m picogpt bench` for trees "
                           "measured against a chain and autoregressive sampling")
    return TreeShape(shape, args.verify)


def cmd_speculate(args):
    from .course import course_pair_names
    from .io.tokenizer import tokenizer
    from .measure.compare import fewest_pairs
    from .measure.speedup import warm_up

    if args.repeats is not None and not args.compare:
        raise PicoGPTError(f"--repeats {args.repeats} times the runs of --compare, and --compare is not given: "
                           "add --compare, or leave --repeats out")
    if args.repeats is None:
        args.repeats = fewest_pairs()
    default_draft, default_target = (args.draft, args.target) if args.draft and args.target else course_pair_names()
    ids = parse_request(args, args.target or default_target)
    if args.repeats < 1:
        raise PicoGPTError(f"--repeats {args.repeats}: the number of timed runs of each algorithm must be at least 1")
    method = speculate_method(args)
    draft = load_gpt2_vocab_model(args.draft or default_draft, args.in_memory)
    target = load_gpt2_vocab_model(args.target or default_target, args.in_memory)
    validate_request(args, ids, (draft, target))
    stream = not args.json
    on_loop = StreamedText(tokenizer(), args.N) if stream else None
    if stream:
        print(args.prompt, end="", flush=True)
    if args.compare:
        result, ars, measurements = compare(args, draft, target, ids, on_loop)
    else:
        warm_up({method: (draft, method)}, target, ids, min(args.N, 4), args.seed, sampling_controls(args))
        result = method.sample(draft, target, ids, args.N, **sampling_options(args), on_loop=on_loop)
        ars = measurements = None
    if args.json:
        print(json.dumps(speculate_report(args, draft, target, result, ars, measurements)))
        return
    verification = "" if args.verify == "token" else f", {args.verify} verification"
    if args.tree:
        print(f"\n[token tree: draft {draft.name}, target {target.name}, shape {result.shape}{verification}, "
              f"{seed_text(args)}]")
        print(f"  {len(result.tokens)} tokens in {result.seconds:.2f} s; {loops_line(result)}")
        return
    print(f"\n[speculative: draft {draft.name}, target {target.name}, {K_text(args, result)}{verification}, "
          f"{seed_text(args)}]")
    first = "  the run above: " if measurements is not None else "  "
    print(f"{first}{len(result.tokens)} tokens in {result.seconds:.2f} s ({result.tokens_per_s:.1f} tokens/s); "
          f"{loops_line(result)}; observed acceptance alpha_hat = {result.alpha_hat:.2f}")
    if measurements is not None:
        print_comparison(args, result, ars, measurements)


def loops_line(result):
    """The loops, as in '18 loops emitted 67 tokens (3.72 tokens per loop), the last 3 past N = 64 not kept'."""
    emitted = sum(len(loop.tokens) for loop in result.loops)
    extra = emitted - len(result.tokens)
    return (f"{len(result.loops)} loops emitted {emitted} tokens ({result.tokens_per_loop:.2f} tokens per loop)"
            + (f", the last {extra} past N = {len(result.tokens)} not kept" if extra else ""))


def print_comparison(args, result, ars, measurements):
    """--compare's lines, each figure saying what it is (the run above, the first autoregressive
    run, or the median of the repeats): both algorithms' median times, the speedup as
    measure/speedup.py reports it everywhere (the median of the run-by-run ratios, with their
    interquartile range) and the verdict measure/compare.py draws from the same pairs; with two
    verifiers, each one's tokens per loop and speedup, and the verifiers compared pair by pair."""
    from .course.speed_panels import verifier_lines
    from .io.tokenizer import tokenizer
    from .measure import compare
    from .measure.speedup import speedup_text, versus_autoregressive

    m = measurements[args.verify]
    at = m.by_K[args.K]
    median = f"median of {m.repeats} runs" if m.repeats > 1 else "one run"
    print(f"  {median}: {at.seconds.median:.2f} s")
    print(f"[autoregressive: target {m.target}, " + ("greedy]" if greedy(args) else f"the same {seed_text(args, m.repeats)}]"))
    print(f"  {median}: {m.N} tokens in {m.autoregressive_s.median:.2f} s ({m.N / m.autoregressive_s.median:.1f} tokens/s)")
    pairing = "of the same repeat" if greedy(args) else "of the same seed"
    order = "in alternating order" if m.repeats > 1 else ""
    print(f"  speedup {speedup_text(at) if m.repeats > 1 else f'{at.speedup:.2f}x'}: autoregressive seconds / "
          f"speculative seconds {pairing}, {median} of each after a warm-up{', ' + order if order else ''}")
    print("  " + compare.sentence(versus_autoregressive(m, args.K, chain_name(args))))
    if len(measurements) > 1:
        print("[verifiers, in the same interleaved runs]")
        print("\n".join("  " + line for line in verifier_lines(measurements, args.K)))
    same = ars.tokens == result.tokens
    whose = "outputs" if greedy(args) else f"outputs of seed {args.seed}"
    print(f"  {whose}: " + ("identical (greedy)" if same else "different samples, same distribution"))
    if not same:
        print(f"  autoregressive text (its first run): {shown(repr(tokenizer().decode(ars.tokens)))}")


def add_sampling_flags(parser):
    parser.add_argument("--prompt", default=None, help=f"the text to continue (default: {TEACHING_PROMPT!r} for the "
                        f"teaching pair, {GPT2_PROMPT!r} for GPT-2)")
    parser.add_argument("-n", "--n-tokens", dest="N", type=int, default=40, help="tokens to generate, N (default 40)")
    parser.add_argument("--temperature", type=float, default=1.0, help="0 = greedy (default 1)")
    parser.add_argument("--top-k", type=int, default=None, help="keep the k most probable tokens")
    parser.add_argument("--top-p", type=float, default=None, help="nucleus: keep the smallest set reaching p")
    parser.add_argument("--seed", type=int, default=None, help="random seed (default: a random one, printed; "
                        "greedy sampling, --temperature 0, needs none)")
    parser.add_argument("--in-memory", action="store_true",
                        help="copy the weights into memory instead of mapping the files: decoding at a "
                             "steadier, often faster speed, for the models' size in memory "
                             "(see benchmarks/README.md)")


BENCH_MODELS = ["gpt2", "gpt2-xl", "tiny-draft", "tiny-target"]


def bench_cost(models, quick, folder):
    """What `bench` will write and how long a run takes, as lines said before it writes anything
    (and in --help): the random-weight checkpoints it must write first, with their size and
    place, and the duration of the committed full run."""
    from .bench.checkpoints import random_to_write, shown_path
    from .measure.results import bench_seconds

    lines = []
    writes = random_to_write(models)
    if writes:
        lines.append(f"bench: GPT-2 is not downloaded, so it first writes random-weight checkpoints of the published "
                     f"shapes, {sum(n for _, n in writes) / 1e9:.1f} GB: "
                     + ", ".join(f"{shown(shown_path(f))}/ ({n / 1e9:.1f} GB)" for f, n in writes)
                     + " (once: later runs reuse them; make clean removes them)")
    took = bench_seconds()
    if quick:
        lines.append("bench --quick: a first look, fewer runs than the full bench")
    elif took:
        lines.append(f"bench: the committed full run took {took[0] / 60:.0f} minutes on a {took[1]}-core machine "
                     "(benchmarks/bench.json); --quick is a first look")
    return lines + [f"bench: results go to {shown(shown_path(folder))}/"]


def cmd_bench(args):
    from .bench import report, run_bench
    from .bench.checkpoints import given_checkpoints
    from .io.files import ensure_writable_folder
    from .measure.results import committed_dir, scratch_dir

    if args.save and args.quick:
        raise PicoGPTError("--quick is a first look, not results to commit: drop --quick to --save")
    overrides = {}
    if args.runs is not None and args.runs < 1:
        raise PicoGPTError(f"--runs {args.runs}: the number of timed runs per figure must be at least 1")
    if args.runs is not None:
        overrides["n_runs"] = args.runs
    folder = args.out or (committed_dir() if args.save else scratch_dir())
    ensure_writable_folder(folder, "the bench's results folder", "choose another with --out DIR")  # before measuring
    given_checkpoints(args.models)  # every path checked before anything is announced, written or measured
    print("\n".join(bench_cost(args.models, args.quick, folder)), file=sys.stderr, flush=True)  # before writing
    results = run_bench(args.models, quick=args.quick, **overrides)
    paths = report.save(results, folder, "bench-quick" if args.quick else "bench")
    print(report.to_json(results) if args.json else shown(report.table(results), keep="\n"))
    print(f"saved {shown(', '.join(map(str, paths)))}", file=sys.stderr)
    if args.save and not args.out:
        print("render the documents that quote them: python tools/render_docs.py", file=sys.stderr)
    elif not args.save and not args.out:
        print("(a scratch folder git ignores: --save writes benchmarks/)", file=sys.stderr)


DESCRIPTION = """\
picogpt: GPT-2 in NumPy, and speculative sampling (Chen et al. 2023) on it.

Without GPT-2 downloaded, every command runs on the embedded teaching pair (tiny-draft drafting
for tiny-target: two tiny models trained on the King James Bible, so their text reads like
scrambled scripture); `python -m picogpt download gpt2 gpt2-xl` fetches the real pair (7 GB)."""

EXAMPLES = {
    None: """\
examples:
  python -m picogpt speculate --prompt "And God said" -n 64 -K 4 --compare
  python -m picogpt generate --prompt "And God said" -n 40 --seed 1
  python -m picogpt info tiny-target
  python -m picogpt COMMAND --help      (each command's flags and examples)""",
    "info": """\
examples:
  python -m picogpt info tiny-target
  python -m picogpt info weights/gpt2-xl/model.safetensors""",
    "download": """\
examples:
  python -m picogpt download gpt2 gpt2-xl     (the course's pair, about 7 GB)
  PICOGPT_WEIGHTS_DIR=/data/gpt2 python -m picogpt download gpt2""",
    "generate": """\
examples:
  python -m picogpt generate --prompt "And God said" -n 40 --seed 1
  python -m picogpt generate --model gpt2 --prompt "Alan Turing" --temperature 0.8 --top-p 0.9""",
    "speculate": """\
examples:
  python -m picogpt speculate --prompt "And God said" -n 64 -K 4 --compare
  python -m picogpt speculate --prompt "And God said" -n 64 -K 4 --verify block --compare   (both verifiers)
  python -m picogpt speculate --prompt "And God said" -n 64 --tree 2,2 --verify traversal   (a token tree)
  python -m picogpt speculate --draft gpt2 --target gpt2-xl --temperature 0   (greedy: XL's own greedy text)
  python -m picogpt speculate --prompt "In the beginning" --json""",
    "bench": """\
examples:
  python -m picogpt bench --quick --models tiny-draft tiny-target   (a first look, under a minute)
  python -m picogpt bench              (everything; GPT-2 small and XL on random weights if not downloaded)
  python -m picogpt bench --save       (the same, into benchmarks/; then python tools/render_docs.py)""",
}


class Parser(argparse.ArgumentParser):
    """argparse, whose errors are one line, like every other error of the command line: what was
    wrong, the closest command or flag to a mistyped one, and where the flags are listed."""

    def error(self, message):
        self.exit(2, f"error: {message}{suggestion(self, message)}; see `{self.prog} --help`\n")


def suggestion(parser, message):
    """'; did you mean --prompt?' for 'unrecognized arguments: --promt', and the like for an
    unknown command; '' when nothing is close."""
    if "invalid choice: " in message:
        word = message.split("invalid choice: ", 1)[1].split("'")[1]
        choices = [choice for action in parser._actions if action.choices for choice in action.choices]
    elif message.startswith("unrecognized arguments: "):
        word = next((w for w in message.split()[2:] if w.startswith("-")), "")
        choices = [option for action in parser._actions for option in action.option_strings]
    else:
        return ""
    word = word.split("=")[0]
    same_letters = [choice for choice in choices if choice.lower() == word.lower()]  # -k for -K
    close = same_letters or difflib.get_close_matches(word, choices, n=1, cutoff=0.6)
    return f" (did you mean {close[0]}?)" if close else ""


def formatter(prog):
    return argparse.RawDescriptionHelpFormatter(prog, max_help_position=28)


def add_command(commands, name, run, help, cost=""):
    command = commands.add_parser(name, help=help, description=help[0].upper() + help[1:] + "." + cost,
                                  epilog=EXAMPLES[name], formatter_class=formatter)
    command.set_defaults(run=run)
    return command


def parse_args(argv=None):
    """The parsed command line; a flag the chosen command does not know is reported by that
    command's parser (its usage, and the closest flag it has), not by the top level's."""
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        commands.choices[args.command].error(f"unrecognized arguments: {' '.join(unknown)}")
    return args


def bench_help_cost():
    """bench's cost, for its --help: the random weights it writes without GPT-2 downloaded, and
    how long the committed full run took."""
    from .io.registry import published_weights_bytes
    from .measure.results import bench_seconds

    took = bench_seconds()
    gb = sum(published_weights_bytes(name) for name in ("gpt2", "gpt2-xl")) / 1e9
    return "\n\n" + textwrap.fill(
            "Its cost: without GPT-2 downloaded it first writes random-weight checkpoints of GPT-2 small's and "
            f"XL's shapes, {gb:.1f} GB, into the weights folder (random-gpt2/, random-gpt2-xl/; once, later runs reuse "
            "them; make clean removes them)."
            + (f" The committed full run took {took[0] / 60:.0f} minutes on a {took[1]}-core machine "
               "(benchmarks/bench.json)." if took else "")
            + " It says both again before it writes them.", width=100)


def build_parser():
    from . import __version__
    from .speculative import VERIFIERS
    from .tree import VERIFIERS as TREE_VERIFIERS

    parser = Parser(prog="python -m picogpt", description=DESCRIPTION, epilog=EXAMPLES[None], formatter_class=formatter)
    parser.add_argument("--version", action="version", version=f"picogpt {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=Parser)

    info = add_command(commands, "info", cmd_info, "print a model's config, parameter count and bytes")
    info.add_argument("model", help="model name (gpt2, gpt2-xl, tiny-draft, ...) or path")

    download = add_command(commands, "download", cmd_download,
                           "download GPT-2 checkpoints at pinned revisions, sha256-verified")
    download.add_argument("models", nargs="+", metavar="NAME", help="gpt2, gpt2-medium, gpt2-large or gpt2-xl")
    download.add_argument("-q", "--quiet", action="store_true", help="no progress bar")

    generate = add_command(commands, "generate", cmd_generate, "autoregressive sampling (Algorithm 1), streamed")
    generate.add_argument("--model", default=None, help="model name or path (default: the course target)")
    add_sampling_flags(generate)

    speculate = add_command(commands, "speculate", cmd_speculate, "speculative sampling (Algorithm 2), streamed")
    speculate.add_argument("--draft", default=None, help="draft model p (default: the course draft)")
    speculate.add_argument("--target", default=None, help="target model q (default: the course target)")
    speculate.add_argument("-K", type=int, default=4, help="draft tokens per loop, K (default 4)")
    add_sampling_flags(speculate)
    speculate.add_argument("--verify", choices=sorted(set(VERIFIERS) | set(TREE_VERIFIERS)), default="token",
                           help="how the drafts are judged: token (Algorithm 2, token by token; the default) or block "
                                "(block verification, Sun et al. 2025: the block judged together); with --tree, token "
                                "(from the root) or traversal (from the leaves, Weng et al. 2025)")
    speculate.add_argument("--tree", default=None, metavar="SHAPE",
                           help="draft a token tree instead of a chain: candidates per level, e.g. 2,2 or 3,1,1")
    speculate.add_argument("--compare", action="store_true",
                           help="also sample the target autoregressively and report the speedup: a warm-up, "
                                "then --repeats interleaved timed runs of each algorithm")
    speculate.add_argument("--repeats", type=int, default=None,
                           help="with --compare: timed runs of each algorithm, seeds SEED, SEED+1, ..., paired by "
                                "seed (default 6: the fewest pairs from which a 95%% sign test can conclude)")
    speculate.add_argument("--json", action="store_true", help="print one JSON object instead of text")

    bench = add_command(commands, "bench", cmd_bench,
                        "measure decode, scoring and speculative sampling speed on this machine",
                        cost=bench_help_cost())
    bench.add_argument("--models", nargs="+", default=BENCH_MODELS,
                       metavar="NAME", help="models or checkpoint paths (default: gpt2 gpt2-xl tiny-draft "
                       "tiny-target; GPT-2s not downloaded are measured on random weights of their shapes)")
    bench.add_argument("--quick", action="store_true", help="fewer runs, one context: a first look")
    bench.add_argument("--runs", type=int, default=None, help="timed runs per figure (default 5)")
    bench.add_argument("--out", default=None, help="folder for bench.json and bench.png (default: build/bench/, "
                       "which git ignores; with --save: benchmarks/)")
    bench.add_argument("--save", action="store_true", help="write the results to benchmarks/ to commit them "
                       "(python tools/render_docs.py then renders the documents that quote them)")
    bench.add_argument("--json", action="store_true", help="print the results as JSON instead of a table")

    return parser


def error_line(message):
    """One line on stderr: 'error: ' and the message, its line breaks folded into spaces (and
    any control character left, from a file name say, escaped)."""
    print("error: " + shown(" ".join(str(message).split())), file=sys.stderr)


def tolerant_stdout():
    """Print what the terminal's encoding cannot show (a token in cp1252, a lone surrogate from
    a badly encoded argument) as backslash escapes instead of failing mid-stream."""
    if hasattr(sys.stdout, "reconfigure"):
        sys.stdout.reconfigure(errors="backslashreplace")


RUN_A_MODEL = ("generate", "speculate", "bench")


def check_environment(command):
    """Parse the environment variables `command` reads now, so that a bad value is one line
    before the command prints anything, not an error in the middle of its output: every
    command's PICOGPT_THREADS, PICOGPT_COURSE_MODELS, PICOGPT_WEIGHTS_DIR and the Hugging Face
    cache's folder (HF_HUB_CACHE, HF_HOME, XDG_CACHE_HOME), download's
    HF_ENDPOINT, and PICOGPT_KERNEL for the commands that run a model (which load the compiled
    kernels anyway; info and download never do)."""
    from .course.pair import forced_pair
    from .fast import compiled
    from .fast.kernels import n_threads
    from .io.hf_cache import check_cache_variables
    from .io.pins import endpoint
    from .io.registry import weights_dir

    n_threads()
    forced_pair()
    weights_dir()
    check_cache_variables()
    if command == "download":
        endpoint()
    if command in RUN_A_MODEL:
        compiled.enabled()


def usable_std_streams():
    """A stdout or stderr closed before picogpt started (`>&-`) is None to Python: point it at
    /dev/null, so that the command's output is discarded quietly. The new descriptor is the
    lowest free one, the closed stream's own: no file opened later gets it (and whatever a
    library writes there)."""
    for name in ("stdout", "stderr"):
        if getattr(sys, name) is None:
            with contextlib.suppress(OSError):
                setattr(sys, name, open(os.devnull, "w"))


def closed_stdout_status():
    """The reader of our output went away (`... | head -n1`): end quietly, with the status of a
    program stopped by SIGPIPE. stdout is pointed at /dev/null, so that Python's last flush
    at exit finds nothing to complain about."""
    with contextlib.suppress(OSError, ValueError):
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 128 + getattr(signal, "SIGPIPE", 13)


def main(argv=None):
    """Run the command line; the exit status. Ctrl-C at any moment is one line, status 130."""
    try:
        return run_command(argv)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


def run_command(argv):
    import numpy as np

    usable_std_streams()
    args = parse_args(argv)
    tolerant_stdout()
    np.seterr(all="ignore")  # NaN or inf logits are reported by the model's own check, in one line
    try:
        check_environment(args.command)
        status = args.run(args) or 0
        sys.stdout.flush()  # a closed pipe shows here, not in Python's flush at exit
        return status
    except BrokenPipeError:
        return closed_stdout_status()
    except PicoGPTError as e:
        error_line(e)
        return 2
    except OSError as e:  # the environment: a full disk, a file or folder we may not read or write
        where = f" ({e.filename})" if e.filename else ""
        error_line(f"{e.strerror or e}{where}: check the disk's free space and the permissions of "
                   "that path (or set PICOGPT_WEIGHTS_DIR to another folder) and run the command again")
        return 2
