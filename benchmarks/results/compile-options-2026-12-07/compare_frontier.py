import json, sys, os, time
sys.path.insert(0, sys.argv[1])
os.chdir(sys.argv[1])
from benchmarks import frontier
out = []
for model, compiler, verify in [("llama3-70b", "local", True), ("llama3-70b", "target", True), ("deepseek-v3-671b-capacity", "target", False)]:
    fig = frontier.plan_in_process(model, "h200", compiler=compiler, verify=verify)
    fig["_case"] = [model, compiler, verify]
    out.append(fig)
    print(model, compiler, verify, fig.get("plan_s"), fig.get("status"), flush=True)
json.dump(out, open(sys.argv[2], "w"))
