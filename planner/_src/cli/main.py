"""``main(argv)``: parse the command line, run its command, and turn what went wrong into
the documented exit status and a message on stderr."""

from __future__ import annotations

import os
import sys

from planner._src.cli.common import EXIT_FACTORY, FactoryError, StdoutError
from planner._src.cli.parser import build_parser

EXIT_INTERRUPTED = 130  # Ctrl-C, as shells report SIGINT


def main(argv=None) -> int:
    """Run one command; return the exit status (0 ok, 1 plan failed checks, 2 error, 3 the
    factory raised: the docstring of planner._src.cli says which is which)."""
    try:
        a = build_parser().parse_args(argv)
    except SystemExit as e:  # --help, --version, or a usage error argparse already printed
        return e.code if isinstance(e.code, int) else 2
    import cost_models as cm  # deferred: JAX only now, --help and --version answer without it
    import planner  # deferred: --help answers without importing JAX

    if _stdout_is_dev_full():
        print(
            "error: standard output is /dev/full, where nothing can be written: the report "
            "would be lost after the whole solve.\nFix: redirect it to a file on a disk with "
            "space (or to /dev/null and pass --out FILE / --save FILE).",
            file=sys.stderr,
        )
        return 2
    try:
        return a.run(a)
    except KeyboardInterrupt:
        if sys.stderr.isatty():
            sys.stderr.write("\x1b[?25h")  # the spinner hid the cursor: show it again
        print("\ninterrupted (Ctrl-C): nothing more was planned or written", file=sys.stderr)
        return EXIT_INTERRUPTED
    except StdoutError as e:
        print(
            f"error: cannot write the output to standard output: {e.strerror or e}.\nFix: "
            "redirect it to a disk with space (or pass --out FILE); with --save the plan "
            "was saved before this.",
            file=sys.stderr,
        )
        _silence_stdout()
        return 2
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


def _stdout_is_dev_full() -> bool:
    """Whether stdout is Linux's /dev/full (every write fails with ENOSPC): known before any
    work, unlike a disk that fills up (StdoutError says so after the solve)."""
    try:
        return os.path.samestat(os.fstat(sys.stdout.fileno()), os.stat("/dev/full"))
    except (OSError, ValueError, AttributeError):  # no /dev/full, or stdout has no file
        return False


def _silence_stdout() -> None:
    """After a failed write to stdout, the interpreter's own flush at exit would fail again
    ("Exception ignored ..."): point stdout at /dev/null."""
    try:
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115  (kept open until exit)
    except OSError:
        pass


if __name__ == "__main__":
    sys.exit(main())
