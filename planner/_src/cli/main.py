"""``main(argv)``: parse the command line, run its command, and turn what went wrong into
the documented exit status and a message on stderr."""

from __future__ import annotations

import sys

from planner._src.cli.common import EXIT_FACTORY, FactoryError
from planner._src.cli.parser import build_parser


def main(argv=None) -> int:
    """Run one command; return the exit status (0 ok, 1 plan failed checks, 2 error, 3 the
    factory raised: the docstring of planner._src.cli says which is which)."""
    try:
        a = build_parser().parse_args(argv)
    except SystemExit as e:  # --help, --version, or a usage error argparse already printed
        return e.code if isinstance(e.code, int) else 2
    import cost_models as cm  # deferred: JAX only now, --help and --version answer without it
    import planner  # deferred: --help answers without importing JAX

    try:
        return a.run(a)
    except FactoryError as e:  # the user's code: its traceback, then what to check
        import traceback

        traceback.print_exception(e.error, file=sys.stderr)
        print(f"error: {e}", file=sys.stderr)
        return EXIT_FACTORY
    except (planner.PlannerError, cm.ProfileError, cm.CalibrationError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except ImportError as e:  # an optional dependency (matplotlib for plots); says the fix
        print(f"error: {e}", file=sys.stderr)
        return 2
    except OSError as e:  # a file that cannot be written or read
        print(
            f"error: {e.strerror or e}: {e.filename}.\nFix: check the path and its "
            "directory's permissions.",
            file=sys.stderr,
        )
        return 2


if __name__ == "__main__":
    sys.exit(main())
