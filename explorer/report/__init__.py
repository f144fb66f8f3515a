"""Reports: one self-contained HTML page per sweep, and pages comparing sweeps.

Only this layer imports plotly (DESIGN.md section 2).  Public API:

* :func:`build_report_html`, :func:`write_report`, :func:`read_report` (sweep reports, schema
  :data:`SCHEMA`);
* :func:`load_results` (a report or a results CSV -> table and meta);
* :func:`compare_results`, :func:`build_compare_html` (comparison pages, schema
  :data:`COMPARE_SCHEMA`).
"""

from explorer.report.compare import COMPARE_SCHEMA, build_compare_html, compare_results
from explorer.report.io import load_results, read_report, write_report, write_text_atomic
from explorer.report.sweep import SCHEMA, build_report_html

__all__ = [
    "SCHEMA",
    "COMPARE_SCHEMA",
    "build_report_html",
    "write_report",
    "read_report",
    "load_results",
    "write_text_atomic",
    "compare_results",
    "build_compare_html",
]
