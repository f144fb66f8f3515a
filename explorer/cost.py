"""Cost per token: energy efficiency (output tokens/s per kW) and price (USD per million output tokens).

A pure post-processing of the simulator's results: it reads ``tokens_per_s_per_gpu`` and the
hardware kind of each row and adds two columns; no other figure moves.

**Modelled** (per GPU of a replica, at the operating point the simulator predicts):

* facility power per GPU ``P_W = board_W * host_factor * pue``: the GPU's board power from its
  hardware file (``power.board_W``, the datasheet TDP/TGP: the GPU is assumed to draw its full board
  power whenever it serves), times :data:`HOST_POWER_FACTOR` for the rest of the server (CPUs,
  memory, NICs, NVLink switches, fans) and :data:`PUE` for the data-centre cooling and power
  distribution (power usage effectiveness);
* ``tokens_per_s_per_kw = tokens_per_s_per_gpu / (P_W / 1000)``;
* ``usd_per_million_tokens = usd_per_gpu_hour / 3600 / tokens_per_s_per_gpu * 1e6``, with the price
  per GPU-hour from the hardware file (``price.usd_per_gpu_hour``, a dated market-price assumption)
  unless the caller overrides it (space ``cost.usd_per_gpu_hour``, ``explorer evaluate
  --usd-per-gpu-hour``).

**Ignored**: power below TDP at low load (decode-bound GPUs often draw less: the kW figure is a
floor on efficiency), idle and queueing time (the GPU is busy at the predicted throughput), prompt
tokens as a separately priced item (their compute is inside the time per output token, so the price
is per million *output* tokens), the price of the host/network beyond what a GPU-hour price
includes, electricity as a separate cost (a rented GPU-hour includes it), and any discount for
commitment.  A hardware kind without a sourced price has NaN in ``usd_per_million_tokens`` unless
a price is given; a kind without board power has NaN in ``tokens_per_s_per_kw``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, MutableMapping

import numpy as np

from explorer.hardware import HardwareTable

#: Server power / GPU board power at full load: NVIDIA DGX H100 maximum system power 10.2 kW
#: (NVIDIA DGX H100/H200 user guide: six 3.3 kW PSUs, 10.2 kW maximum input; quoted at
#: https://unanswered.io/guide/nvidia-dgx-power-consumption-watts and
#: https://www.supercluster.blog/p/6-ai-supercluster-nvidia-dgx-h100) over its eight 700 W H100
#: boards (5.6 kW): 10.2 / 5.6 = 1.82.  Applied to every kind (assumption: other 8-GPU servers spend
#: the same share on CPUs, memory, NICs, switches and fans; GH200's board figure already holds its CPU).
HOST_POWER_FACTOR = 10.2 / (8 * 0.7)
#: Data-centre power usage effectiveness (total facility power / IT power).  Assumption: 1.3, what
#: Uptime Institute's 2024 Global Data Center Survey reports for new and larger facilities ("PUEs of
#: 1.3 or even better", https://cloudnews.tech/uptime-institute-highlights-decline-in-trust-in-ai-and-need-to-improve-sustainability-metrics-in-data-centers);
#: the industry average was 1.58 in 2023 (https://intelligence.uptimeinstitute.com/resource/large-data-centers-are-mostly-more-efficient-analysis-confirms).
PUE = 1.3
#: Facility watts per watt of GPU board power (the one factor the formulas use).
POWER_OVERHEAD_FACTOR = HOST_POWER_FACTOR * PUE
#: Seconds per hour (a price per GPU-hour -> per GPU-second).
S_PER_HOUR = 3600.0
#: Tokens in a million (the unit of the price column).
TOKENS_PER_MILLION = 1e6

#: The result columns this module adds, with the direction in which each is better.
COST_COLUMNS = {"tokens_per_s_per_kw": "maximize", "usd_per_million_tokens": "minimize"}


def tokens_per_s_per_kw(tokens_per_s_per_gpu, board_power_w, power_overhead_factor: float = POWER_OVERHEAD_FACTOR):
    """Output tokens/s per kW of facility power: ``tok/s/GPU / (board_W * factor / 1000)``.
    NaN where the board power is unknown (NaN) or not positive."""
    tps = np.asarray(tokens_per_s_per_gpu, dtype=np.float64)
    kw = np.asarray(board_power_w, dtype=np.float64) * float(power_overhead_factor) / 1000.0
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(kw > 0, tps / kw, np.nan)


def usd_per_million_tokens(tokens_per_s_per_gpu, usd_per_gpu_hour):
    """USD per million output tokens: ``price / 3600 / tok_s_gpu * 1e6``.  NaN where the price is
    unknown (NaN); +inf where the throughput is zero (nothing is produced for the money)."""
    tps = np.asarray(tokens_per_s_per_gpu, dtype=np.float64)
    price = np.asarray(usd_per_gpu_hour, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = price / S_PER_HOUR / tps * TOKENS_PER_MILLION
    return np.where(np.isnan(price), np.nan, np.where(tps > 0, out, np.inf))


def add_cost(res: MutableMapping[str, np.ndarray], design: Mapping[str, np.ndarray], table: HardwareTable,
             usd_per_gpu_hour: float | Mapping[str, float] | None = None,
             power_overhead_factor: float | None = None) -> MutableMapping[str, np.ndarray]:
    """Add ``tokens_per_s_per_kw`` and ``usd_per_million_tokens`` to a simulator result (in place;
    returned for chaining).  ``usd_per_gpu_hour`` overrides the hardware files' prices: one number
    for every kind, or a mapping kind name -> price (kinds not named keep their file's price)."""
    idx = np.asarray(design["hw_idx"], dtype=np.int64)
    power = np.array([h.board_power_w for h in table.kinds], dtype=np.float64)[idx]
    prices = [h.usd_per_gpu_hour for h in table.kinds]
    if isinstance(usd_per_gpu_hour, Mapping):
        prices = [float(usd_per_gpu_hour.get(h.name, p)) for h, p in zip(table.kinds, prices, strict=True)]
    elif usd_per_gpu_hour is not None:
        prices = [float(usd_per_gpu_hour)] * len(prices)
    price = np.array(prices, dtype=np.float64)[idx]
    factor = POWER_OVERHEAD_FACTOR if power_overhead_factor is None else float(power_overhead_factor)
    tps = res["tokens_per_s_per_gpu"]
    res["tokens_per_s_per_kw"] = tokens_per_s_per_kw(tps, power, factor)
    res["usd_per_million_tokens"] = usd_per_million_tokens(tps, price)
    return res


def check_factor(value: float) -> bool:
    """A power overhead factor is a finite number >= 1 (facility power cannot be below the GPUs')."""
    return math.isfinite(value) and value >= 1.0


__all__ = ["COST_COLUMNS", "HOST_POWER_FACTOR", "POWER_OVERHEAD_FACTOR", "PUE", "add_cost", "check_factor",
           "tokens_per_s_per_kw", "usd_per_million_tokens"]
