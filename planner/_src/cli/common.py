"""What the commands share: the user's MODULE:FACTORY imported and called, the exit
statuses, progress on stderr, output to stdout and --out, the checks of flags' values."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from pathlib import Path


def import_factory(spec: str, contract: str):
    """The callable named by ``MODULE:FACTORY`` (the current directory importable too).

    ``contract`` says what the factory must return, for the error messages.
    """
    from planner._src.errors import (
        InvalidArgumentError,
    )  # deferred: --help answers without importing JAX

    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise InvalidArgumentError(
            f"{spec!r} is not MODULE:FACTORY.\nFix: name a module and a function in it that "
            f"returns {contract}, e.g. examples.llama:quickstart."
        )
    cwd = str(Path.cwd())
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    check_backend()
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        if e.name and (module_name == e.name or module_name.startswith(e.name + ".")):
            raise InvalidArgumentError(
                f"Cannot import {module_name!r}: {e}.\nFix: run from the "
                "directory that holds it, or install it."
            ) from e
        raise FactoryError(spec, e, when="import") from e  # a dependency of the user's module
    except (Exception, SystemExit) as e:  # noqa: BLE001  (the user's module, at import)
        raise FactoryError(spec, e, when="import") from e
    factory = getattr(module, attr, None)
    if not callable(factory):
        raise InvalidArgumentError(f"{module_name} has no function {attr!r}.")
    return factory


EXIT_FACTORY = 3  # the user's MODULE:FACTORY raised
EXIT_NO_GPU = 4  # profile: JAX sees no GPU here, so there is nothing to measure


class FactoryError(Exception):
    """The user's factory raised: the CLI prints its traceback and exits EXIT_FACTORY."""

    def __init__(self, spec: str, error: BaseException, when: str = "call"):
        self.spec, self.error = spec, error
        module, _, attr = spec.partition(":")
        what = f"{type(error).__name__}: {error}"
        if isinstance(error, SystemExit):
            what = f"SystemExit({error.code!r}) (it called sys.exit or exit())"
        if when == "import":
            missing = getattr(error, "name", None) if isinstance(error, ImportError) else None
            fix = (
                f"install what it imports (pip install {missing.split('.')[0]}; the package's "
                "name on PyPI may differ), in the environment that runs the planner"
                if missing
                else f'run python -c "import {module}" and fix what it says'
            )
            text = (
                f"Importing {module} raised {what}\nWhy: the command imports your module "
                "to find the factory, and the import failed (its traceback is above; nothing "
                f"was planned).\nFix: {fix}."
            )
        else:
            text = (
                f"{spec} raised {what}\nWhy: the command calls your factory to build the step "
                "and its example arguments, and it failed (its traceback is above; nothing was "
                f'planned).\nFix: run it on its own, e.g. python -c "import {module} as m; '
                f'm.{attr}()", and fix it.'
            )
        super().__init__(text)


def call_factory(spec: str, factory, *args):
    """``factory(*args)``; any exception of the user's code becomes a FactoryError."""
    try:
        return factory(*args)
    except (Exception, SystemExit) as e:  # noqa: BLE001  (the user's code; exit(0) is no plan)
        raise FactoryError(spec, e) from e


def check_backend() -> None:
    """Raise InvalidArgumentError where JAX cannot start the backend ``JAX_PLATFORMS`` names
    (``cuda`` without its plugin, a made-up name), before the user's code runs: else the
    first array the factory makes fails, and the failure reads as the factory's."""
    import jax  # deferred: --help answers without importing JAX

    from planner._src.errors import (
        InvalidArgumentError,
    )  # deferred: --help answers without importing JAX

    try:
        jax.devices()
    except RuntimeError as e:
        platforms = os.environ.get("JAX_PLATFORMS", "")
        raise InvalidArgumentError(
            f"JAX cannot start a backend here: {str(e).splitlines()[0][:300]}\nWhy: "
            + (
                f"JAX_PLATFORMS={platforms!r} names a platform this JAX has no plugin or "
                "device for, so every array your factory makes would fail"
                if platforms
                else "JAX found no platform it can start"
            )
            + ".\nFix: unset JAX_PLATFORMS or set it to cpu (plan for a GPU from here with "
            "--hardware h200: the deviceless compiler needs no GPU), or install the plugin "
            "(pip install 'jax[cuda12]') on a machine with that device."
        ) from None


def load_factory(spec: str):
    """Import ``MODULE:FACTORY`` and call it; check it returned ``(step_fn, example_args)``."""

    made = call_factory(spec, import_factory(spec, "(step_fn, example_args)"))
    return checked_made(spec, made)


