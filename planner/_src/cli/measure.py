"""The commands that measure a device: calibrate (a hardware profile of this machine) and
profile (a plan run under the profiler on a GPU)."""

from __future__ import annotations

import json

from planner._src.cli.common import (
    EXIT_NO_GPU,
    Progress,
    call_factory,
    import_factory,
    profile_names,
)


def _profile_summary(profile, out: str | None) -> str:
    """The figures calibrate measures, one per line, in the units of datasheets."""
    link = profile.link
    rates = ", ".join(f"{k} {v / 1e12:.3g} TFLOP/s" for k, v in profile.matmul_flops_per_s)
    lines = [
        f"profile {profile.name}: {profile.description}",
        f"  matmul: {rates}",
        f"  vector: {profile.vector_flops_per_s / 1e12:.3g} TFLOP/s",
        f"  HBM: {profile.hbm_bytes_per_s / 1e9:.3g} GB/s",
        f"  kernel launch: {profile.kernel_launch_s * 1e6:.3g} us",
        f"  host link: d2h {link.d2h_bytes_per_s / 1e9:.3g} GB/s, h2d "
        f"{link.h2d_bytes_per_s / 1e9:.3g} GB/s",
        f"  overlap efficiency: {profile.overlap_efficiency:.2f}",
    ]
    for d in ("d2h", "h2d"):  # the calibrated per-direction hiding models, where measured
        h = getattr(link, f"{d}_hiding", None)
        if h is not None:
            cap = "none" if h.capacity_s == float("inf") else f"{h.capacity_s * 1e3:.3g} ms"
            lines.append(
                f"  {d} hiding ({h.form}): eta {h.eta:.3f}, capacity {cap} per trip, "
                f"floor {h.floor:.2f}"
            )
    if out:
        lines.append(f"written to {out}; plan with it: --hardware {out}")
    return "\n".join(lines) + "\n"


def cmd_calibrate(a) -> int:
    import cost_models as cm  # deferred: --help answers without importing JAX

    with Progress(a.quiet) as progress:
        progress("measuring the default JAX device (matmuls, memory, host link)")
        profile = cm.calibrate(
            out_path=a.out,
            base=a.base,
            sizes_mb=tuple(a.sizes_mb),
            repeats=a.repeats,
            matmul_n=a.matmul_n,
        )
    if a.json:
        print(json.dumps(profile.to_json(), indent=2))
    else:
        print(_profile_summary(profile, a.out), end="")
    return 0


def cmd_profile(a) -> int:
    """Run the ``profile`` subcommand: 0 measured, 1 nothing measured (no host copies in
    the trace), EXIT_NO_GPU where JAX sees no GPU (checked before planning).

    Planner errors propagate (``python -m planner`` prints them and exits 2)."""
    import json
    import sys

    import planner  # deferred: --help answers without importing JAX
    from planner._src.errors import (
        InvalidArgumentError,
    )  # deferred: --help answers without importing JAX

    if (a.hbm_gb is None) == (a.plan is None):
        raise InvalidArgumentError(
            "give exactly one of --hbm-gb N (plan now) or --plan FILE "
            "(a saved plan).\nFix: e.g. --hbm-gb 0.42."
        )
    no_gpu = _no_gpu(a)
    if no_gpu:  # before planning: minutes of work whose profile would measure nothing
        print(no_gpu, file=sys.stderr)
        return EXIT_NO_GPU
    factory = import_factory(
        a.factory, "FACTORY(policy) -> (step_fn, args), e.g. examples.llama:profile_quickstart"
    )
    if a.plan:
        plan = planner.load_plan(a.plan)
    else:
        step0, args0 = call_factory(a.factory, factory, None)
        print(f"planning {a.factory} for {a.hardware} under {a.hbm_gb} GB ...", file=sys.stderr)
        plan = planner.solve(step0, *args0, hbm_gb=a.hbm_gb, hardware=a.hardware)
    step, args = call_factory(a.factory, factory, plan.policy)
    print(f"profiling {a.steps} steps ...", file=sys.stderr)
    result = planner.profile(plan, step, *args, steps=a.steps, warmup=a.warmup, logdir=a.logdir)
    data = result.to_json()
    print(json.dumps(data, indent=2) if a.json else result.summary())
    if a.out:
        with open(a.out, "w") as f:
            json.dump(data, f, indent=2)
    if result.measured and a.png:
        result.timeline_png(a.png)
    if result.measured and a.measured_profile:
        from cost_models._trace_overlap import (
            overlap_from_trace,
        )  # deferred: --help answers without importing JAX

        hw = getattr(plan, "hardware", None)
        hw = overlap_from_trace(result, hw if hw is not None else a.hardware)
        with open(a.measured_profile, "w") as f:
            json.dump(hw.to_json(), f, indent=2)
    return 0 if result.measured else 1


def _no_gpu(a) -> str:
    """The error ``profile`` prints where JAX sees no GPU ("" where it sees one)."""
    import jax

    backend = jax.default_backend()
    if backend != "cpu":
        return ""
    devices = ", ".join(str(d) for d in jax.devices()[:4])
    hardware = a.hardware if a.hardware != "cpu" else "h200"  # a GPU's profile
    return (
        f"error: nothing to profile here: JAX on this machine runs on the {backend} backend "
        f"({devices}), with no GPU; nothing was planned or run.\n"
        "Why: profile measures a GPU: how long the plan's device<->host copies take and how "
        "much of them the GPU's compute hides. The CPU backend has no separate host memory or "
        "copy engines, so there is nothing to measure.\n"
        "Fix: run the same command on the GPU machine (python -c 'import jax; "
        "print(jax.devices())' should list the GPUs; if it lists only CPUs there, install "
        'JAX\'s CUDA plugin: pip install -U "jax[cuda13]"); or, to plan here without '
        f"measuring, use a shipped profile of that GPU: python -m planner solve {a.factory} "
        f"--hbm-gb {'N' if a.hbm_gb is None else f'{a.hbm_gb:g}'} --hardware {hardware} "
        f"(profiles: {', '.join(profile_names())})."
    )
