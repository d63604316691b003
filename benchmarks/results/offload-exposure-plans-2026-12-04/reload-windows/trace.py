"""Trace the three steps deviceless (h200) once and pickle (graph, cost, assignments)."""
import dataclasses, json, pickle, sys, time
from pathlib import Path
sys.path.insert(0, "/work/wt-hide")
import cost_models as cm
from benchmarks.overlap_sweep import POINTS
from examples import llama
from planner._src import target as T
from planner._src.cost.baselines import policy_assignment
from planner._src.cost import build_cost_model
from planner._src.graph import build_graph
from planner._src.profiling.hiding import names_policy
from planner._src.trace import merge_call_sites, trace_step
from planner._src.types import Assignment

which = sys.argv[1]
P = Path("/work/wt-hide/benchmarks/results/offload-exposure-plans-2026-12-04")
if which == "sweep":
    cfg = dataclasses.replace(llama.H200_BENCH, attention_impl="cudnn")
    plans = {}
else:
    files = {"lc16k": ["lc16k_input", "lc16k_attn", "lc16k_dots"], "lc32k": ["lc32k_attn"]}[which]
    plans = {f: json.loads((P / f"{f}.json").read_text()) for f in files}
    c = next(iter(plans.values()))["config"]
    cfg = llama.LlamaConfig(**c)
t0 = time.perf_counter()
step, args = llama.make_train_step(cfg)
tgt = T.resolve("h200", num_devices=1)
assert tgt.kind == "deviceless", tgt
args = T.args_for(tgt, args)
hw = cm.load_profile("h200")
with T.target_scope(tgt):
    tr = merge_call_sites(trace_step(step, args, split_call_sites=True, backend="cuda", compiler=tgt.description))
    graph = build_graph(tr)
    cost = build_cost_model(tr, graph, hw, allow_offload=True)
    assigns = {}
    for i, names in enumerate(POINTS if which == "sweep" else ()):
        assigns[f"point{i}"] = policy_assignment(graph, step, args, names_policy(names))
by_label = {c.label: c.key for c in graph.classes}
for f, d in plans.items():
    p = next(iter(d["plans"].values()))
    dec = p["decisions"]
    missing = set(dec) - set(by_label)
    assert not missing, missing
    assigns[f] = Assignment.of({by_label[l]: v for l, v in dec.items()})
pickle.dump({"graph": graph, "cost": cost, "assigns": assigns, "cfg": cfg}, open(f"/tmp/hide/{which}.pkl", "wb"))
print(which, "ok", time.perf_counter() - t0)
