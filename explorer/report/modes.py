"""Where each serving mode wins: per mode (aggregated or disaggregated, with or without
speculative decoding), the best feasible tokens/s/GPU at fixed interactivity targets.

A table's ``serving_mode`` column (set by :meth:`explorer.space.SearchSpace.frame` when a space
searches ``deployment.serving`` or ``deployment.draft_tokens``) names each row's mode.  At each
target ``x`` the best throughput of a mode is the highest tokens/s/GPU among its feasible rows with
at least ``x`` tokens/s/user (the staircase of its own front); the winner is the best mode there.
"""

from __future__ import annotations

import html

import numpy as np
import pandas as pd

#: tokens/s/user at which modes are compared (besides each mode's own best interactivity)
MODE_TARGETS = (10.0, 20.0, 50.0, 100.0, 200.0)


def modes_table(df: pd.DataFrame, targets=MODE_TARGETS) -> pd.DataFrame | None:
    """Rows: targets; columns: modes (best tokens/s/GPU, NaN where the mode cannot reach the
    target), plus ``winner`` and ``margin`` (winner / runner-up).  None without two modes."""
    if "serving_mode" not in df.columns:
        return None
    ok = df[df["feasible"].astype(bool)]
    modes = sorted(ok["serving_mode"].astype(str).unique())
    if len(modes) < 2:
        return None
    x = pd.to_numeric(ok["tokens_per_s_per_user"], errors="coerce").to_numpy()
    y = pd.to_numeric(ok["tokens_per_s_per_gpu"], errors="coerce").to_numpy()
    m = ok["serving_mode"].astype(str).to_numpy()
    rows = []
    for t in targets:
        best = {}
        for mode in modes:
            sel = y[(m == mode) & (x >= t)]
            best[mode] = float(sel.max()) if sel.size else float("nan")
        vals = {k: v for k, v in best.items() if np.isfinite(v)}
        row: dict[str, object] = {"tokens_per_s_per_user": t, **best}
        if vals:
            order = sorted(vals.items(), key=lambda kv: -kv[1])
            row["winner"] = order[0][0]
            row["margin"] = order[0][1] / order[1][1] if len(order) > 1 and order[1][1] > 0 else np.nan
        else:
            row["winner"], row["margin"] = "", np.nan
        rows.append(row)
    return pd.DataFrame(rows)


def modes_text(table: pd.DataFrame) -> list[str]:
    """Plain-text lines of :func:`modes_table` (the sweep summary prints them)."""
    modes = [c for c in table.columns if c not in ("tokens_per_s_per_user", "winner", "margin")]
    out = ["  modes        best tok/s/GPU at >= X tok/s/user: " + " | ".join(modes)]
    for _, r in table.iterrows():
        cells = " | ".join(f"{r[k]:,.0f}" if np.isfinite(r[k]) else "-" for k in modes)
        win = (f" -> {r['winner']}" + (f" by {r['margin']:.2f}x" if np.isfinite(r["margin"]) else "")
               if r["winner"] else "")
        out.append(f"    >= {r['tokens_per_s_per_user']:g}: {cells}{win}")
    return out


def modes_html(df: pd.DataFrame) -> str:
    """The report section, or '' when the table has fewer than two modes."""
    t = modes_table(df)
    if t is None:
        return ""
    modes = [c for c in t.columns if c not in ("tokens_per_s_per_user", "winner", "margin")]
    head = "".join(f"<th>{html.escape(m)}</th>" for m in modes)
    body = []
    for _, r in t.iterrows():
        cells = "".join(f"<td>{r[k]:,.0f}</td>" if np.isfinite(r[k]) else "<td>—</td>" for k in modes)
        win = html.escape(str(r["winner"])) + (f" ({r['margin']:.2f}x)" if np.isfinite(r["margin"]) else "")
        body.append(f"<tr><td>&ge; {r['tokens_per_s_per_user']:g}</td>{cells}<td>{win or '—'}</td></tr>")
    return ('<section id="modes"><h2>Where each serving mode wins</h2><p class="how">Best feasible tokens/s/GPU '
            "of each serving mode (aggregated or disaggregated prefill/decode, with or without speculative "
            "decoding) among its designs that give at least the stated tokens/s/user; the winner and its margin "
            "over the runner-up. Colour the frontier by serving_mode to see the fronts themselves.</p>"
            f'<table class="front" id="modes-table"><thead><tr><th>tokens/s/user</th>{head}<th>winner</th></tr>'
            f"</thead><tbody>{''.join(body)}</tbody></table></section>")
