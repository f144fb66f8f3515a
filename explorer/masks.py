"""``np.where`` over a mask that a call's rows share: the one helper the engine's shortcuts use."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np


def where_uniform(mask, a: Callable[[], np.ndarray], b: Callable[[], np.ndarray], all_: bool | None = None,
                  any_: bool | None = None, shape: tuple | None = None) -> np.ndarray:
    """``np.where(mask, a(), b())``'s values, computing only ``a()`` where every element of ``mask``
    holds (only ``b()`` where none does): ``np.where`` then returns that branch's values as they are.
    Taken only where the branch already has the result's shape (``shape``, default the broadcast of
    ``mask`` and the branch) and is not 0-d; otherwise ``np.where`` itself, with both branches.
    ``all_`` / ``any_``: ``mask.all()`` / ``mask.any()`` where the caller has them (once per call).
    Assumes the branches share a dtype (``np.where`` would promote)."""
    mask = np.asarray(mask)
    every = bool(mask.all()) if all_ is None else all_
    some = bool(mask.any()) if any_ is None else any_
    if every or not some:
        x = a() if every else b()
        want = np.broadcast_shapes(mask.shape, np.shape(x)) if shape is None else shape
        if want and np.shape(x) == want:
            return x
        return np.where(mask, x, b()) if every else np.where(mask, a(), x)
    return np.where(mask, a(), b())
