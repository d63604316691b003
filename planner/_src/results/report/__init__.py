"""Stage 7, report: a data model of the plan and one renderer per format (rich text,
Markdown, JSON).

``build_report(plan)`` gathers every figure once (build.py, into model.py's Report);
``render(report, fmt)`` only formats (text.py, markdown.py, json.py).
"""

from __future__ import annotations

from planner._src.results.report.build import build_report
from planner._src.results.report.json import render_json
from planner._src.results.report.markdown import render_markdown
from planner._src.results.report.model import PolicyLine, Report, Row, report_from_dict
from planner._src.results.report.text import render_text

__all__ = ["PolicyLine", "Report", "Row", "build_report", "render", "report_from_dict"]


def render(report: Report, fmt: str = "text") -> str:
    if fmt == "text":
        return render_text(report)
    if fmt == "markdown":
        return render_markdown(report)
    if fmt == "json":
        return render_json(report)
    raise ValueError(f"unknown report format {fmt!r}; expected 'text', 'markdown' or 'json'")
