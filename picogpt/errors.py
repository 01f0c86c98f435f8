"""One error type a student can read.

Everything picogpt raises on bad input is a `PicoGPTError` (a `ValueError`), whose message
says what was wrong, what was expected and what to do next. The command line prints that one
line and exits with status 2.
"""


class PicoGPTError(ValueError):
    """Bad input, a bad file or a failed download, explained in one readable message."""


class CheckpointError(PicoGPTError):
    """A checkpoint file that is missing, truncated, corrupt or of the wrong shape."""


class DownloadError(PicoGPTError):
    """A download that failed or did not match its published hash."""
