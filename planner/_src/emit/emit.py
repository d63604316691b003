"""Stage 5, emit: what the user pastes. The checkpoint policy, the XLA flags, MaxText YAML.

Where every kept tensor of the plan carries a ``checkpoint_name``, the policy is JAX's own
``save_only_these_names`` / ``save_and_offload_only_these_names`` and its source line can be
pasted as plain JAX. Otherwise it is a :class:`PlannerPolicy`, a hashable policy that
matches equations by the same signature the solver decided on.

Layer groups: when the plan decides each call site (layer group) on its own, its class keys
carry the group (``g<group>|<signature>``, graph.class_key) and there is one policy per group,
``policies[g]``, in call order. ``policy`` is then the common policy when every group decided
the same, and None otherwise (``Plan.policy`` raises :class:`LayerGroupsError`, which says
to use ``plan.policies[g]``).
"""

from __future__ import annotations

import dataclasses
import json
import re

from jax.ad_checkpoint import checkpoint_policies as cp

import cost_models as cm
from planner._src.errors import LayerGroupsError
from planner._src.graph import num_groups, split_key
from planner._src.policies import STOCK
from planner._src.types import Assignment, Emitted
from planner._src.xla import adapter

flags_to_compiler_options = cm.flags_to_compiler_options  # (where the CLI and profile find it)

# MaxText's `remat_policy: custom` keys and values (MaxText configs/base.yml, decoder_layer
# remat options): each named tensor is 'remat', 'device' (saved in HBM) or 'offload'.
_MAXTEXT_VALUE = {"save": "device", "remat": "remat", "offload": "offload"}


@dataclasses.dataclass(frozen=True)  # no slots: JAX keeps weak references to policies
class PlannerPolicy:
    """A checkpoint policy deciding by equation signature. Unknown signatures: recompute.

    Hashable and comparable by value, so JAX's caches treat two equal plans as one policy.
    """

    decisions: tuple[tuple[str, str], ...]

    def __call__(self, prim, *avals, **params):
        key = adapter.signature_key(prim, *avals, **params)
        return adapter.to_jax_decision(dict(self.decisions).get(key, "remat"))

    def __repr__(self) -> str:
        kept = [(k, d) for k, d in self.decisions if d != "remat"]
        return f"PlannerPolicy({len(kept)} kept classes)"


def _name_lists(assignment: Assignment, named: dict[str, str]):
    saved, offloaded = [], []
    for key, d in assignment.decisions:
        if d == "save":
            saved.append(named[key])
        elif d == "offload":
            offloaded.append(named[key])
    return sorted(saved), sorted(offloaded)


def policy_for(assignment: Assignment, class_names: dict[str, str | None]):
    """``(policy, python source, names_only)`` for an assignment."""
    kept = {k: d for k, d in assignment.decisions if d != "remat"}
    names_only = all(class_names.get(k) for k in kept)
    if names_only:
        named = {k: class_names[k] for k in kept}
        saved, offloaded = _name_lists(Assignment.of(kept), named)
        if offloaded:
            policy = cp.save_and_offload_only_these_names(
                names_which_can_be_saved=saved,
                names_which_can_be_offloaded=offloaded,
                offload_src=adapter.DEVICE_KIND,
                offload_dst=adapter.HOST_KIND,
            )
            source = (
                "jax.checkpoint_policies.save_and_offload_only_these_names(\n"
                f"    names_which_can_be_saved={saved!r},\n"
                f"    names_which_can_be_offloaded={offloaded!r},\n"
                f"    offload_src={adapter.DEVICE_KIND!r}, offload_dst={adapter.HOST_KIND!r})"
            )
        else:
            policy = cp.save_only_these_names(*saved)
            source = f"jax.checkpoint_policies.save_only_these_names(*{saved!r})"
    else:
        policy = PlannerPolicy(tuple(sorted(kept.items())))
        source = (
            "planner.load_plan('plan.json').policy  # a planner.PlannerPolicy over "
            f"{len(kept)} tensor classes; save it with plan.save('plan.json')"
        )
    return policy, source, names_only


