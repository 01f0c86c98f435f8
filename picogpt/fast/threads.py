"""picogpt's own threads: how many (PICOGPT_THREADS), and `parallel`, which shares one product
among them.

The fast path runs NumPy's BLAS (the OpenBLAS NumPy ships) on one thread (`blas_on_one_thread`):
its own threads spin ~0.1 s after each call and slow whatever runs next (the other model's call,
in a sampling loop), and fight over the cores when the machine is busy. Instead every big product
is split into chunks that the calling thread and n_threads() - 1 helper threads take in turn: a
thread the OS delays (a busy machine) holds nobody up, since whoever is free takes the next chunk.

An exception may be raised in the calling thread at any moment (Ctrl-C, or any signal handler
that raises), so a helper never waits on anything the calling thread could be holding: chunks
are taken from an atomic counter (itertools.count, one step under the GIL), work arrives on a
queue.SimpleQueue, and the end of a product is a bare lock that whoever finishes the last chunk
releases. A helper with no work for IDLE_S seconds leaves, and helpers are daemon threads: an
interrupted product leaves nothing running, and an exit never waits on a helper. Where no helper
can start (the interpreter is shutting down: a model called from a `__del__`; or the OS refuses
a thread: `ulimit -v`, a limit on processes), the calling thread does all the work.
"""

import functools
import itertools
import os
import queue
import sys
import threading

from threadpoolctl import threadpool_limits

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


_blas_limit = None


def blas_on_one_thread():
    """Run NumPy's BLAS on one thread from now on, in this whole process (threadpoolctl)."""
    global _blas_limit
    if _blas_limit is None:
        _blas_limit = threadpool_limits(limits=1, user_api="blas")


IDLE_S = 1.0  # a helper with no work for this long leaves; the next product starts another


class Chunks:
    """range(n_items) cut into chunks that any thread may take, one at a time."""

    def __init__(self, function, n_items, n_chunks):
        self.function, self.n_items = function, n_items
        self.size = -(-n_items // n_chunks)  # ceil
        self.n_chunks = -(-n_items // self.size)
        self.taken, self.finished = itertools.count(), itertools.count(1)
        self.errors = []  # raised by a chunk: the rest are skipped, the first is the caller's
        self.all_finished = threading.Lock()
        self.all_finished.acquire()  # released by whoever finishes the last chunk

    def work(self):
        while (chunk := next(self.taken)) < self.n_chunks:
            if not self.errors:
                start = chunk * self.size
                try:
                    self.function(start, min(start + self.size, self.n_items))
                except BaseException as error:  # handed to the calling thread
                    self.errors.append(error)
            if next(self.finished) == self.n_chunks:
                self.all_finished.release()

    def wait(self):
        """Until every chunk is finished (the calling thread has taken all that were left)."""
        self.all_finished.acquire()
        if self.errors:
            raise self.errors[0]


_jobs = queue.SimpleQueue()  # Chunks for the helpers
_helpers = []  # the helper threads started (some may have left)


def helper():
    while True:
        try:
            chunks = _jobs.get(timeout=IDLE_S)
        except queue.Empty:
            return
        chunks.work()


def hand_out(chunks, n_helpers):
    """Put `chunks` before up to n_helpers helpers, starting those that are missing, as far as
    threads can start here: none while the interpreter shuts down (a thread started then never
    runs), and none once the OS refuses one."""
    global _helpers
    _helpers = [thread for thread in _helpers if thread.is_alive()]
    if sys.is_finalizing():
        return
    for _ in range(n_helpers - len(_helpers)):
        thread = threading.Thread(target=helper, name="picogpt", daemon=True)
        try:
            thread.start()
        except RuntimeError:  # "can't start new thread": the helpers there are (or the caller alone) do the work
            break
        _helpers.append(thread)
    for _ in range(min(n_helpers, len(_helpers))):
        _jobs.put(chunks)


def parallel(function, n_items, chunks_per_thread=CHUNKS_PER_THREAD):
    """Call function(start, stop) on consecutive chunks of range(n_items), on all threads.

    The calling thread works too, and chunks go to whichever thread is free, so on a busy
    machine, where a helper thread may wait milliseconds for a core, the caller does not wait
    for it: it takes the helper's share and only waits for chunks already being worked on."""
    if n_items <= 0:
        return
    n_helpers = min(n_threads(), n_items) - 1
    chunks = Chunks(function, n_items, (n_helpers + 1) * chunks_per_thread)
    hand_out(chunks, n_helpers)
    chunks.work()
    chunks.wait()


def bands(n, n_parts):
    """[(start, stop)] cutting range(n) into n_parts contiguous bands."""
    edges = [n * i // n_parts for i in range(n_parts + 1)]
    return list(zip(edges[:-1], edges[1:]))