def checked_made(spec: str, made):
    """``(step_fn, example_args)`` as the factory returned it, checked: what is wrong named
    (a non-callable step, arguments that are a dict or one array, not a tuple of them)."""
    from planner._src.errors import (
        InvalidArgumentError,
    )  # deferred: --help answers without importing JAX

    contract = (
        "it must return (step_fn, example_args).\nFix: return the step function and a "
        "tuple of its arguments, e.g. return train_step, (params, batch)"
    )
    if not (isinstance(made, tuple | list) and len(made) == 2):
        n = f" of {len(made)} items" if isinstance(made, tuple | list) else ""
        raise InvalidArgumentError(f"{spec} returned {type(made).__name__}{n}; {contract}.")
    step, args = made
    if not callable(step):
        raise InvalidArgumentError(
            f"{spec} returned ({type(step).__name__}, ...): its first item is not callable; "
            f"{contract}."
        )
    if isinstance(args, dict):
        raise InvalidArgumentError(
            f"{spec} returned the step's arguments as a dict (keys {list(args)[:4]}); the "
            "planner calls step_fn(*example_args), which would pass the dict's keys.\nFix: "
            "return a tuple: (step_fn, (batch,)) for a step taking the dict as one argument."
        )
    if not isinstance(args, tuple | list):
        raise InvalidArgumentError(
            f"{spec} returned the step's arguments as {type(args).__name__}, not a tuple; "
            "the planner calls step_fn(*example_args).\nFix: return (step_fn, (x,)) for a "
            "step of one argument."
        )
    return step, tuple(args)


def parse_gb(text: str) -> float:
    """One ``--hbm-gb`` figure: a number of GB. ``80GB``, ``80 GiB``, ``auto`` and the like
    get an argparse error that says what to write instead."""
    t = text.strip()
    try:
        return float(t)
    except ValueError:
        pass
    num = t.rstrip("BbIiGgMmTtKk ")
    unit = t[len(num) :].strip()
    if t.lower() == "auto":
        fix = (
            "solve plans one budget: give it in GB, e.g. --hbm-gb 80; "
            "'pareto --hbm-gb auto' spans the budgets from full remat to saving everything"
        )
    elif num and unit:
        try:
            value = float(num)
        except ValueError:
            fix = "give a number of GB, e.g. --hbm-gb 80"
        else:
            if unit.lower() == "gb":
                fix = f"--hbm-gb is in GB already: write --hbm-gb {value:g}"
            else:
                fix = (
                    f"--hbm-gb takes GB (10^9 bytes), without a unit: convert {t} to GB "
                    "(e.g. 80GiB is --hbm-gb 85.9, 500MB is --hbm-gb 0.5)"
                )
    else:
        fix = "give a number of GB per device, e.g. --hbm-gb 80"
    raise argparse.ArgumentTypeError(f"{text!r} is not a number of GB.\nFix: {fix}.")


def image_path(path: str | None, suffixes: tuple[str, ...], flag: str) -> str | None:
    """Check an image path before any slow work, so a typo fails in a second, not a minute."""
    from planner._src.errors import (
        InvalidArgumentError,
    )  # deferred: --help answers without importing JAX

    if path is not None and not path.lower().endswith(suffixes):
        raise InvalidArgumentError(
            f"{flag} {path!r} must end with {' or '.join(suffixes)}: "
            "the suffix picks the image format.\n"
            f"Fix: e.g. {flag} plot{suffixes[0]}."
        )
    return path


class Progress:
    """Progress messages on stderr: a rich spinner on a terminal, plain lines otherwise."""

    def __init__(self, quiet: bool):
        self.quiet = quiet
        self._status = None

    def __enter__(self):
        if not self.quiet and sys.stderr.isatty():
            from rich.console import Console

            self._status = Console(stderr=True).status("starting ...")
            self._status.__enter__()
        return self

    def __exit__(self, *exc):
        if self._status is not None:
            self._status.__exit__(*exc)
        return False

    def __call__(self, message: str) -> None:
        if self.quiet:
            return
        if self._status is not None:
            self._status.update(message + " ...")
        else:
            print(f"[planner] {message} ...", file=sys.stderr, flush=True)


class StdoutError(OSError):
    """Standard output cannot be written (a full disk, /dev/full, a closed pipe)."""


def emit_text(text: str, out: str | None = None) -> None:
    """Print ``text`` on stdout and, with ``--out``, also write it to that file (first, so a
    stdout that cannot be written loses nothing --out names)."""
    if out:
        Path(out).write_text(text)
    try:
        print(text if text.endswith("\n") else text + "\n", end="")
        sys.stdout.flush()
    except OSError as e:
        raise StdoutError(e.errno, e.strerror) from e


def profile_names() -> tuple[str, ...]:
    """The bundled hardware profiles (cost_models/profiles/*.json), found without importing
    cost_models (which imports JAX): ``--help`` stays fast."""
    import importlib.util

    spec = importlib.util.find_spec("cost_models")
    dirs = list(spec.submodule_search_locations or []) if spec else []
    return tuple(sorted(p.stem for d in dirs for p in (Path(d) / "profiles").glob("*.json")))


LAYER_GROUPS = {"auto": None, "on": True, "off": False}
