import sys, os, warnings, time
sys.path.insert(0, "tests")
import jax
from test_train_state import IDIOMS, _donated
from planner._src.emit.apply import binding
from planner._src.emit import apply_state as AS
from planner._src.trainstate import StateApply, select, check_compiled
from planner._src.trainstate.records import leaves_of
from planner._src.xla import deviceless, first_use, adapter
from planner._src.xla import compile as xc, targets as tg
"""The whole state on the host, three ways (argv[1]): "start" (each host leaf moved to HBM at
the step's start, as before), "first" (xla/first_use.py: at its first use), "hbm" (nothing
on the host: the state-in-HBM figure); argv[2]: test idioms, ";"-separated. Deviceless
XLA:GPU for the H200 (JAX_PLATFORMS=cpu, the CUDA plugin installed); prints the compiled
HBM bytes (argument + output - alias + temp) and the host bytes per stock policy."""
variant = sys.argv[1]
target = tg.resolve("h200", num_devices=1)
if variant == "start":
    def call(fn, args, on_host, out_to_host):
        args2 = AS._map_args(args, lambda p, x: adapter.to_memory(x, "device") if (on_host(p) and getattr(x,"ndim",0)) else x)
        out = fn(*args2)
        marks = out_to_host(out)
        return jax.tree.map(lambda o, m: adapter.to_memory(o, "pinned_host") if m else o, out, marks)
    first_use.call_moving_at_first_use = call
elif variant == "first_late":
    orig = first_use._Replay.run
    def run(self, jaxpr, args, host_in, out_host):
        return orig(self, jaxpr, args, host_in, {})
    first_use._Replay.run = run
    # outputs moved at the end by the final list comprehension? no: marks handled only if out_host set; patch below
    old = first_use.call_moving_at_first_use
    def call(fn, args, on_host, out_to_host):
        out = old(fn, args, on_host, lambda o: jax.tree.map(lambda _: False, o))
        marks = out_to_host(out)
        return jax.tree.map(lambda o, m: adapter.to_memory(o, "pinned_host") if m else o, out, marks)
    first_use.call_moving_at_first_use = call
pols = {"nothing": jax.checkpoint_policies.nothing_saveable, "dots": jax.checkpoint_policies.dots_saveable, "everything": jax.checkpoint_policies.everything_saveable}
for idiom in sys.argv[2].split(";"):
    step, args = IDIOMS[idiom]()
    sel = select.detect(args)
    opt, params = (select.subtree(args, p) for p in (sel.opt_path, sel.params_path))
    leaves = leaves_of(opt, params, layers=4)
    host = frozenset(x.key for x in leaves if x.movable) if variant != "hbm" else frozenset()
    sa = StateApply(opt_path=sel.opt_path, params_path=sel.params_path, container=sel.container, on_host=host, layers=4, mode="whole", mode_why="")
    for pn, pol in pols.items():
        applied = AS.apply_state(_donated(step, args), binding({}, pol), sa)
        placed = applied.placed(deviceless.args_for(target, args))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            prog = xc.compile_traced(target, applied.jitted(placed), placed)
        m = prog.compiled.memory_analysis()
        dev = m.argument_size_in_bytes + m.output_size_in_bytes - m.alias_size_in_bytes + m.temp_size_in_bytes
        print(f"{variant:11s} {idiom:28s} {pn:10s} device={dev} temp={m.temp_size_in_bytes} host_arg={m.host_argument_size_in_bytes} host_out={m.host_output_size_in_bytes}", flush=True)
