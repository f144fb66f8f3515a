"""HTML scaffolding shared by sweep reports and comparison pages: skeleton, style, the small script
that resolves column references and draws the figures, sortable tables, and the page status.

The page status (``<pre id="explorer-status" hidden>``) is written by the page's own script once
every figure is drawn: ``{"plots": N, "front_points": K, "expected_front_points": K0, "errors": [...]}``,
where ``front_points`` counts the markers plotly drew for front traces (``uid`` starting with
``front``; with measured curves ``measured_points`` and ``expected_measured_points`` count the
measured markers, ``uid`` starting with ``measured``) and ``errors`` collects ``window.onerror``,
unhandled promise rejections and ``console.error`` calls.  Headless-browser tests read it from the DOM.
"""

from __future__ import annotations

import html
import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from explorer.report.codec import dumps, script_block

PLOTLY_CDN = "https://cdn.plot.ly/plotly-{version}.min.js"


def esc(value: Any) -> str:
    """HTML-escape any value's text (quotes included)."""
    return html.escape("" if value is None else str(value), quote=True)


def plotly_script(plotlyjs: str) -> str:
    """``<script>`` loading plotly.js: inlined (works offline) or from the CDN (small file)."""
    from plotly.offline import get_plotlyjs, get_plotlyjs_version

    if plotlyjs == "inline":
        js = get_plotlyjs().replace("</script", "<\\/script")
        return f'<script type="text/javascript">{js}</script>'
    if plotlyjs == "cdn":
        return f'<script src="{PLOTLY_CDN.format(version=get_plotlyjs_version())}" charset="utf-8"></script>'
    raise ValueError(f"plotlyjs must be 'inline' or 'cdn', got {plotlyjs!r}")


# Installed before plotly.js so that every error on the page is counted.
_ERROR_CAPTURE = """<script>
window.__explorerErrors = [];
window.addEventListener("error", function (e) {
  window.__explorerErrors.push("error: " + (e.message || String(e)) + (e.filename ? " at " + e.filename + ":" + e.lineno : ""));
});
window.addEventListener("unhandledrejection", function (e) {
  window.__explorerErrors.push("unhandled rejection: " + String(e.reason && (e.reason.stack || e.reason)));
});
(function () {
  var orig = console.error;
  console.error = function () {
    try { window.__explorerErrors.push("console.error: " + Array.prototype.map.call(arguments, String).join(" ")); } catch (_) {}
    return orig.apply(console, arguments);
  };
})();
</script>"""

