"""Outputs people paste: the plan as a Python policy line, a shell line and a MaxText block.

``paste_snippets(plan)`` returns three self-contained texts, each ready to copy into the
place it belongs (model code, launch script, MaxText config), so nobody has to re-type a
list of names from a report:

* ``"python"``: the imports and ``policy = ...``; plain JAX
  (``jax.checkpoint_policies.save_only_these_names`` / ``save_and_offload_only_these_names``)
  when every kept tensor is named, else the plan file's ``PlannerPolicy``;
* ``"xla_flags"``: ``export XLA_FLAGS="${XLA_FLAGS:+$XLA_FLAGS }..."`` (yours kept; or a
  comment saying none are needed);
* ``"maxtext"``: the ``remat_policy: custom`` YAML block, each named tensor ``remat``,
  ``device`` or ``offload`` as MaxText's configs/base.yml expects.

Works on a :class:`planner.Plan` and on a :class:`planner.SavedPlan` read from a file.
"""

from __future__ import annotations

from planner._src.emit.emit import policies_for  # a SavedPlan: recompute from its assignment

PLAN_FILE = "plan.json"


def _emitted(plan):
    """``(policy or None, source, names_only, per-group policies, per-group sources)``."""
    emitted = getattr(plan, "emitted", None)
    if emitted is not None:
        return (
            emitted.policy,
            emitted.policy_source,
            bool(emitted.names_only),
            emitted.policies,
            emitted.policy_sources,
        )

    return policies_for(plan.assignment, dict(plan.class_names))


def _names_only(plan) -> bool:
    return _emitted(plan)[2]


def _policy_source(plan) -> str:
    return _emitted(plan)[1]


def _groups_differ(plan) -> bool:
    policy, _, _, policies, _ = _emitted(plan)
    return policy is None and bool(policies)


def python_snippet(plan, plan_file: str = PLAN_FILE) -> str:
    """``import ...`` and ``policy = ...``: paste next to your ``jax.checkpoint`` call.

    Names-only plans become JAX's own name policies, which need nothing but JAX. Plans that
    keep unnamed tensors need the plan file (the policy matches equation signatures), so the
    snippet loads it; save it first with ``plan.save(plan_file)``.
    """
    if _groups_differ(plan):
        sources = _emitted(plan)[4]
        use = (
            "# layer groups: one policy per checkpoint call site, in call order; use them as\n"
            "# jax.checkpoint(layer, policy=policies[g]) for the layers of group g\n"
        )
        if _names_only(plan):
            body = "".join(
                f"    {src.replace(chr(10), chr(10) + '    ')},  # layer group {g}\n"
                for g, src in enumerate(sources)
            )
            return "import jax\n\n" + f"policies = (\n{body})\n" + use
        return (
            "import planner\n\n"
            f"# keeps unnamed tensors, so it needs the plan file: plan.save({plan_file!r})\n"
            f"policies = planner.load_plan({plan_file!r}).policies\n" + use
        )
    if _names_only(plan):
        return (
            "import jax\n\n"
            f"policy = {_policy_source(plan)}\n"
            "# use it as: jax.checkpoint(layer, policy=policy)\n"
        )
    return (
        "import planner\n\n"
        f"# keeps unnamed tensors, so it needs the plan file: plan.save({plan_file!r})\n"
        f"policy = planner.load_plan({plan_file!r}).policy\n"
        "# use it as: jax.checkpoint(layer, policy=policy)\n"
    )


def _shell_double_quote(text: str) -> str:
    """``text`` inside double quotes for POSIX shells (escapes \\, ", $ and `)."""
    for ch in ("\\", '"', "$", "`"):
        text = text.replace(ch, "\\" + ch)
    return f'"{text}"'


def xla_flags_snippet(plan) -> str:
    """A shell line setting ``XLA_FLAGS`` before the training process starts.

    XLA reads the variable once, when the backend initialises, so setting it inside a
    running Python process after ``import jax`` has used the device does nothing. The line
    appends to the flags already set (yours stay; the plan's come last, so they win where
    both set one).
    """
    flags = (plan.xla_flags or "").strip()
    if not flags:
        return "# this plan needs no XLA flags: leave XLA_FLAGS as it is\n"
    quoted = _shell_double_quote(flags)[1:-1]
    return f'export XLA_FLAGS="${{XLA_FLAGS:+$XLA_FLAGS }}{quoted}"\n'


def maxtext_snippet(plan) -> str:
    """The MaxText ``remat_policy: custom`` block, with a warning comment where it is partial.

    MaxText decides tensors by ``checkpoint_name`` only; when the plan also keeps unnamed
    tensors the block is the closest MaxText can express, and the comment says so.
    """
    block = plan.maxtext_yaml
    named = [
        ln
        for ln in block.splitlines()
        if ln.strip() and not ln.lstrip().startswith("#") and not ln.startswith("remat_policy")
    ]
    if not named:
        return (
            "# No MaxText block: MaxText's remat_policy: custom decides tensors by their\n"
            "# checkpoint_name, and this model names none. Name them (jax.ad_checkpoint.\n"
            "# checkpoint_name) to get one, or use plan.apply / the Python policy.\n"
        )
    if _names_only(plan):
        return block
    return (
        "# Partial: this plan also keeps tensors without a checkpoint_name, which MaxText's\n"
        "# remat_policy: custom cannot name; the block below sets only the named ones.\n" + block
    )


def apply_snippet(plan, plan_file: str = PLAN_FILE) -> str:
    """The route without editing the model: the saved plan applied to the step."""
    return (
        "import planner\n\n"
        f"# no model edits: every checkpoint region gets the plan's policy (plan.save({plan_file!r}))\n"
        f"train_step = planner.load_plan({plan_file!r}).apply(train_step)\n"
    )


def paste_snippets(plan, plan_file: str = PLAN_FILE) -> dict[str, str]:
    """``{"python", "xla_flags", "maxtext"}``: the three texts users paste (module docstring)."""
    return {
        "python": python_snippet(plan, plan_file),
        "xla_flags": xla_flags_snippet(plan),
        "maxtext": maxtext_snippet(plan),
    }
