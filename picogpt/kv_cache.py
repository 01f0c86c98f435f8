"""The KV cache: the keys and values of every position the model has already seen.

Decoding token t needs the keys and values of tokens 0..t-1 in every layer. Recomputing them
is what makes naive decoding quadratic; keeping them is the cache. Speculative sampling also
needs to *forget*: when a drafted token is rejected, both models roll back with `truncate`;
after a token tree's call (picogpt/tree.py), `keep` keeps the accepted branch and drops the rest.

Storage is one array per keys and values, [n_layer, n_head, capacity, head_dim], grown by
doubling, so appending a token copies only that token (plus an occasional doubling), never the
whole cache.
"""

import numbers

import numpy as np

from .errors import PicoGPTError, shown


class KVCache:
    """The keys and values of one model. It remembers that model's shape (`model_shape`), and
    the model refuses a cache made for another: its keys would not fit, or fit and mean nothing."""

    def __init__(self, n_layer, n_head, head_dim, n_ctx, capacity=64):
        self.n_ctx = n_ctx
        self.model_shape = dict(n_layer=n_layer, n_head=n_head, head_dim=head_dim, n_ctx=n_ctx)
        capacity = min(capacity, n_ctx)
        self.k = np.empty((n_layer, n_head, capacity, head_dim), np.float32)
        self.v = np.empty_like(self.k)
        self.length = 0  # positions held

    def __len__(self):
        return self.length

    def __repr__(self):
        return f"KVCache(length={self.length}, capacity={self.k.shape[2]})"

    def reserve(self, n_new):
        """Make room for n_new more positions, doubling the capacity when it runs out."""
        needed = self.length + n_new
        capacity = self.k.shape[2]
        if needed <= capacity:
            return
        while capacity < needed:
            capacity *= 2
        # never past the context, except by the few extra branches of a token tree until `keep`
        capacity = min(max(capacity, needed), max(self.n_ctx, needed))
        for name in ("k", "v"):
            old = getattr(self, name)
            new = np.empty(old.shape[:2] + (capacity,) + old.shape[3:], np.float32)
            new[:, :, : self.length] = old[:, :, : self.length]
            setattr(self, name, new)

    def store(self, layer, k, v):
        """Write this call's keys/values [n_head, n_new, head_dim] after the held positions and
        return the keys/values of all positions so far [n_head, length + n_new, head_dim]."""
        start, stop = self.length, self.length + k.shape[1]
        self.k[layer, :, start:stop] = k
        self.v[layer, :, start:stop] = v
        return self.k[layer, :, :stop], self.v[layer, :, :stop]

    def advance(self, n_new):
        """Count the positions of a finished forward pass (called once, after the last layer)."""
        self.length += n_new

    def truncate(self, n):
        """Roll back to the first n positions (the rejected draft tokens are forgotten)."""
        if not isinstance(n, numbers.Integral) or isinstance(n, (bool, np.bool_)):
            raise PicoGPTError(f"cannot truncate a cache to {n!r} positions: expected a whole number "
                               f"0 <= n <= {self.length}")
        if not 0 <= n <= self.length:
            raise PicoGPTError(f"cannot truncate a cache of {self.length} positions to {n} "
                               f"(expected 0 <= n <= {self.length})")
        self.length = int(n)

    def keep(self, start, rows):
        """After a token tree's call: keep the first `start` positions and, after them, the tree's
        positions start + i for i in `rows` (one branch, root first, so increasing), moved into
        place; drop the rest. truncate(n) is keep(n, [])."""
        if not isinstance(start, numbers.Integral) or isinstance(start, (bool, np.bool_)) or not 0 <= start <= self.length:
            raise PicoGPTError(f"cannot keep a branch after position {shown(repr(start), 40)} of a cache of "
                               f"{self.length} positions: expected a whole number 0 <= start <= {self.length}")
        rows = branch_rows(rows, self.length - start)  # [len(branch)]
        stop = start + rows.size
        for name in ("k", "v"):  # [n_layer, n_head, capacity, head_dim]; the fancy index copies first
            array = getattr(self, name)
            array[:, :, start:stop] = array[:, :, start + rows]
        self.length = int(stop)


def branch_rows(rows, n_rows):
    """`rows` as int64 [len(branch)] if it is a list, tuple, range or 1-D integer array of
    increasing whole numbers from 0 to n_rows - 1 (True, 1.0, "1" and [1] are not rows); else
    one PicoGPTError, as truncate gives."""
    if isinstance(rows, np.ndarray):
        items = rows.tolist() if rows.ndim == 1 and np.issubdtype(rows.dtype, np.integer) else None
    else:
        items = list(rows) if isinstance(rows, (list, tuple, range)) else None
    if (items is None or not all(isinstance(row, numbers.Integral) and not isinstance(row, (bool, np.bool_))
                                 for row in items)
            or any(not 0 <= row < n_rows for row in items) or any(b <= a for a, b in zip(items, items[1:]))):
        raise PicoGPTError(f"cannot keep rows {shown(repr(rows), 80)}: expected increasing whole numbers from 0 "
                           f"to {n_rows - 1} (the branch's rows among the tree's {n_rows} positions)")
    return np.array(items, np.int64)