_RUNTIME = r"""<script>
(function () {
  "use strict";
  var errors = window.__explorerErrors || [];
  var statusEl = document.getElementById("explorer-status");
  function writeStatus(extra) {
    var o = {plots: document.querySelectorAll(".js-plotly-plot").length, errors: errors};
    for (var k in extra) { o[k] = extra[k]; }
    statusEl.textContent = JSON.stringify(o);
    statusEl.setAttribute("data-done", "1");
  }
  function parse(id) {
    var el = document.getElementById(id);
    return el ? JSON.parse(el.textContent) : null;
  }
  function Table(t) {
    this.n = t.n; this.cols = {}; this.cache = {}; this.sel = {};
    for (var i = 0; i < t.columns.length; i++) { this.cols[t.columns[i].name] = t.columns[i]; }
  }
  Table.prototype.get = function (name) {
    if (this.cache[name]) { return this.cache[name]; }
    var c = this.cols[name], n = this.n, out;
    if (!c) { throw new Error("report data has no column '" + name + "'"); }
    if ("const" in c) { out = new Array(n); for (var i = 0; i < n; i++) { out[i] = c["const"]; } }
    else if ("levels" in c) { out = c.codes.map(function (k) { return c.levels[k]; }); }
    else { out = c.values; }
    if (c.kind === "bool") { out = out.map(function (v) { return !!v; }); }
    this.cache[name] = out;
    return out;
  };
  Table.prototype.has = function (name) { return name in this.cols; };
  Table.prototype.rows = function (sel) {
    if (this.sel[sel]) { return this.sel[sel]; }
    var n = this.n, idx = [], i;
    var feas = this.has("feasible") ? this.get("feasible") : null;
    var front = this.has("on_front") ? this.get("on_front") : null;
    for (i = 0; i < n; i++) {
      var f = feas ? feas[i] : true, p = front ? front[i] : false;
      if (sel === "all" || (sel === "front" && f && p) || (sel === "dominated" && f && !p) ||
          (sel === "infeasible" && !f)) { idx.push(i); }
    }
    if (sel === "front" && this.has("tokens_per_s_per_user")) {
      var x = this.get("tokens_per_s_per_user"), y = this.get("tokens_per_s_per_gpu");
      idx.sort(function (a, b) { return (x[a] - x[b]) || (y[b] - y[a]) || (a - b); });
    }
    this.sel[sel] = idx;
    return idx;
  };
  var data = null, tables = {};
  function table(key) {
    if (key === undefined || key === null) { key = "$main"; }
    if (!tables[key]) {
      var t = key === "$main" ? data.table : (data.tables || {})[key];
      if (!t) { throw new Error("report data has no table '" + key + "'"); }
      tables[key] = new Table(t);
    }
    return tables[key];
  }
  function resolve(v) {
    if (Array.isArray(v)) { return v.map(resolve); }
    if (v === null || typeof v !== "object") { return v; }
    if ("$col" in v) {
      var t = table(v.$table), c = t.get(v.$col), m = v.mul;
      return t.rows(v.$rows).map(function (i) { return (m && c[i] !== null) ? c[i] * m : c[i]; });
    }
    if ("$rank" in v) {
      var t2 = table(v.$table), c2 = t2.get(v.$rank), pos = {};
      v.levels.forEach(function (l, k) { pos[String(l)] = k; });
      return t2.rows(v.$rows).map(function (i) { var k = pos[String(c2[i])]; return k === undefined ? null : k; });
    }
    if ("$cols" in v) {
      var t3 = table(v.$table), cs = v.$cols.map(function (name) { return t3.get(name); });
      return t3.rows(v.$rows).map(function (i) { return cs.map(function (c) { return c[i]; }); });
    }
    var out = {};
    for (var k in v) { out[k] = resolve(v[k]); }
    return out;
  }
  function countFront() {
    return document.querySelectorAll('.scatterlayer .trace[class*="tracefront"] .point').length;
  }
  function sortable() {
    var tbls = document.querySelectorAll("table.sortable");
    Array.prototype.forEach.call(tbls, function (tbl) {
      Array.prototype.forEach.call(tbl.tHead.rows[0].cells, function (th, col) {
        th.addEventListener("click", function () {
          var body = tbl.tBodies[0], rows = Array.prototype.slice.call(body.rows);
          var asc = th.getAttribute("data-dir") !== "asc";
          Array.prototype.forEach.call(tbl.tHead.rows[0].cells, function (o) { o.removeAttribute("data-dir"); });
          th.setAttribute("data-dir", asc ? "asc" : "desc");
          function key(r) {
            var c = r.cells[col], v = c.getAttribute("data-v");
            if (v === null) { v = c.textContent; }
            var num = parseFloat(v);
            return (v !== "" && isFinite(num) && String(num) !== "NaN" && /^[-+0-9.eE]+$/.test(v)) ? num : v.toLowerCase();
          }
          rows.sort(function (a, b) {
            var x = key(a), y = key(b), r;
            if (typeof x === "number" && typeof y === "number") { r = x - y; }
            else { r = String(x) < String(y) ? -1 : (String(x) > String(y) ? 1 : 0); }
            return asc ? r : -r;
          });
          rows.forEach(function (r) { body.appendChild(r); });
        });
      });
    });
  }
  // With #explorer-selftest in the URL: press every dropdown/button of every figure, show the
  // infeasible points, and record what was drawn (used by the headless-browser tests).
  function selftest() {
    var res = {buttons: 0};
    var chain = Promise.resolve();
    Array.prototype.forEach.call(document.querySelectorAll(".js-plotly-plot"), function (gd) {
      (gd.layout.updatemenus || []).forEach(function (menu) {
        menu.buttons.forEach(function (b) {
          chain = chain.then(function () { return Plotly[b.method].apply(null, [gd].concat(b.args)); })
                       .then(function () { res.buttons += 1; });
        });
      });
    });
    var fr = document.getElementById("fig-frontier");
    if (fr && fr.data) {
      chain = chain.then(function () { return Plotly.restyle(fr, {visible: true}, [1]); }).then(function () {
        res.infeasible_points = fr.querySelectorAll(".scatterlayer .traceinfeasible .point").length;
      });
      var bi = fr.data.findIndex(function (t) { return t.uid === "band"; });
      if (bi >= 0) {  // the front's held-out error bands (hidden until clicked in the legend)
        chain = chain.then(function () { return Plotly.restyle(fr, {visible: true}, [bi]); }).then(function () {
          res.band_bars = fr.querySelectorAll(".scatterlayer .traceband .errorbar").length;
        });
      }
    }
    return chain.then(function () { res.front_points_after = countFront(); return res; });
  }
  try {
    sortable();
    data = parse("explorer-data");
    var figs = parse("explorer-figures");
    if (typeof Plotly === "undefined") { throw new Error("plotly.js did not load (offline with --plotlyjs cdn?)"); }
    var config = {responsive: true, displaylogo: false, modeBarButtonsToRemove: ["lasso2d", "select2d"],
                  toImageButtonOptions: {format: "png", scale: 2}};
    var jobs = figs.figures.map(function (f) {
      var el = document.getElementById(f.id);
      if (!el) { throw new Error("no element for figure " + f.id); }
      return Plotly.newPlot(el, resolve(f.data), resolve(f.layout), config);
    });
    Promise.all(jobs).then(function () {
      var st = {front_points: countFront(), expected_front_points: figs.expected_front_points};
      if ("expected_measured_points" in figs) {
        st.measured_points = document.querySelectorAll('.scatterlayer .trace[class*="tracemeasured"] .point').length;
        st.expected_measured_points = figs.expected_measured_points;
      }
      if (location.hash !== "#explorer-selftest") { writeStatus(st); return; }
      return selftest().then(function (r) { st.selftest = r; writeStatus(st); });
    }).then(null, function (e) {
      errors.push("plot failed: " + String(e && (e.stack || e)));
      writeStatus({front_points: countFront(), expected_front_points: figs.expected_front_points});
    });
  } catch (e) {
    errors.push("report script: " + String(e && (e.stack || e)));
    writeStatus({front_points: countFront()});
  }
})();
</script>"""

