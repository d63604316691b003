"""Every snippet the quickstart's report prints, executed as printed against the example
model, with JAX's own saved-residuals list (``print_saved_residuals``) as the judge: the
apply line, the policy to paste, the XLA_FLAGS line and the MaxText block, in the text
report and in the Markdown one."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import io
import re
import shutil
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest
from jax.ad_checkpoint import print_saved_residuals

import planner
from examples import llama
from planner._src.emit.paste import paste_snippets
from planner._src.xla import adapter

pytestmark = pytest.mark.slow  # plans the quickstart (about 30 s on a laptop CPU)

USER_FLAG = "--xla_cpu_enable_fast_math=false"  # a flag of the user's, to keep


@pytest.fixture(scope="module")
def quickstart(tmp_path_factory):
    """The README's quickstart, as ``python -m planner solve examples.llama:quickstart
    --hbm-gb 0.42 --hardware h200 --save plan.json`` runs it."""
    step, args = llama.quickstart()
    plan = planner.solve(step, *args, hbm_gb=0.42, hardware="h200")
    path = tmp_path_factory.mktemp("qs") / "plan.json"
    plan.save(path)
    return plan, str(path)


def _loss(policy=None):
    """The quickstart model's loss with ``policy`` edited into its ``jax.checkpoint``
    (None: as written), and its (abstract) arguments."""
    cfg = (
        llama.QUICKSTART
        if policy is None
        else dataclasses.replace(llama.QUICKSTART, remat_policy=policy)
    )
    _, (state, batch) = llama.make_train_step(cfg)
    return llama.lm_loss(functools.partial(llama.forward, cfg)), (state["params"], batch)


def _residuals(f, args):
    return sorted(adapter.saved_residuals(f, *args))


def _text_sections(text: str) -> dict[str, str]:
    """The report's '--- title:' sections, by title."""
    parts = re.split(r"^---(?: (.+?):)?$", text, flags=re.M)
    return {parts[i]: parts[i + 1].strip("\n") for i in range(1, len(parts) - 1, 2) if parts[i]}


