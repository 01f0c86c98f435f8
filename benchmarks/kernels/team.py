"""Helper threads that stay ready for the length of one model call (numba; imported only when
numba is installed, by fast/compiled.py).

A decode is a few hundred products of a few hundred microseconds each, with a little NumPy
work between them. threads.parallel's helpers sleep between products, and a sleeping thread
starts tens of microseconds after it is asked (on a virtual machine, a halted virtual core must
be woken by the host): a large share of a small product, so small products ran on one core.
A team instead keeps its helpers in compiled code for the whole model call, waiting on a word
of memory, so they start a product within a microsecond of the calling thread:

    the calling thread                          each helper (from call start to call end)
    write the product's arrays to the board     watch the board's NEXT word
    publish the job in NEXT                     -> take a band (atomic add on NEXT), compute it,
    take bands too, until none is left             count it done (atomic add on DONE)
    wait until DONE = the job's bands

NEXT packs the job's number, its band count and the next band to take into one 64-bit word, so
one atomic add hands out a band of exactly one job: a helper that arrives late takes nothing,
and touches no array of a job that has ended. Between calls the helpers leave (a busy machine
is not robbed between calls), and while waiting they give their core away (sched_yield) every
few dozen polls. Still, on a machine whose cores are all busy a waiting helper competes with the
calling thread, so the team times each call's products: when the calling thread had the CPU for
less than BUSY_SHARE of their time, the next calls for COOL_DOWN_S run with threads.parallel.
"""

import platform
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.core.extending import intrinsic

from picogpt.fast.compiled import band_product, head_product

BUSY_SHARE = 0.8  # the calling thread ran less than this share of a call: the machine is busy
COOL_DOWN_S = 1.0  # then calls run with threads.parallel for this long, before trying again
POLLS_PER_YIELD = 64  # a waiting thread gives its core away (sched_yield) once per this many polls
X86 = platform.machine().lower() in ("x86_64", "amd64", "i386", "i686")

# The board: int64 words shared by the calling thread and the helpers.
NEXT, DONE, STOP, ACTIVE, KIND, X_ADDRESS, W_ADDRESS, OUT_ADDRESS, N_ROWS, N_IN, N_OUT, LEAD = range(12)
BOARD_WORDS = 16  # 128 bytes: two cache lines of their own
ROWS, HEAD = 0, 1  # what a job computes: band_product's partial sums, or head_product's columns
JOB_SHIFT, BANDS_SHIFT, FIELD = 40, 20, (1 << 20) - 1  # NEXT = job << 40 | n_bands << 20 | next band


# ---- atomics, written as LLVM instructions (numba has none of its own) -------------------------

def word_pointer(context, builder, signature, args):
    """A pointer to board[index], from the (array, index) arguments of an intrinsic."""
    array_type = signature.args[0]
    array = context.make_array(array_type)(context, builder, args[0])
    return cgutils.get_item_pointer(context, builder, array_type, array, [args[1]])


@intrinsic
def load(typingctx, board, index):
    """board[index], read atomically with acquire order (later reads are not moved before it)."""
    def codegen(context, builder, signature, args):
        return builder.load_atomic(word_pointer(context, builder, signature, args), "acquire", 8)
    return types.int64(board, types.intp), codegen


@intrinsic
def store(typingctx, board, index, value):
    """board[index] = value atomically with release order (earlier writes are seen before it)."""
    def codegen(context, builder, signature, args):
        builder.store_atomic(args[2], word_pointer(context, builder, signature, args), "release", 8)
        return context.get_dummy_value()
    return types.void(board, types.intp, types.int64), codegen


@intrinsic
def fetch_add(typingctx, board, index, value):
    """board[index] += value atomically; returns the value before."""
    def codegen(context, builder, signature, args):
        return builder.atomic_rmw("add", word_pointer(context, builder, signature, args), args[2], "seq_cst")
    return types.int64(board, types.intp, types.int64), codegen


@intrinsic
def spin_pause(typingctx):
    """x86's PAUSE: a polling loop that tells the core it is one (no-op elsewhere)."""
    def codegen(context, builder, signature, args):
        if X86:
            pause = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.VoidType(), []),
                                                   "llvm.x86.sse2.pause")
            builder.call(pause, [])
        return context.get_dummy_value()
    return types.void(), codegen


@intrinsic
def float_pointer(typingctx, address):
    """An int64 address as a float32 pointer, for numba.carray."""
    def codegen(context, builder, signature, args):
        return builder.inttoptr(args[0], ir.PointerType(ir.FloatType()))
    return types.CPointer(types.float32)(types.int64), codegen


