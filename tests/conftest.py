"""Session set-up shared by every test file."""


def pytest_configure(config):
    """Load or compile picogpt's compiled kernels once, before any test (and, under
    pytest-xdist, in the controller before the workers start), so that no test sees numba's
    one-time compile message on stderr or two workers compile at once."""
    if hasattr(config, "workerinput"):  # an xdist worker: the controller has done it
        return
    from picogpt.perf import compiled

    compiled.compile_kernels()