def maxtext_yaml(assignment: Assignment, class_names: dict[str, str | None]) -> str:
    """MaxText ``remat_policy: custom`` block: each named tensor's remat / device / offload.

    MaxText (src/maxtext/configs/base.yml) lists these keys with the values 'remat', 'device'
    and 'offload', and notes that ``decoder_layer_input`` "cannot be rematerialized": it is
    the layer's input, which the scan keeps anyway. A plan that recomputes that name keeps
    the same bytes as saving it, so it is written as 'device'.
    """
    all_names = sorted({n for n in class_names.values() if n})
    decided = {class_names[k]: d for k, d in assignment.decisions if class_names.get(k)}
    lines = ["remat_policy: custom"]
    for n in all_names:
        value = _MAXTEXT_VALUE[decided.get(n, "remat")]
        why = ""
        if n == "decoder_layer_input" and value == "remat":
            value = "device"
            why = (
                "  # the plan recomputes it; MaxText cannot rematerialize the layer's input "
                "(its scan keeps it anyway): the same bytes"
            )
        lines.append(f"{yaml_key(n)}: '{value}'{why}")
    empty = sorted({d for k, d in assignment.decisions if class_names.get(k) == ""})
    if "" in class_names.values():
        lines.append(
            "# a tensor named with checkpoint_name(x, '') (an empty name) has no key here: "
            "MaxText decides tensors by name; the plan "
            + (f"decides it {'/'.join(empty)}" if empty else "recomputes it")
            + " through its policy (name it to configure it)"
        )
    return "\n".join(lines) + "\n"


_PLAIN_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_.\-]*")


def yaml_key(name: str) -> str:
    """``name`` as a YAML mapping key: plain where it is a plain identifier (MaxText's names),
    else a double-quoted scalar (JSON's escapes are YAML's), so a ``checkpoint_name`` with
    ': ', '#', quotes or a newline cannot break the block."""
    plain = _PLAIN_KEY.fullmatch(name) and name.lower() not in _YAML_WORDS
    return name if plain else json.dumps(name)


# Plain scalars YAML reads as booleans or null, not strings (YAML 1.1, PyYAML's default).
_YAML_WORDS = frozenset("true false yes no on off y n null".split())


def group_assignments(assignment: Assignment, class_names: dict[str, str | None]):
    """Per layer group, ``(assignment, class_names)`` keyed by signature, as one group's policy
    sees them. ``[]`` when the plan has no groups (its keys are the signatures already)."""
    n = num_groups(class_names)
    out = [({}, {}) for _ in range(n)]
    for key, name in class_names.items():
        g, sig = split_key(key)
        if g is not None:
            out[g][1][sig] = name
    for key, d in assignment.decisions:
        g, sig = split_key(key)
        if g is not None:
            out[g][0][sig] = d
    return [(Assignment.of(a), names) for a, names in out]


def policies_for(assignment: Assignment, class_names: dict[str, str | None]):
    """``(policy, source, names_only, policies, sources)``: the one policy (None when the layer
    groups decide differently) and the per-group policies (``()`` for a uniform plan)."""
    groups = group_assignments(assignment, class_names)
    if not groups:
        policy, source, names_only = policy_for(assignment, class_names)
        return policy, source, names_only, (), ()
    made = [policy_for(a, names) for a, names in groups]
    names_only = all(m[2] for m in made)
    policies = tuple(m[0] for m in made)
    sources = tuple(m[1].replace(".policy  #", f".policies[{g}]  #") for g, m in enumerate(made))
    same = all(a == groups[0][0] for a, _ in groups)
    if same:
        return policies[0], made[0][1], names_only, policies, sources
    text = "\n".join(
        f"# layer group {g}: jax.checkpoint(layer, policy=policies[{g}])\npolicies[{g}] = {src}"
        for g, src in enumerate(sources)
    )
    return None, text, names_only, policies, sources


