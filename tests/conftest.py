"""Test configuration: several fake CPU devices, as the sharding tests and users' meshes need;
a faster XLA:CPU code generator; shared zoo sessions; xdist groups for shared fixtures."""

import os
import sys

# XLA:CPU's LLVM code generation at -O0 without its expensive passes: about 40% off every
# compile (flax_linen's step: 2.6 s of CPU against 4.6-6.2 s, 2026-12-03), and the suite is
# mostly compiles. The figures the tests assert come from XLA's HLO passes and buffer
# assignment, which these flags do not touch (the same temp/argument/output bytes and the same
# loss to 7 digits, checked on the zoo); only the generated machine code is slower, and the
# models here run in milliseconds. PLANNER_TEST_XLA_OPT=1 compiles as users do (XLA's default);
# an XLA_FLAGS set from outside is left as it is.
_FLAGS = ["--xla_force_host_platform_device_count=8"]
if os.environ.get("PLANNER_TEST_XLA_OPT") != "1":
    _FLAGS += ["--xla_backend_optimization_level=0", "--xla_llvm_disable_expensive_passes=true"]
os.environ.setdefault("XLA_FLAGS", " ".join(_FLAGS))
# hardware="cpu" plans with this machine's calibration by default (cost_models/_cpu_profile.py):
# the suite pins the shipped made-up figures, so that its plans and figures are the same on
# every machine (and no test pays a calibration); the tests of the calibration ask for it.
os.environ["PLANNER_CPU_PROFILE"] = "made-up"

import jax  # noqa: E402
import pytest  # noqa: E402

jax.config.update("jax_platforms", "cpu")

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

_BROAD = ("module", "package", "session")


@pytest.fixture(scope="session")
def zoo_session():
    """``zoo_session(name) -> (step, args, planner.Planner)``: each zoo model built, traced and
    compiled under its anchors once per process, shared by every test that plans it
    (tests/test_zoo.py, tests/test_numerics.py). Each plan is still made, compiled and checked
    by the test that asks for it; the session's own caches (the anchors, the stock policies'
    compiles, the unplanned step's outputs for the numerics check) are shared, as they are
    for a user's session planned at several budgets."""
    import warnings

    import planner
    from tests.zoo import MODELS

    made: dict = {}

    def get(name):
        if name not in made:
            step, args = MODELS[name].make()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", planner.PlanWarning)
                made[name] = (step, args, planner.Planner(step, *args, hardware="cpu"))
        return made[name]

    return get


@pytest.fixture(autouse=True)
def _no_planner_kept_between_tests():
    """Each test plans from nothing: planner.solve's session cache (planning/sessions.py) is
    emptied after every test, so a Planner one test made (under its monkeypatches) never
    answers another's call."""
    yield
    from planner._src.planning import sessions

    sessions.clear()


def pytest_collection_modifyitems(config, items):
    """xdist groups (honoured under ``--dist loadgroup``, pyproject's default): the tests that
    share a module- or session-scoped fixture of their own file run on one worker, so the
    fixture (a traced, planned, compiled model) is built once, not once per worker; the tests
    of one zoo model share its session. Tests without such fixtures are spread freely."""
    for item in items:
        info = getattr(item, "_fixtureinfo", None)
        if info is None:
            continue
        if "zoo_session" in info.name2fixturedefs and hasattr(item, "callspec"):
            name = item.callspec.params.get("name")
            if name is not None:
                item.add_marker(pytest.mark.xdist_group(f"zoo-{name}"))
                continue
        module = item.nodeid.split("::")[0]
        for defs in info.name2fixturedefs.values():
            d = defs[-1]
            if d.scope in _BROAD and d.baseid == module:
                item.add_marker(pytest.mark.xdist_group(module))
                break


_TIMES = os.environ.get("PLANNER_TEST_TIMES")  # a file: one line per test, for the suite's budget


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """With PLANNER_TEST_TIMES=FILE, append "nodeid, wall s, CPU s of this process" per test
    (setup, call and teardown; the CPU figure is what the test costs on a shared machine)."""
    if not _TIMES:
        yield
        return
    import time

    wall, cpu = time.perf_counter(), time.process_time()
    yield
    with open(_TIMES, "a") as f:
        f.write(
            f"{item.nodeid}\t{time.perf_counter() - wall:.3f}\t{time.process_time() - cpu:.3f}\n"
        )
