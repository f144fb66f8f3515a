"""Hardware columns gathered per design point (one kind per call) and the GEMM runner that costs a
step's GEMMs in one stacked call -- the compiled kernel or numpy's :func:`explorer.costs.gemm.gemm_cost`
-- carrying costs between the closed-loop passes where their inputs did not move."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from explorer.costs.gemm import GemmCost, gemm_cost, gemm_cost_stacked, use_fast_path
from explorer.engine.constants import EMBED_BYTES, MOE_SMALL_TILE_M
from explorer.hardware import HardwareTable
from explorer.precision import TENSOR_FORMATS


def reuse_enabled() -> bool:
    """Whether repeated sub-problems are costed once (``EXPLORER_REUSE`` not ``0``): GEMM costs carried
    between the closed-loop passes.  Results are the same either way (tests/test_speed_paths.py)."""
    import os

    return os.environ.get("EXPLORER_REUSE", "1") != "0"


def format_support_masks(kinds: Sequence) -> np.ndarray:
    """Per hardware kind, the bit mask (bit i = ``TENSOR_FORMATS[i]``) of the tensor formats it runs."""
    return np.array([sum(1 << i for i, f in enumerate(TENSOR_FORMATS) if h.supports(f)) for h in kinds],
                    dtype=np.int64)



class _KindFigures:
    """A hardware table's per-kind arrays that HardwareColumns gathers rows of: the table's columns,
    its peak matrix, the tile lists and the format masks -- functions of the table alone (its kinds
    are frozen), built once per table instead of once per simulate call (the random mix scores 17
    kinds one at a time: each call rebuilt every kind's).  The arrays are read-only: HardwareColumns
    only gathers from them (fresh arrays, the values the per-call build gave)."""

    def __init__(self, table: HardwareTable):
        kinds = table.kinds
        self.table = table  # (kept: the cache's key is its id)
        self._columns: dict[str, np.ndarray] = {}
        self.peaks = _frozen(table.peak_matrix())  # [kinds, formats]
        self.bf16_peak = _frozen(np.nanmax(self.peaks[:, :2], axis=1))
        n_t = max(len(h.gemm_tiles) for h in kinds)
        tm = np.array([[h.gemm_tiles[min(j, len(h.gemm_tiles) - 1)][0] for j in range(n_t)] for h in kinds], float)
        tn = np.array([[h.gemm_tiles[min(j, len(h.gemm_tiles) - 1)][1] for j in range(n_t)] for h in kinds], float)
        # grouped expert GEMMs may also take token tiles of MOE_SMALL_TILE_M rows (small groups)
        small = np.full((len(kinds), 1), MOE_SMALL_TILE_M)
        self.kind_tiles = {False: (_frozen(tm), _frozen(tn)),
                           True: (_frozen(np.concatenate([tm, small], axis=1)),
                                  _frozen(np.concatenate([tn, tn.min(axis=1, keepdims=True)], axis=1)))}
        self.support_masks = _frozen(format_support_masks(kinds))

    def column(self, attr: str) -> np.ndarray:
        if attr not in self._columns:
            self._columns[attr] = _frozen(self.table.column(attr))
        return self._columns[attr]


def _frozen(a: np.ndarray) -> np.ndarray:
    a.setflags(write=False)
    return a


#: id(table) -> its _KindFigures (a few tables at most: the oldest is dropped past _KIND_CACHE_SIZE)
_KIND_CACHE: dict[int, _KindFigures] = {}
_KIND_CACHE_SIZE = 8


def kind_figures(table: HardwareTable) -> _KindFigures:
    """The table's :class:`_KindFigures` (the entry holds the table: its id is not reused meanwhile)."""
    got = _KIND_CACHE.get(id(table))
    if got is None or got.table is not table:
        got = _KindFigures(table)
        if len(_KIND_CACHE) >= _KIND_CACHE_SIZE:
            del _KIND_CACHE[next(iter(_KIND_CACHE))]
        _KIND_CACHE[id(table)] = got
    return got


#: The fields of a GEMM request that come from the shape and hardware columns (N K b_a b_w b_out peak):
#: the same objects in every closed-loop pass; M and the expert groups move.
_STATIC_FIELDS = (1, 2, 3, 4, 5, 7)


def _same_source(a: Any, b: Any) -> bool:
    """Whether a stacked buffer filled from ``a`` already holds ``b``'s values: the same array object
    (the shape's and hardware's columns, unchanged during a call) or equal plain numbers."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return a is b
    return type(a) is type(b) and a == b


class HardwareColumns:
    """Hardware columns gathered per design point."""

    def __init__(self, table: HardwareTable, idx: np.ndarray, compute_fmt: np.ndarray, act_fmt_cap: np.ndarray):
        kinds = table.kinds
        n = len(idx)
        self.one_kind = bool(n) and bool((idx == idx[0]).all())  # one tile list: the compiled GEMMs
        k0 = int(idx[0]) if n else 0
        # rows ``idx`` of a per-kind array; one kind's rows (every call of simulate) are its row
        # repeated -- the values, dtype and layout the gather gives, without gathering
        rows = (lambda a: np.repeat(a[k0:k0 + 1], n, axis=0)) if self.one_kind else (lambda a: a[idx])

        fig = kind_figures(table)

        def g(attr: str) -> np.ndarray:
            return rows(fig.column(attr))
        self.hbm_bw = g("hbm_bw")
        self.hbm_bytes = g("hbm_bytes")
        self.sms = g("sms")
        self.max_split_k = g("max_split_k")
        self.usable = g("usable_fraction")
        self.reserved = g("reserved_bytes")
        self.up_bw, self.up_lat = g("scaleup_bw"), g("scaleup_latency_s")
        self.out_bw, self.out_lat = g("scaleout_bw"), g("scaleout_latency_s")
        self.domain = g("scaleup_domain")
        self.launch = g("kernel_launch_s")
        self.step_overhead = g("step_overhead_s")
        self.eta_c, self.eta_m, self.eta_n = g("eta_compute"), g("eta_memory"), g("eta_network")
        self.eta_moe = g("eta_moe")
        self.eta_dequant = g("eta_dequant")
        self.moe_group = g("moe_group_s")
        self.w_only = np.zeros(len(idx), dtype=bool)  # set by simulate() from the design
        self.kind = kinds[k0]  # one kind per call (see simulate)
        self.per_seq = g("per_sequence_s")
        peaks = fig.peaks  # [kinds, formats]
        if self.one_kind:  # (peaks[idx, f] is the kind's row at f)
            self.peak = peaks[k0][compute_fmt.astype(np.int64)]
            self.peak_attn = peaks[k0][act_fmt_cap.astype(np.int64)]
        else:
            self.peak = peaks[idx, compute_fmt.astype(np.int64)]
            self.peak_attn = peaks[idx, act_fmt_cap.astype(np.int64)]
        self.bf16_peak = rows(fig.bf16_peak)
        #: per kind (rows of ``kinds``), the tile lists of the plain (False) and the grouped expert
        #: GEMMs (True), as ``(tiles_m, tiles_n)``: :meth:`tiles` takes the points' rows of them
        self._kind_tiles = fig.kind_tiles
        self._rows, self._k0 = rows, k0
        self._tiles: dict[bool, tuple[np.ndarray, np.ndarray]] = {}
        self.support_mask = rows(fig.support_masks)
        #: (call site, grouped) -> inputs and cost planes of the last run_gemms call from there
        self.memo: dict[tuple, dict] = {}

    def tiles(self, moe: bool) -> tuple[np.ndarray, np.ndarray]:
        """``(tiles_m, tiles_n)``, ``(points, tile shapes)``: each point's kind's tile list (``moe``:
        the grouped expert GEMMs'), taken on first use -- numpy's gemm_cost needs them; the compiled
        kernel takes the one kind's list alone (:meth:`kind_tile_list`), so a call that runs it never
        fills these (two (points x tiles) arrays of the same row each)."""
        if moe not in self._tiles:
            self._tiles[moe] = (self._rows(self._kind_tiles[moe][0]), self._rows(self._kind_tiles[moe][1]))
        return self._tiles[moe]

    tiles_m = property(lambda self: self.tiles(False)[0])
    tiles_n = property(lambda self: self.tiles(False)[1])
    moe_tiles_m = property(lambda self: self.tiles(True)[0])
    moe_tiles_n = property(lambda self: self.tiles(True)[1])

    def kind_tile_list(self, moe: bool) -> tuple[list, list]:
        """The one kind's tile list (``moe``: the grouped expert GEMMs'), as ``list(tiles_m[0])``,
        ``list(tiles_n[0])`` give it (the same numbers: row 0 of :meth:`tiles` is the kind's row)."""
        tm, tn = self._kind_tiles[moe]
        return list(tm[self._k0]), list(tn[self._k0])

    def run_gemms(self, requests: list[tuple], site: str | None = None) -> list[GemmCost]:
        """Cost many GEMMs in one vectorized call: each request is
        ``(M, N, K, b_a, b_w, b_out, groups, peak or None, moe)`` over the design points; they are
        stacked on a leading axis (requests whose rows are all empty are skipped and cost zero).

        ``site`` names the call site (e.g. the engine's step plans): a later call from the same site
        reuses, element by element, the costs of the previous call's GEMM at the same stacked
        position and point whose inputs are all equal (the closed-loop passes re-cost GEMMs whose
        padded batch did not move).  A GEMM's cost is a function of those inputs and this object's
        hardware columns only, so the reused figures are the ones a recomputation gives
        (``EXPLORER_REUSE=0`` turns it off).  The costs a call from a site returns are updated in
        place by that site's next call: use them before it (or call with ``site=None``)."""
        n = len(self.sms)
        out: list[GemmCost | None] = [None] * len(requests)
        # a request runs a kernel where some point has tokens (and expert groups); requests sharing
        # their M and groups (the step's dense GEMMs take the same token column) are tested once
        tested: dict[tuple, bool] = {}
        live = []
        for i, r in enumerate(requests):
            key = (id(r[0]), id(r[6]))  # (both objects are held by ``requests`` until the call ends)
            if key not in tested:
                tested[key] = bool((np.asarray(r[0]) > 0).any() if not isinstance(r[6], np.ndarray) and r[6] > 0
                                   else ((np.asarray(r[0]) > 0) & (np.asarray(r[6]) > 0)).any())
            if tested[key]:
                live.append(i)
        if len(live) < len(requests):  # no kernel: costs nothing (the same zero and one columns for all)
            zero = np.zeros(n)
            none = GemmCost(zero, zero, zero, zero, zero, zero + 1.0, zero + 1.0, zero, zero)
            for i in set(range(len(requests))) - set(live):
                out[i] = none
        memo = self.memo if site is not None and reuse_enabled() else None
        for moe in (False, True):
            sel = [i for i in live if bool(requests[i][8]) == moe]
            if not sel:
                continue
            slot = memo.setdefault((site, moe), {}) if memo is not None else None
            src = [[requests[i][j] for j in range(7)] + [self.peak if requests[i][7] is None else requests[i][7]]
                   for i in sel]
            fast = self.one_kind and use_fast_path(n)  # the compiled kernel of the same formulas (explorer/costs/gemm.py)
            # the previous call from the site had the same N K b_a b_w b_out peak -- the shape's and the
            # hardware's columns, which every closed-loop pass after the first passes again -- so only M
            # and the groups can have moved, and what depends on the others alone is kept
            prev_src = slot.get("src") if slot is not None else None
            static = prev_src is not None and len(prev_src) == len(src) and all(map(
                _same_source, [p[j] for p in prev_src for j in _STATIC_FIELDS], [q[j] for q in src for j in _STATIC_FIELDS]))
            cols: Any  # (8, R, n) inputs M N K b_a b_w b_out groups peak, or a sequence of those 8 planes
            keep = None  # (the compiled path's memo: the buffer it keeps as this call's inputs)
            if fast and slot is not None:
                cols, keep = self._stack_alternating(slot, src, static, n)
            else:
                cols = slot.pop("spare", None) if slot is not None else None  # the buffer of two calls ago
                held = slot.pop("spare_src", None) if slot is not None else None  # the sources that buffer holds
                if cols is None or cols.shape != (8, len(sel), n):
                    cols, held = np.empty((8, len(sel), n)), None  # M N K b_a b_w b_out groups peak
                for row in range(len(sel)):
                    for j in range(8):
                        if held is None or not _same_source(held[row][j], src[row][j]):
                            cols[j, row] = src[row][j]  # (else the buffer already holds this very column)
            # the grouped-GEMM factor slows expert *compute* only: expert weights stream from HBM at
            # the same achievable bandwidth as any other weight (it used to divide reads too, which
            # tripled the memory-bound expert time of small-batch MoE decode)
            # weight-only formats dequantize in the kernel: their compute runs at eta_dequant of the
            # plain GEMM's (the bf16 router and LM head are never weight-only)
            if static:
                assert slot is not None
                eta_c = slot["eta_c"]
            else:
                deq = np.where(self.w_only & (cols[4] != EMBED_BYTES), self.eta_dequant, 1.0) \
                    if self.w_only.any() else 1.0
                eta_c = np.broadcast_to(self.eta_c * (self.eta_moe if moe else 1.0) * deq, (len(sel), n))
            spare = slot.get("cols") if slot is not None else None
            planes: Any  # (9, R, n) cost planes, or the kernel's per-field sequence of them
            if fast:
                kind_m, kind_n = self.kind_tile_list(moe)
                planes = gemm_cost_stacked(
                    cols, eta_c, hbm_bw=self.hbm_bw, sms=self.sms, tiles_m=kind_m, tiles_n=kind_n,
                    max_split_k=self.max_split_k, eta_m=self.eta_m, launch_s=0.0, latency_s=self.kind.served_gemm_latency_s,
                    epilogue_exposed=self.kind.gemm_epilogue_exposed, memo=slot, static=static, keep=keep)
            else:
                planes = self._gemms_numpy(cols, eta_c, *self.tiles(moe), slot, static)
            if slot is not None:  # the previous inputs (and their sources): the next call's buffer
                if spare is not None and not fast:
                    slot["spare"], slot["spare_src"] = spare, prev_src
                slot["src"], slot["eta_c"] = src, eta_c
            # each request's figures: row ``row`` of every plane (views; ``planes[:, row]`` iterated
            # gives the same ones as ``plane[row]`` for each plane, in C)
            by_row = planes.swapaxes(0, 1) if isinstance(planes, np.ndarray) else None
            for row, i in enumerate(sel):
                out[i] = GemmCost(*(by_row[row] if by_row is not None else (plane[row] for plane in planes)))
        return [o for o in out if o is not None]

    @staticmethod
    def _stack_alternating(slot: dict, src: list[list], static: bool, n: int) -> tuple[tuple, np.ndarray]:
        """The compiled kernel's inputs for run_gemms' call from a site (``slot``: its memo): the 8
        planes of ``src`` and the ``(8, R, n)`` buffer the kernel's memo keeps as this call's inputs.

        A call whose N K b_a b_w b_out peak are the previous call's (``static``) writes only its M and
        groups, into the buffer that does not hold the previous call's (which the kernel compares them
        with): ``home`` (filled whole by the site's last other call) and ``alt`` by turns, the other
        planes read from ``home`` -- the very values a full restack wrote there, without restacking
        them (a plane row whose source is the one the buffer already holds is not rewritten either).
        ``alt``'s other planes are never filled, so the memo keeps it only for a static call: any
        other starts from a fresh ``home``, filled whole, and costs every element (no earlier inputs
        to compare with -- the kernel's figures are those of a recomputation anyway)."""
        R = len(src)
        home = slot.get("home")
        if not static or home is None or home.shape != (8, R, n) or slot.get("cols") is None:
            home = np.empty((8, R, n))  # M N K b_a b_w b_out groups peak
            for row in range(R):
                for j in range(8):
                    home[j, row] = src[row][j]
            slot.pop("cols", None)  # (no full inputs of an earlier call: every element costed)
            slot.pop("alt", None)
            slot["home"], slot["home_mg"] = home, [(q[0], q[6]) for q in src]
            return tuple(home), home
        into = "alt" if slot["cols"] is home else "home"  # the buffer not holding the previous M, groups
        target = slot.get(into)
        held = slot.get(into + "_mg")
        if target is None:
            target, held = np.empty((8, R, n)), None  # (planes 1-5 and 7 unused: home's are read)
            slot[into] = target
        for row in range(R):
            for j in (0, 6):
                if held is None or not _same_source(held[row][j // 6], src[row][j]):
                    target[j, row] = src[row][j]
        slot[into + "_mg"] = [(q[0], q[6]) for q in src]
        return (target[0], home[1], home[2], home[3], home[4], home[5], target[6], home[7]), target

    def _gemms_numpy(self, cols: np.ndarray, eta_c: np.ndarray, tiles_m: np.ndarray, tiles_n: np.ndarray,
                     slot: dict | None, static: bool = False) -> Sequence[np.ndarray]:
        """numpy's :func:`gemm_cost` (the reference) over stacked requests ``cols`` ``(8, R, n)``: the
        ``(R, n)`` planes of :class:`GemmCost`, field by field.  With ``slot`` (run_gemms' memo of the previous
        call from the same site), only the elements whose inputs moved are costed, into the previous
        call's planes in place (gemm_cost is element-wise, so the others keep the figures it gave
        them)."""
        R, n = cols.shape[1], cols.shape[2]
        prev = slot.get("cols") if slot is not None else None
        todo = None
        if slot is not None and prev is not None and prev.shape == cols.shape:
            # (static: only M and the groups can differ from the previous call, as for the kernel)
            same = cols[0] == prev[0]
            same &= cols[6] == prev[6]
            if not static:
                same &= eta_c == slot["eta_c"]
                for j in (1, 2, 3, 4, 5, 7):
                    same &= cols[j] == prev[j]
            if same.any():
                planes = slot["planes"]  # the previous call's, updated in place
                todo = np.flatnonzero(~same.ravel())
        if todo is None:
            g = gemm_cost(cols[0], cols[1], cols[2], cols[3], cols[4], cols[5],
                          peak_flops=cols[7], hbm_bw=self.hbm_bw, sms=self.sms, tiles_m=tiles_m, tiles_n=tiles_n,
                          max_split_k=self.max_split_k, eta_c=eta_c, eta_m=self.eta_m, launch_s=0.0,
                          groups=cols[6], latency_s=self.kind.served_gemm_latency_s,
                          epilogue_exposed=self.kind.gemm_epilogue_exposed)
            fields = [np.broadcast_to(getattr(g, k), (R, n)) for k in GemmCost.__dataclass_fields__]
            if slot is None:
                return fields
            planes = np.empty((9, R, n))  # kept for the next call from the site
            for f, a in enumerate(fields):
                planes[f] = a
        elif todo.size:
            pt = todo % n  # the design point of each stacked element
            sub = cols.reshape(8, -1)[:, todo]
            g = gemm_cost(sub[0], sub[1], sub[2], sub[3], sub[4], sub[5],
                          peak_flops=sub[7], hbm_bw=self.hbm_bw[pt], sms=self.sms[pt], tiles_m=tiles_m[pt],
                          tiles_n=tiles_n[pt], max_split_k=self.max_split_k[pt], eta_c=eta_c.ravel()[todo],
                          eta_m=self.eta_m[pt], launch_s=0.0, groups=sub[6], latency_s=self.kind.served_gemm_latency_s,
                          epilogue_exposed=self.kind.gemm_epilogue_exposed)
            flat = planes.reshape(9, -1)
            for f, k in enumerate(GemmCost.__dataclass_fields__):
                flat[f, todo] = getattr(g, k)
        if slot is not None:
            slot["cols"], slot["eta_c"], slot["planes"] = cols, eta_c, planes
        return planes