def _md_blocks(md: str, lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", md, flags=re.S)


def _python_snippets(plan, path) -> list[str]:
    text = _text_sections(plan.report(plan_file=path))
    printed = [v for k, v in text.items() if k.endswith("(Python)")]
    md = _md_blocks(plan.report("markdown", plan_file=path), "python")
    assert len(printed) == 2 and md == [s + "\n" for s in printed]
    return printed


def test_every_python_snippet_runs_as_printed_and_keeps_what_the_plan_keeps(quickstart):
    plan, path = quickstart
    loss, args = _loss()
    want = _residuals(plan.apply(loss, check=False), args)
    assert want != _residuals(loss, args)  # the plan changes what is kept
    apply_src, paste_src = _python_snippets(plan, path)
    # the apply line, with the user's step named as in the snippet: it runs as printed on
    # the step it was planned for (its fingerprint check passes), and the plan file it
    # loads keeps what the plan keeps (the check is for the step, so the loss that the
    # residuals are read from is applied with check=False)
    step, step_args = llama.quickstart()
    scope = {"train_step": step}
    exec(apply_src, scope)  # noqa: S102 (the snippet is what users paste)
    jax.jit(scope["train_step"]).lower(*step_args)
    assert "load_plan(" in apply_src
    assert _residuals(planner.load_plan(path).apply(loss, check=False), args) == want
    # the policy to paste next to jax.checkpoint: the model edited with it
    scope = {}
    exec(paste_src, scope)  # noqa: S102
    edited, edited_args = _loss(scope["policy"])
    assert _residuals(edited, edited_args) == want


def test_the_xla_flags_line_runs_and_keeps_the_users_flags(quickstart):
    plan, _ = quickstart
    sh = shutil.which("sh")
    if sh is None:
        pytest.skip("no POSIX shell to run the line")
    printed = _text_sections(plan.report())["XLA flags (shell, before training starts)"]
    assert printed == paste_snippets(plan)["xla_flags"].rstrip("\n")
    assert _md_blocks(plan.report("markdown"), "bash") == [printed + "\n"]
    flags = "--xla_gpu_enable_latency_hiding_scheduler=true"
    with_flags = dataclasses.replace(
        plan, emitted=dataclasses.replace(plan.emitted, xla_flags=flags)
    )
    for p, line in ((plan, printed), (with_flags, paste_snippets(with_flags)["xla_flags"])):
        out = subprocess.run(
            [sh, "-c", f'export XLA_FLAGS="{USER_FLAG}"\n{line}\nprintf %s "$XLA_FLAGS"'],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        assert out == (USER_FLAG + (" " + p.xla_flags if p.xla_flags else ""))
    # XLA starts with the quickstart's line (a flag XLA does not know aborts the process)
    env_line = f'export XLA_FLAGS="{USER_FLAG}"\n{printed}\n'
    run = subprocess.run(
        [sh, "-c", env_line + f'"{sys.executable}" -c "import jax; jax.numpy.ones(1)"'],
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stderr[-2000:]


def test_the_maxtext_block_parses_and_says_it_is_partial(quickstart):
    yaml = pytest.importorskip("yaml")
    plan, _ = quickstart
    printed = _text_sections(plan.report())["MaxText"]
    assert printed == paste_snippets(plan)["maxtext"].rstrip("\n")
    assert _md_blocks(plan.report("markdown"), "yaml") == [printed + "\n"]
    block = yaml.safe_load(printed)
    assert block.pop("remat_policy") == "custom"
    names = {c.name for c in plan.graph.classes if c.name}
    assert block and set(block) <= names
    assert set(block.values()) <= {"remat", "device", "offload"}
    if not all(c.name for c in plan.graph.classes if plan.assignment.get(c.key) != "remat"):
        assert printed.startswith("# Partial")


def test_status_block_and_rows_a_user_can_map_to_code(quickstart):
    from planner._src.results.report import build_report
    from planner._src.results.report.model import NOT_READ
    from planner._src.units import fmt_bytes

    plan, path = quickstart
    r = build_report(plan, path)
    lines = r.status_lines
    first = {}
    for what, text in lines:
        first.setdefault(what, text)
    assert first["compiled by"].startswith(plan.compiler)
    # XLA:CPU (no CUDA plugin): marked as not the target's; XLA:GPU for H200: the target's
    assert ("not the target's" in first["compiled by"]) == (not plan.compiler_exact)
    assert ("(the target's compiler)" in first["compiled by"]) == plan.compiler_exact
    assert first["budget"].startswith(f"{fmt_bytes(plan.budget_bytes)} as given")
    usable = plan.budget_bytes - plan.headroom_bytes
    assert first["planned to"].startswith(fmt_bytes(usable)) and len(first["planned to"]) < 120
    compiled = plan.verification.compiled_device_bytes
    assert first["compiled"].startswith(fmt_bytes(compiled))
    assert ("fits" if compiled <= usable else "OVER") in first["compiled"]
    checks = [t for w, t in lines if w == "check"]
    assert len(checks) == len(plan.verification.checks)
    if plan.prediction.host_bytes == 0:  # a check that cannot fail is not shown as passed
        assert not any("host memory" in c for c in checks)
    text = plan.report()
    assert all(f"{w} {t}"[:60] in text for w, t in lines if w != "check")
    for row in r.rows:
        assert row.members >= 1 and row.jax_label.split(" ")[0].endswith("]")
        assert "examples/llama.py:" in row.source, row.source  # the user's frame
        assert f"{row.recompute_ms:.3f} ms" in row.reason or (
            row.reason == NOT_READ and row.name and not row.nbytes_per_step
        )


def _printed_residuals(f, *args) -> set[str]:
    """The lines ``print_saved_residuals(f, *args)`` prints."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        print_saved_residuals(f, *args)
    return set(out.getvalue().splitlines())


def test_decision_labels_are_what_print_saved_residuals_prints(quickstart):
    """Each decision row's label, string for string, is a line JAX prints for the layer
    (the region's body) under a policy that keeps that row: the plan's policy for the kept
    rows, a policy keeping that row's class alone for the recomputed ones."""
    from planner._src.emit.emit import PlannerPolicy
    from planner._src.results.report import build_report
    from planner._src.results.report.model import NOT_READ

    plan, _ = quickstart
    rows = build_report(plan).rows
    cfg = llama.QUICKSTART
    _, (state, _) = llama.make_train_step(cfg)
    layer = jax.tree.map(
        lambda w: jax.ShapeDtypeStruct(w.shape[1:], w.dtype), state["params"]["layers"]
    )
    args = (
        jax.ShapeDtypeStruct((cfg.batch, cfg.seq, cfg.d_model), jnp.float32),
        layer,
        jax.ShapeDtypeStruct((cfg.batch, cfg.seq), jnp.int32),
    )

    def printed(policy):
        f = jax.checkpoint(functools.partial(llama.decoder_layer, cfg), policy=policy)
        return _printed_residuals(f, *args)

    kept = [r for r in rows if r.decision != "remat"]
    assert kept and len(kept) < len(rows)
    under_plan = printed(plan.policy)
    for row in kept:
        assert row.jax_label in under_plan, row.jax_label
    signature = {c.label: c.signature for c in plan.graph.classes}
    plan_kept = tuple((signature[r.label], r.decision) for r in kept)
    for row in rows:
        if row.decision == "remat":
            if row.reason == NOT_READ:
                # "not a residual under this plan": kept on top of the plan's own decisions,
                # JAX still keeps no such tensor (kept alone it may be: a recompute the plan
                # saves instead would read it; seen 2026-12-04 for query_proj, read by the
                # rotary embedding the plan keeps)
                also = printed(PlannerPolicy((*plan_kept, (signature[row.label], "save"))))
                assert row.jax_label not in also, row.jax_label
            else:
                alone = printed(PlannerPolicy(((signature[row.label], "save"),)))
                assert row.jax_label in alone, row.jax_label
    # JAX's own functions (jax.nn.silu) are named as JAX names them, at the user's line
    silu = [r for r in rows if "jitted function 'silu'" in r.jax_label]
    silu_line = next(
        n
        for n, text in enumerate(Path(llama.__file__).read_text().splitlines(), 1)
        if "jax.nn.silu(" in text
    )
    assert silu and all(f"examples/llama.py:{silu_line}:" in r.source for r in silu)
