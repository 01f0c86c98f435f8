"""One error type a student can read.

Everything picogpt raises on bad input is a `PicoGPTError` (a `ValueError`), whose message
says what was wrong, what was expected and what to do next. The command line prints that one
line and exits with status 2.

Text that comes from a file or a server (a tensor's name or dtype, an HTTP reason phrase, a
folder's name, the text a model generates) goes through `shown` before it is printed: an
escape sequence in it (ESC ] 0 ; ... BEL retitles a terminal, ESC [ 31 m recolours it) is
printed as the characters `\\x1b`, never sent to the terminal.
"""


class PicoGPTError(ValueError):
    """Bad input, a bad file or a failed download, explained in one readable message."""


class CheckpointError(PicoGPTError):
    """A checkpoint file that is missing, truncated, corrupt or of the wrong shape."""


class DownloadError(PicoGPTError):
    """A download that failed or did not match its published hash."""


def shown(text, limit=None, keep=""):
    """`text` as picogpt prints it: every character a terminal would act on instead of showing
    (ESC, BEL and the other control and format characters; line breaks and tabs unless in
    `keep`) written as its Python escape, and at most `limit` characters, then an ellipsis."""
    text = "".join(c if c.isprintable() or c in keep else repr(c)[1:-1] for c in str(text))
    return text if limit is None or len(text) <= limit else text[:limit] + "…"