_CSS = """<style>
:root { --fg: #1d1d1f; --muted: #6e6e73; --line: #d9d9de; --accent: #2f5fa7; --bg2: #f6f7f9; }
* { box-sizing: border-box; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: var(--fg);
       margin: 0; background: white; }
header { padding: 18px 28px 10px; border-bottom: 1px solid var(--line); background: var(--bg2); }
header h1 { font-size: 21px; margin: 0 0 4px; }
header .sub { color: var(--muted); }
nav { padding: 6px 28px; border-bottom: 1px solid var(--line); font-size: 13px; position: sticky; top: 0;
      background: rgba(255,255,255,.96); z-index: 5; }
nav a { margin-right: 14px; color: var(--accent); text-decoration: none; }
main { padding: 8px 28px 40px; max-width: 1320px; }
section { margin: 22px 0 30px; }
h2 { font-size: 17px; margin: 0 0 6px; border-bottom: 1px solid var(--line); padding-bottom: 4px; }
p.how { color: var(--muted); margin: 4px 0 10px; max-width: 980px; }
.cards { display: flex; flex-wrap: wrap; gap: 10px; margin: 12px 0; }
.card { border: 1px solid var(--line); border-radius: 6px; padding: 8px 12px; min-width: 150px; background: white; }
.card .k { color: var(--muted); font-size: 12px; }
.card .v { font-size: 17px; font-weight: 600; }
.banner { border: 1px solid #e0b252; background: #fff7e3; padding: 8px 12px; border-radius: 6px; margin: 12px 0; }
.note { color: var(--muted); font-size: 13px; }
.scroll { max-height: 560px; overflow: auto; border: 1px solid var(--line); border-radius: 4px; }
table { border-collapse: collapse; font-size: 12.5px; }
th, td { padding: 3px 8px; border-bottom: 1px solid #eee; text-align: right; white-space: nowrap; }
th { background: var(--bg2); position: sticky; top: 0; font-weight: 600; }
td.t, th.t { text-align: left; }
table.sortable th { cursor: pointer; user-select: none; }
table.sortable th[data-dir="asc"]::after { content: " \\25B2"; font-size: 9px; }
table.sortable th[data-dir="desc"]::after { content: " \\25BC"; font-size: 9px; }
tr.bad td { background: #fff1f0; }
table.kv td:first-child { text-align: left; color: var(--muted); }
table.kv td { text-align: left; white-space: normal; }
pre.file { background: var(--bg2); border: 1px solid var(--line); padding: 8px; overflow: auto; max-height: 420px;
           font-size: 12px; }
details { margin: 6px 0; }
summary { cursor: pointer; color: var(--accent); }
</style>"""


