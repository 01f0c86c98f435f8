"""The command line: `python -m picogpt COMMAND ...` (see `python -m picogpt --help`).

Every command turns bad input into one readable line on stderr and exit status 2.
"""

import argparse
import sys

from .errors import PicoGPTError


def cmd_info(args):
    from .registry import load, resolve

    model = load(args.model)
    c = model.config
    print(f"model       {model.name}  ({resolve(args.model)})")
    print(f"n_layer     {c.n_layer}\nn_head      {c.n_head}\nn_embd      {c.n_embd}")
    print(f"n_ctx       {c.n_ctx}\nn_vocab     {c.n_vocab}\nln epsilon  {c.layer_norm_epsilon:g}")
    print(f"parameters  {model.n_params:,}")
    print(f"bytes       {model.nbytes:,} as float32 ({model.nbytes / 2**20:,.1f} MiB)")


def cmd_download(args):
    from .download import download, spec_for

    specs = [spec_for(name) for name in args.models]  # reject a bad name before any download
    for spec in specs:
        download(spec.name, progress=not args.quiet)


def build_parser():
    parser = argparse.ArgumentParser(prog="python -m picogpt", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    info = commands.add_parser("info", help="print a model's config, parameter count and bytes")
    info.add_argument("model", help="model name (gpt2, gpt2-xl, tiny-draft, ...) or path")
    info.set_defaults(run=cmd_info)

    download = commands.add_parser(
        "download", help="download GPT-2 checkpoints at pinned revisions, sha256-verified")
    download.add_argument("models", nargs="+", metavar="NAME",
                          help="gpt2, gpt2-medium, gpt2-large or gpt2-xl")
    download.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    download.set_defaults(run=cmd_download)

    return parser


def main(argv=None):
    args = build_parser().parse_args(argv)
    try:
        return args.run(args) or 0
    except PicoGPTError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
