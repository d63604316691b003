"""Regenerate tests/data/gpu_synthetic.xplane.pbtxt: a hand-made GPU trace (XSpace text proto).

    python tests/data/make_gpu_synthetic.py

No GPU was available when the parser was written, so this fixture copies the *structure* XLA's
CUPTI collector writes (xla/backends/profiler/gpu/cupti_collector.cc): a "/device:GPU:0" plane,
lines named "Stream #<id>(<event types>)", memcpy events named "MemcpyD2H" / "MemcpyH2D" /
"MemcpyD2D" with a "memcpy_details" stat ("kind_src:device kind_dst:pinned size:..."), kernel
events with "hlo_op" / "hlo_module" stats from XLA's annotations, and an "XLA Modules" line.
The times are chosen so the figures can be worked out by hand (tests/test_profile.py).
Two identical steps, 100 us each, at 0 and 200 us (times below in us from the base):

  Stream #7(Kernel)        compute A [0,40), device dynamic-slice fusion [40,45), B [50,90)
  Stream #20(MemcpyD2H,..) MemcpyD2H device->pinned [30,60); MemcpyH2D (no details) [85,95)
  Stream #21(Kernel)       host DUS kernel, hlo_op dynamic-update-slice-start.1, [92,98)
  Stream #22(MemcpyD2D)    MemcpyD2D device->device [10,20)
  one stray kernel at [150,160), outside both steps.
"""

import os

HERE = os.path.dirname(os.path.abspath(__file__))
BASE_NS = 1_000_000_000

STATS = {"hlo_op": 1, "hlo_module": 2, "memcpy_details": 3, "correlation_id": 4}
REFS = {
    "kind_src:device kind_dst:pinned size:1048576 dest:0 async:1": 10,
    "kind_src:device kind_dst:device size:4096 dest:0 async:1": 11,
}
EVENTS = {
    "sm90_xmma_gemm_bf16": 1,
    "loop_dynamic_slice_fusion": 2,
    "loop_multiply_fusion": 3,
    "MemcpyD2H": 4,
    "MemcpyH2D": 5,
    "MemcpyD2D": 6,
    "wrapped_dynamic_update_slice": 7,
    "jit_step(42)": 8,
    "planner_profile_step": 9,
}


def step_events(t0):
    """(line, event, start_us, end_us, stats) of one step starting at t0 us."""
    return [
        (7, "sm90_xmma_gemm_bf16", t0 + 0, t0 + 40, {"hlo_op": "custom-call.3"}),
        (
            7,
            "loop_dynamic_slice_fusion",
            t0 + 40,
            t0 + 45,
            {"hlo_op": "dynamic-slice_bitcast_fusion.3"},
        ),
        (7, "loop_multiply_fusion", t0 + 50, t0 + 90, {"hlo_op": "loop_multiply_fusion.2"}),
        (
            20,
            "MemcpyD2H",
            t0 + 30,
            t0 + 60,
            {"memcpy_details": REFS["kind_src:device kind_dst:pinned size:1048576 dest:0 async:1"]},
        ),
        (20, "MemcpyH2D", t0 + 85, t0 + 95, {}),
        (
            21,
            "wrapped_dynamic_update_slice",
            t0 + 92,
            t0 + 98,
            {"hlo_op": "dynamic-update-slice-start.1"},
        ),
        (
            22,
            "MemcpyD2D",
            t0 + 10,
            t0 + 20,
            {"memcpy_details": REFS["kind_src:device kind_dst:device size:4096 dest:0 async:1"]},
        ),
    ]


def stat(key, value):
    if isinstance(value, int) and key == "memcpy_details":
        return f"stats {{ metadata_id: {STATS[key]} ref_value: {value} }}"
    if isinstance(value, int):
        return f"stats {{ metadata_id: {STATS[key]} int64_value: {value} }}"
    return f'stats {{ metadata_id: {STATS[key]} str_value: "{value}" }}'


def event(name, start_us, end_us, stats):
    body = " ".join(
        [
            f"metadata_id: {EVENTS[name]}",
            f"offset_ps: {int(start_us * 1e6)}",
            f"duration_ps: {int((end_us - start_us) * 1e6)}",
        ]
        + [stat(k, v) for k, v in stats.items()]
    )
    return f"    events {{ {body} }}"


def main():
    evs = step_events(0) + step_events(200)
    evs.append((7, "loop_multiply_fusion", 150, 160, {"hlo_op": "loop_multiply_fusion.9"}))
    names = {
        7: "Stream #7(Kernel)",
        20: "Stream #20(MemcpyD2H,MemcpyH2D)",
        21: "Stream #21(Kernel)",
        22: "Stream #22(MemcpyD2D)",
    }
    out = ["planes {", "  id: 1", '  name: "/device:GPU:0"']
    for lid, lname in names.items():
        out.append(
            f'  lines {{ id: {lid} display_id: {lid} name: "{lname}" timestamp_ns: {BASE_NS}'
        )
        out += [event(n, s, e, st) for li, n, s, e, st in evs if li == lid]
        out.append("  }")
    out.append(f'  lines {{ id: 100 display_id: 100 name: "XLA Modules" timestamp_ns: {BASE_NS}')
    out += [event("jit_step(42)", t, t + 100, {"hlo_module": "jit_step"}) for t in (0, 200)]
    out.append("  }")
    for name, i in EVENTS.items():
        out.append(f'  event_metadata {{ key: {i} value {{ id: {i} name: "{name}" }} }}')
    for name, i in list(STATS.items()) + list(REFS.items()):
        out.append(f'  stat_metadata {{ key: {i} value {{ id: {i} name: "{name}" }} }}')
    out.append("}")
    # A host plane with the step annotations, shifted by 5 us: unused when XLA Modules exist.
    out += [
        "planes {",
        "  id: 2",
        '  name: "/host:CPU"',
        f'  lines {{ id: 1 display_id: 1 name: "python" timestamp_ns: {BASE_NS}',
    ]
    out += [event("planner_profile_step", t - 5, t + 105, {}) for t in (0, 200)]
    out.append("  }")
    out.append('  event_metadata { key: 9 value { id: 9 name: "planner_profile_step" } }')
    out.append("}")
    with open(os.path.join(HERE, "gpu_synthetic.xplane.pbtxt"), "w") as f:
        f.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
