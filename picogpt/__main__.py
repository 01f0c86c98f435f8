import sys

try:
    from .cli import main
except KeyboardInterrupt:  # Ctrl-C while the command starts: one line, as cli.main says it later
    print("interrupted", file=sys.stderr)
    sys.exit(130)

sys.exit(main())