def page(title: str, header_html: str, nav: Sequence[tuple[str, str]], body_html: str, data_json: str,
         figures: dict[str, Any], plotlyjs: str) -> str:
    """A whole self-contained page.  ``title`` is escaped here; the other HTML parts are trusted."""
    nav_html = "".join(f'<a href="#{esc(a)}">{esc(t)}</a>' for a, t in nav)
    return "".join([
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n",
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n',
        f"<title>{esc(title)}</title>\n", _CSS, "\n", _ERROR_CAPTURE, "\n", plotly_script(plotlyjs),
        "\n</head>\n<body>\n<header>", header_html, "</header>\n<nav>", nav_html, "</nav>\n<main>\n",
        body_html, '\n<pre id="explorer-status" hidden>pending</pre>\n</main>\n',
        script_block("explorer-data", data_json), "\n", script_block("explorer-figures", dumps(figures)), "\n",
        _RUNTIME, "\n</body>\n</html>\n",
    ])


def cards(items: Iterable[tuple[str, str]]) -> str:
    return '<div class="cards">' + "".join(
        f'<div class="card"><div class="k">{esc(k)}</div><div class="v">{esc(v)}</div></div>' for k, v in items
    ) + "</div>"


def kv_table(items: Iterable[tuple[str, Any]]) -> str:
    rows = "".join(f"<tr><td>{esc(k)}</td><td>{esc(v)}</td></tr>" for k, v in items if v not in (None, ""))
    return f'<table class="kv">{rows}</table>'


def fmt_num(v: Any, digits: int = 4) -> str:
    """Short human number: 12,345 / 0.01234 / 1.23e+12; '' for missing."""
    if v is None:
        return ""
    try:
        f = float(v)
    except (TypeError, ValueError):
        return str(v)
    if not math.isfinite(f):
        return ""
    if f.is_integer() and abs(f) < 1e7:
        return f"{int(f):,}"
    if 1e-3 <= abs(f) < 1e7:
        s = f"{f:.{digits}g}"
        if "e" not in s and abs(f) >= 1000:
            return f"{f:,.0f}"
        return s
    return f"{f:.{digits - 1}e}"


Column = tuple[str, str, Callable[[Any], str]]  # (key, header, formatter)


def data_table(rows: Sequence[dict[str, Any]], columns: Sequence[Column], sortable: bool = True,
               text_cols: Iterable[str] = (), row_class: Callable[[dict[str, Any]], str] | None = None) -> str:
    """An HTML table; each numeric cell keeps its raw value in ``data-v`` so sorting is numeric."""
    text_cols = set(text_cols)
    head = "".join(f'<th class="{"t" if k in text_cols else ""}">{esc(h)}</th>' for k, h, _ in columns)
    body = []
    for r in rows:
        cells = []
        for k, _, f in columns:
            v = r.get(k)
            shown = esc(f(v))
            if k in text_cols or isinstance(v, str) or v is None:
                cells.append(f'<td class="t">{shown}</td>')
            else:
                try:
                    raw = float(v)
                    dv = repr(raw) if math.isfinite(raw) else ""
                except (TypeError, ValueError):
                    dv = ""
                cells.append(f'<td data-v="{esc(dv)}">{shown}</td>')
        cls = row_class(r) if row_class else ""
        body.append(f'<tr class="{esc(cls)}">' + "".join(cells) + "</tr>" if cls else "<tr>" + "".join(cells) + "</tr>")
    klass = ' class="sortable"' if sortable else ""
    return f"<table{klass}><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"
