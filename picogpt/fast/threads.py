"""picogpt's own threads: how many (PICOGPT_THREADS), and `parallel`, which shares one product
among them.

The fast path runs OpenBLAS on one thread (fast/openblas.py) and splits every big product into
chunks that the calling thread and n_threads() - 1 helper threads take from a common counter:
a thread the OS delays (a busy machine) holds nobody up, since whoever is free takes its share.
"""

import functools
import os
import threading
from concurrent.futures import ThreadPoolExecutor

from ..errors import PicoGPTError

THREADS_ENV = "PICOGPT_THREADS"
MAX_THREADS_PER_CORE = 4  # more threads than cores only take turns; each costs a stack and a share of every product
CHUNKS_PER_THREAD = 4


def n_threads():
    """Threads the fast path uses: $PICOGPT_THREADS, else the cores this process may use.
    (Asked on every product: the variable is read each time, its meaning worked out once.)"""
    return threads_for(os.environ.get(THREADS_ENV, "").strip())


@functools.cache
def threads_for(value):
    """The thread count a value of $PICOGPT_THREADS stands for ('' for unset): a whole number
    from 1 to MAX_THREADS_PER_CORE per usable core, written in ASCII digits."""
    if not value:
        return usable_cores()
    most = MAX_THREADS_PER_CORE * usable_cores()
    if not (value.isascii() and value.isdigit() and len(value) <= 6 and 1 <= int(value) <= most):
        raise PicoGPTError(f"{THREADS_ENV}={value[:20]!r}: expected a whole number of threads from 1 to {most} "
                           f"({MAX_THREADS_PER_CORE} per core this process may use), or unset it to use every core")
    return int(value)


def usable_cores():
    """The cores this process may run on (its CPU affinity where the OS tells it)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        return os.cpu_count() or 1


_pool, _pool_size = None, 0


def pool():
    """Helper threads (n_threads() - 1: the calling thread works too), made on first use."""
    global _pool, _pool_size
    size = max(1, n_threads() - 1)
    if _pool is None or _pool_size != size:
        _pool, _pool_size = ThreadPoolExecutor(max_workers=size, thread_name_prefix="picogpt"), size
    return _pool


class Chunks:
    """range(n_items) cut into chunks that any thread may take, one at a time."""

    def __init__(self, function, n_items, n_chunks):
        self.function, self.n_items = function, n_items
        self.size = -(-n_items // n_chunks)  # ceil
        self.next, self.running, self.error = 0, 0, None
        self.lock = threading.Condition()

    def take(self):
        with self.lock:
            if self.next >= self.n_items or self.error is not None:
                return None
            start, self.next = self.next, self.next + self.size
            self.running += 1
            return start

    def done(self, error=None):
        with self.lock:
            self.running -= 1
            self.error = self.error or error
            self.lock.notify_all()

    def work(self):
        while (start := self.take()) is not None:
            try:
                self.function(start, min(start + self.size, self.n_items))
            except BaseException as error:  # handed to the calling thread
                self.done(error)
                return
            self.done()

    def wait(self):
        """Until every chunk taken is finished (helpers that start later find none left)."""
        with self.lock:
            self.lock.wait_for(lambda: self.running == 0)
        if self.error is not None:
            raise self.error


def parallel(function, n_items, chunks_per_thread=CHUNKS_PER_THREAD):
    """Call function(start, stop) on consecutive chunks of range(n_items), on all threads.

    The calling thread works too, and chunks go to whichever thread is free, so on a busy
    machine, where a helper thread may wait milliseconds for a core, the caller does not wait
    for it: it takes the helper's share and only waits for chunks already being worked on."""
    if n_items <= 0:
        return
    n_helpers = min(n_threads(), n_items) - 1
    chunks = Chunks(function, n_items, (n_helpers + 1) * chunks_per_thread)
    for _ in range(n_helpers):
        pool().submit(chunks.work)
    chunks.work()
    chunks.wait()


def bands(n, n_parts):
    """[(start, stop)] cutting range(n) into n_parts contiguous bands."""
    edges = [n * i // n_parts for i in range(n_parts + 1)]
    return list(zip(edges[:-1], edges[1:]))
