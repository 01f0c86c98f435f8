"""One error type a student can read.

Everything picogpt raises on bad input is a `PicoGPTError` (a `ValueError`), whose message
says what was wrong, what was expected and what to do next. The command line prints that one
line and exits with status 2.

Text that comes from a file or a server (a tensor's name or dtype, an HTTP reason phrase, a
folder's name, the text a model generates) goes through `shown` before it is printed: an
escape sequence in it (ESC ] 0 ; ... BEL retitles a terminal, ESC [ 31 m recolours it) is
printed as the characters `\\x1b`, never sent to the terminal. A value a user handed in (a
step's output, an argument) is echoed by `echo`: its repr, cut short, so that a million ids or an
integer of 5,000 digits make a short line, not a long one or a second error.
"""

import reprlib


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


class _Echo(reprlib.Repr):
    """reprlib's short repr, with integers too long to print (Python refuses str() of one over
    4,300 digits) described by their size."""

    def repr_int(self, x, level):
        try:
            return super().repr_int(x, level)
        except ValueError:
            return f"<an integer of {x.bit_length()} bits>"


_ECHO = _Echo()
_ECHO.maxlist = _ECHO.maxtuple = 12
_ECHO.maxstring = _ECHO.maxother = 60
_ECHO.maxlong = 40


def echo(value, limit=120):
    """`value` as an error message repeats it: a short repr (a few items of a long list, the
    ends of a long number), escaped as `shown` escapes, at most `limit` characters."""
    return shown(_ECHO.repr(value), limit)
