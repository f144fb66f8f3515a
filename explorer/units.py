"""Unit conversions.  Spec files use human units; everything inside the simulator is SI
(seconds, bytes, FLOP/s, bytes/s).  Conversions happen once, at load time, through these constants."""

GB = 1e9  # bytes (decimal, as datasheets use)
GiB = 2**30
TB = 1e12
TFLOPS = 1e12  # FLOP/s
GB_PER_S = 1e9  # bytes/s
TB_PER_S = 1e12
US = 1e-6  # seconds
MS = 1e-3
