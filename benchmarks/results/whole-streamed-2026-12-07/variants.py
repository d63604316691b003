"""Whole-mode host leaves, three ways (argv[1]): "before" (xla/first_use.py as of commit
78ec82d: each host leaf moved in at its first use, the update in the step's own order),
"streamed" (the working tree's xla/first_use.py: the update inlined and streamed leaf by
leaf, each leaf's group just after its gradient), "hbm" (nothing on the host: the
state-in-HBM figure); argv[2]: test idioms, ";"-separated. Deviceless XLA:GPU for the H200
(JAX_PLATFORMS=cpu, the CUDA plugin installed); prints the compiled HBM bytes (argument +
output - alias + temp) and the host bytes per stock policy. Run from the repository root."""

import subprocess
import sys
import types
import warnings

sys.path.insert(0, "tests")
import jax
from test_train_state import IDIOMS, _donated

from planner._src.emit import apply_state as AS
from planner._src.emit.apply import binding
from planner._src.trainstate import StateApply, select
from planner._src.trainstate.records import leaves_of
from planner._src.xla import compile as xc
from planner._src.xla import deviceless, first_use
from planner._src.xla import targets as tg

variant = sys.argv[1]
target = tg.resolve("h200", num_devices=1)
if variant == "before":
    src = subprocess.run(
        ["git", "show", "78ec82d:planner/_src/xla/first_use.py"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    old = types.ModuleType("first_use_before")
    exec(compile(src, "first_use_before.py", "exec"), old.__dict__)
    first_use.call_moving_at_first_use = old.call_moving_at_first_use
pols = {
    "nothing": jax.checkpoint_policies.nothing_saveable,
    "dots": jax.checkpoint_policies.dots_saveable,
    "everything": jax.checkpoint_policies.everything_saveable,
}
for idiom in sys.argv[2].split(";"):
    step, args = IDIOMS[idiom]()
    sel = select.detect(args)
    opt, params = (select.subtree(args, p) for p in (sel.opt_path, sel.params_path))
    leaves = leaves_of(opt, params, layers=4)
    host = frozenset(x.key for x in leaves if x.movable) if variant != "hbm" else frozenset()
    sa = StateApply(
        opt_path=sel.opt_path,
        params_path=sel.params_path,
        container=sel.container,
        on_host=host,
        layers=4,
        mode="whole",
        mode_why="",
    )
    for pn, pol in pols.items():
        applied = AS.apply_state(_donated(step, args), binding({}, pol), sa)
        placed = applied.placed(deviceless.args_for(target, args))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            prog = xc.compile_traced(target, applied.jitted(placed), placed)
        m = prog.compiled.memory_analysis()
        dev = (
            m.argument_size_in_bytes
            + m.output_size_in_bytes
            - m.alias_size_in_bytes
            + m.temp_size_in_bytes
        )
        print(
            f"{variant:9s} {idiom:28s} {pn:10s} device={dev} temp={m.temp_size_in_bytes} "
            f"host_arg={m.host_argument_size_in_bytes} host_out={m.host_output_size_in_bytes}",
            flush=True,
        )
