"""`explorer evaluate` answers in a third of a second: the modules its path imports leave the heavy
libraries to the code that needs them (scipy.stats: ~0.45 s to import, used by nothing on a scoring
path since the latency percentiles' Poisson quantile takes scipy.special's functions; pandas: ~0.15 s,
used to build result frames).  Checked in a fresh interpreter by the
modules it loads, never by a time."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

PROBE = """
import json, sys
import explorer.api as api
api.evaluate(model="llama-3.1-70b", hardware="h200", tp=2, batch=64, precision="fp8")
print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] in ("scipy", "pandas"))))
"""


def _loaded(code: str) -> list[str]:
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_closed_loop_evaluate_imports_neither_scipy_stats_nor_pandas():
    loaded = _loaded(PROBE)
    assert "scipy.stats" not in loaded
    assert not [m for m in loaded if m.startswith("pandas")]


def test_percentiles_still_import_what_they_need():
    # an open-loop point asks for latency percentiles: scipy.special comes in then, lazily -- and
    # scipy.stats does not (explorer.open_loop.poisson_ppf)
    loaded = _loaded(PROBE.replace('batch=64, precision="fp8")',
                                   'batch=64, precision="fp8", request_rate=2.0)'))
    assert "scipy.special" in loaded
    assert "scipy.stats" not in loaded
