"""``python -m planner``: the command line (planner/_src/cli/)."""

import sys

from planner._src.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