def differing_groups_error(assignment: Assignment, class_names: dict[str, str | None]):
    """The teaching error of ``plan.policy`` when the layer groups decide differently."""
    groups = group_assignments(assignment, class_names)
    lines = []
    for g, (a, names) in enumerate(groups):
        kept = [f"{d} {names[k]}" for k, d in a.decisions if d != "remat" and names.get(k)]
        unnamed = sum(1 for k, d in a.decisions if d != "remat" and not names.get(k))
        if unnamed:
            kept.append(f"keep {unnamed} unnamed tensor classes")
        lines.append(f"  group {g}: " + (", ".join(kept) if kept else "recompute everything"))
    return LayerGroupsError(
        f"This plan decides its {len(groups)} layer groups differently, so no single policy "
        "carries it:\n" + "\n".join(lines) + "\n"
        "Why: a jax.checkpoint policy is called as policy(primitive, *avals, **params) and "
        "cannot tell one layer group from another (identical layers look the same to it), so "
        "each group's jax.checkpoint needs its own policy.\n"
        "Fix: wrap the layers of group g (the g-th checkpoint call site, in call order) with "
        "`jax.checkpoint(layer, policy=plan.policies[g])` (examples/llama.py: "
        "LlamaConfig(layer_groups=G, remat_policy=plan.policies)); or plan again with "
        "planner.solve(..., layer_groups=False) for one policy for every layer."
    )


def maxtext_groups_yaml(assignment: Assignment, class_names: dict[str, str | None]) -> str:
    """One ``remat_policy: custom`` block per layer group, each under a comment naming it."""
    groups = group_assignments(assignment, class_names)
    blocks = [
        "# MaxText applies one remat_policy to every decoder layer; this plan decides "
        f"{len(groups)}\n# layer groups separately: give each group (scan) its own block."
    ]
    for g, (a, names) in enumerate(groups):
        blocks.append(f"# layer group {g}\n" + maxtext_yaml(a, names))
    return "\n".join(blocks)


def emit(
    assignment: Assignment,
    class_names: dict[str, str | None],
    hardware,
    *,
    stock: str | None = None,
    host_copies: bool = False,
) -> Emitted:
    """``class_names`` maps class key -> checkpoint name (None for unnamed classes).
    ``stock``: the plan is that stock policy (planner._src.policies.STOCK), handed back as the
    very policy object JAX or MaxText builds, with its own source text. ``host_copies``: the
    step copies to and from pinned host memory for another reason than an offloaded
    activation (train state on the host): it gets the offloading flags too, which are what
    lets any host copy overlap compute on a GPU."""
    offloading = host_copies or any(d == "offload" for _, d in assignment.decisions)
    hw = cm.load_profile(hardware)
    flags = cm.xla_flags_for(hw, offloading=offloading)
    if stock is not None:
        s = STOCK[stock]
        policy, source, names_only, policies, sources = (s.policy(), s.source, True, (), ())
        yaml = (
            f"remat_policy: {stock.removeprefix('maxtext:')}\n"
            if stock.startswith("maxtext:")
            else maxtext_yaml(assignment, class_names)
        )
    else:
        policy, source, names_only, policies, sources = policies_for(assignment, class_names)
        if policies and policy is None:
            yaml = maxtext_groups_yaml(assignment, class_names)
        elif policies:  # every group decided the same: one block for all
            yaml = maxtext_yaml(*group_assignments(assignment, class_names)[0])
        else:
            yaml = maxtext_yaml(assignment, class_names)
    return Emitted(
        policy=policy,
        policy_source=source,
        names_only=names_only,
        xla_flags=cm.format_xla_flags(flags),
        xla_flag_notes=tuple((str(f), f.why, f.source) for f in flags),
        maxtext_yaml=yaml,
        policies=policies,
        policy_sources=sources,
        stock=stock,
    )
