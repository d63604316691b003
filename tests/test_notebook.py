"""The quickstart notebook runs top to bottom without an error (nbclient, a fresh kernel)."""

import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # compiles whole models (the fast tier is -m "not slow")

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

NOTEBOOK = Path(__file__).resolve().parent.parent / "notebooks" / "quickstart.ipynb"


def test_quickstart_notebook_runs_without_errors(tmp_path, monkeypatch):
    monkeypatch.setenv("PLANNER_NOTEBOOK_OUT", str(tmp_path))  # pictures and plan file here
    monkeypatch.setenv("JAX_PLATFORMS", "cpu")
    nb = nbformat.read(NOTEBOOK, as_version=4)
    client = nbclient.NotebookClient(
        nb,
        timeout=120,
        kernel_name="python3",
        resources={"metadata": {"path": str(NOTEBOOK.parent)}},
    )
    start = time.perf_counter()
    client.execute()  # raises CellExecutionError on the first failing cell
    elapsed = time.perf_counter() - start
    errors = [
        o
        for c in nb.cells
        if c.cell_type == "code"
        for o in c.get("outputs", [])
        if o.get("output_type") == "error"
    ]
    assert not errors, errors
    assert (tmp_path / "quickstart_timeline.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (tmp_path / "plan.json").exists()
    assert elapsed < 60, f"the quickstart took {elapsed:.0f} s; keep it under a minute"
    text = "".join(o.get("text", "") for c in nb.cells for o in c.get("outputs", []))
    assert "PLAN STATUS: COMPILED, WITHIN BUDGET" in text and "remat_policy: custom" in text