@intrinsic
def sched_yield(typingctx):
    """POSIX sched_yield(): let another thread that is ready to run have this core."""
    def codegen(context, builder, signature, args):
        function = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.IntType(32), []),
                                                  "sched_yield")
        builder.call(function, [])
        return context.get_dummy_value()
    return types.void(), codegen


# ---- the compiled side -------------------------------------------------------------------------

jit = dict(nogil=True, cache=True, boundscheck=False)
band = numba.njit(**jit, fastmath={"contract"})(band_product)
head = numba.njit(**jit, fastmath={"contract", "reassoc"})(head_product)


@numba.njit(**jit)
def wait_a_little(polls):
    """One poll of a waiting loop: PAUSE, and every POLLS_PER_YIELD polls sched_yield."""
    if polls % POLLS_PER_YIELD == POLLS_PER_YIELD - 1:
        sched_yield()
    else:
        spin_pause()


@numba.njit(**jit)
def compute_band(board, k, n_bands):
    """Band k of n_bands of the job on the board: for ROWS, the partial sum over W's input rows
    [8*(n_in//8)*k//n_bands, ...) into its own [n_rows, n_out] slice of OUT; for HEAD, columns
    [n_out*k//n_bands, ...) of OUT."""
    n_rows, n_in, n_out, lead = board[N_ROWS], board[N_IN], board[N_OUT], board[LEAD]
    x = numba.carray(float_pointer(board[X_ADDRESS]), (n_rows, n_in))
    if board[KIND] == ROWS:
        W = numba.carray(float_pointer(board[W_ADDRESS]), (n_in, n_out))
        partial = numba.carray(float_pointer(board[OUT_ADDRESS] + 4 * k * n_rows * n_out), (n_rows, n_out))
        start = 8 * ((n_in // 8) * k // n_bands)
        stop = n_in if k == n_bands - 1 else 8 * ((n_in // 8) * (k + 1) // n_bands)
        partial[:, :] = 0
        band(x, W, partial, start, stop, lead)
    else:
        E = numba.carray(float_pointer(board[W_ADDRESS]), (n_out, n_in))
        out = numba.carray(float_pointer(board[OUT_ADDRESS]), (n_rows, n_out))
        head(x, E, out, n_out * k // n_bands, n_out * (k + 1) // n_bands, lead)


@numba.njit(**jit)
def take_bands(board):
    """Compute bands of the published job until none is left to take."""
    while True:
        word = load(board, NEXT)
        if (word & FIELD) >= ((word >> BANDS_SHIFT) & FIELD):
            return
        taken = fetch_add(board, NEXT, 1)  # this band, of this job, is ours alone
        k, n_bands = taken & FIELD, (taken >> BANDS_SHIFT) & FIELD
        if k >= n_bands:
            return
        compute_band(board, k, n_bands)
        fetch_add(board, DONE, 1)


@numba.njit(**jit)
def helper(board):
    """A helper's whole stay: take bands of every job published until the call ends (STOP)."""
    polls = 0
    while load(board, STOP) == 0:
        word = load(board, NEXT)
        if (word & FIELD) < ((word >> BANDS_SHIFT) & FIELD):
            take_bands(board)
        else:
            polls += 1
            wait_a_little(polls)
    fetch_add(board, ACTIVE, -1)


@numba.njit(**jit)
def run_job(board, kind, x, weights, out, n_bands):
    """Publish a job (x and out float32 C-contiguous, weights W or E), take bands of it, and
    return once every band is done: the calling thread's side."""
    board[KIND], board[X_ADDRESS] = kind, x.ctypes.data
    board[W_ADDRESS], board[OUT_ADDRESS] = weights.ctypes.data, out.ctypes.data
    board[N_ROWS], board[N_IN], board[LEAD] = x.shape[0], x.shape[1], lead(weights)
    board[N_OUT] = weights.shape[1] if kind == ROWS else weights.shape[0]
    store(board, DONE, 0)
    job = (load(board, NEXT) >> JOB_SHIFT) + 1
    store(board, NEXT, (job << JOB_SHIFT) | (n_bands << BANDS_SHIFT))
    take_bands(board)
    polls = 0
    while load(board, DONE) < n_bands:  # helpers finishing the bands they took
        polls += 1
        wait_a_little(polls)


@numba.njit(**jit)
def lead(array):
    """kernels.lead: columns before the first 32-byte boundary of the array's rows."""
    return (-array.ctypes.data % 32) // array.itemsize


@numba.njit(**jit)
def empty_aligned_with(n_0, n_1, n_2, array):
    """kernels.empty_aligned_with: float32 [n_0, n_1, n_2] at array's offset from 32 bytes."""
    n = n_0 * n_1 * n_2
    buffer = np.empty(n + 8, np.float32)
    skip = ((array.ctypes.data - buffer.ctypes.data) % 32) // 4
    return buffer[skip:skip + n].reshape((n_0, n_1, n_2))


@numba.njit(**jit)
def rows_product(board, x, W, n_bands):
    """x @ W on the team: x [n_rows, n_in] C-contiguous, W [n_in, n_out] the checkpoint's
    layout; a partial sum per band of W's input rows, added here. -> [n_rows, n_out]."""
    partial = empty_aligned_with(n_bands, x.shape[0], W.shape[1], W)  # [n_bands, n_rows, n_out]
    run_job(board, ROWS, x, W, partial, n_bands)
    out = partial[0]
    for k in range(1, n_bands):
        out += partial[k]
    return out


@numba.njit(**jit)
def head_product_on(board, x, E, n_bands):
    """x @ E.T on the team, E = wte [n_vocab, n_embd]: bands of E's rows, each its own columns
    of the result; x copied to cross 32-byte boundaries where E's rows do. -> [n_rows, n_vocab]."""
    x_aligned = empty_aligned_with(1, x.shape[0], x.shape[1], E)[0]
    x_aligned[:, :] = x
    out = np.empty((x.shape[0], E.shape[0]), np.float32)
    run_job(board, HEAD, x_aligned, E, out, n_bands)
    return out


@numba.njit(**jit)
def set_word(board, index, value):
    store(board, index, value)


@numba.njit(**jit)
def add_to_word(board, index, value):
    return fetch_add(board, index, value)


def example_calls():
    """(function, arguments) that compile every specialisation the team runs, on tiny arrays."""
    board = np.zeros(BOARD_WORDS, np.int64)
    x = np.zeros((1, 8), np.float32)
    calls = [(set_word, (board, STOP, 1)), (add_to_word, (board, ACTIVE, 1)), (helper, (board,))]
    for writable in (True, False):
        W = np.zeros((8, 8), np.float32)
        W.flags.writeable = writable
        calls += [(rows_product, (board, x, W, 1)), (head_product_on, (board, x, W, 1))]
    return calls


# ---- the Python side ---------------------------------------------------------------------------

class Team:
    """n_helpers helper threads ready inside one model call at a time (kernels.call), for its
    products (`rows`, `head`)."""

    def __init__(self, n_helpers):
        self.n_helpers = n_helpers
        self.wall_s = self.cpu_s = 0.0  # the serving call's products: wall time, the calling thread's CPU time
        self.board = np.zeros(BOARD_WORDS, np.int64)
        self.pool = ThreadPoolExecutor(max_workers=n_helpers, thread_name_prefix="picogpt-team")
        self.lock = threading.Lock()
        self.owner = None  # the thread whose call the team serves now
        self.cool_until = 0.0  # time.monotonic() before which calls do without the team

    def serving(self):
        """Whether the calling thread's model call has the team now."""
        return self.owner == threading.get_ident()

    def start(self):
        """Make the team ready for this thread's call; False (and nothing done) if another thread
        has it, or the machine was found busy less than COOL_DOWN_S ago."""
        if time.monotonic() < self.cool_until or not self.lock.acquire(blocking=False):
            return False
        self.owner = threading.get_ident()
        self.wall_s = self.cpu_s = 0.0
        set_word(self.board, STOP, 0)
        for _ in range(self.n_helpers - int(self.board[ACTIVE])):  # helpers still here stay
            add_to_word(self.board, ACTIVE, 1)
            self.pool.submit(helper, self.board)
        return True

    def stop(self):
        """End the call: the helpers leave without being waited for. If the calling thread had
        the CPU for less than BUSY_SHARE of the time its products took (it never sleeps in one:
        it computes, polls or yields), other programs want these cores: the team rests."""
        set_word(self.board, STOP, 1)
        if self.cpu_s < BUSY_SHARE * self.wall_s:
            self.cool_until = time.monotonic() + COOL_DOWN_S
        self.owner = None
        self.lock.release()

    def rows(self, x, W, n_bands):
        """x @ W (rows_product) for the call this team serves."""
        return self.timed(rows_product, x, W, n_bands)

    def head(self, x, E, n_bands):
        """x @ E.T (head_product_on) for the call this team serves."""
        return self.timed(head_product_on, x, E, n_bands)

    def timed(self, product, *arguments):
        """product(board, *arguments), its wall time and the calling thread's CPU time counted
        for `stop`'s judgement of the call."""
        wall, cpu = time.perf_counter(), time.thread_time()
        out = product(self.board, *arguments)
        self.wall_s += time.perf_counter() - wall
        self.cpu_s += time.thread_time() - cpu
        return out
