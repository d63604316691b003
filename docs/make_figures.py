"""Regenerate the quickstart's report and pictures in docs/, as the README's commands make them.

    python docs/make_figures.py

runs, from the repository root (a few minutes on a laptop CPU):

    python -m planner solve examples.llama:quickstart --hbm-gb 0.42 --hardware h200 \\
        --timeline docs/quickstart-hbm.png --save plan.json --out docs/quickstart-report.txt
    python -m planner pareto examples.llama:quickstart --hbm-gb auto --hardware h200 \\
        --png docs/quickstart-pareto.png --out docs/quickstart-pareto.txt

The figures depend on the machine's compiler (the report's status block says which), so
commit them with the machine named in the commit message.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
QUICKSTART = ["examples.llama:quickstart", "--hardware", "h200", "--quiet"]
COMMANDS = (
    [
        "solve",
        *QUICKSTART,
        "--hbm-gb",
        "0.42",
        "--timeline",
        "docs/quickstart-hbm.png",
        "--save",
        "plan.json",
        "--out",
        "docs/quickstart-report.txt",
    ],
    [
        "pareto",
        *QUICKSTART,
        "--hbm-gb",
        "auto",
        "--png",
        "docs/quickstart-pareto.png",
        "--out",
        "docs/quickstart-pareto.txt",
    ],
)


def main() -> int:
    for argv in COMMANDS:
        print("python -m planner " + " ".join(argv), flush=True)
        r = subprocess.run(
            [sys.executable, "-m", "planner", *argv], cwd=ROOT, stdout=subprocess.DEVNULL
        )
        if r.returncode != 0:
            return r.returncode
    return 0


if __name__ == "__main__":
    sys.exit(main())
