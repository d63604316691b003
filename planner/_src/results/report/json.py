"""The report as JSON: the Report model as it is (report_from_dict reads it back)."""

from __future__ import annotations

import dataclasses
import json

from planner._src.results.report.model import Report


def render_json(r: Report) -> str:
    return json.dumps(dataclasses.asdict(r), indent=2, sort_keys=True)
