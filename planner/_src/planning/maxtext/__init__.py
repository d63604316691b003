"""MaxText's own train step, planned: from a MaxText config to ``remat_policy: custom``.

    mt = planner.plan_maxtext("my.yml", ["per_device_batch_size=4"], hbm_gb=80, hardware="h200")
    print(mt.report())          # the planner's report, then MaxText's own verify compile
    mt.override_args()          # ["remat_policy=custom", "mlpwi_0=device", ...]
    mt.yaml()                   # the same as a YAML block

What it does, in order:

1. **Build** MaxText's train step from its config the way MaxText's AOT compile does
   (``maxtext/trainers/pre_train/train_compile.py``: ``get_shaped_inputs`` and
   ``jit_and_compile``): ``pyconfig.initialize`` on the config and the overrides, the mesh from
   ``maxtext_utils.get_mesh_from_config`` (MaxText's own sharding from its ``ici_*`` /
   ``dcn_*`` settings: every figure is per device), the abstract ``TrainStateNNX`` and its
   shardings from ``maxtext_utils.get_abstract_state``, the batch from ``get_shaped_batch``,
   and ``jax.jit(train_step, in_shardings, out_shardings, donate_argnums=0)`` from
   ``get_functional_train_with_signature``, traced inside the mesh and MaxText's logical-axis
   rules. No array is allocated. The step is built with ``remat_policy=full``, so every
   decoder layer (scanned or not, dense and MoE scans of DeepSeek alike) is one MaxText
   ``jax.checkpoint`` call site, whose policy the planner controls while it traces.
2. **Plan** it with ``PlanOptions(decide_names=<MaxText's custom keys>, layer_groups=False)``:
   the planner decides only the tensors MaxText's ``remat_policy: custom`` can name; every
   other tensor (unnamed, or named with a name MaxText's custom list does not carry) is
   forced to be recomputed, because MaxText's custom policy is
   ``save_and_offload_only_these_names(tensors_on_device, tensors_to_offload)`` and saves
   nothing else (``layers/nnx_decoders.py``, ``get_remat_policy``). The keys are read from
   the installed MaxText, not copied: the names its config validator turns into
   ``tensors_on_device`` when set to ``device`` (``configs/types.py``). MaxText applies one
   policy to every decoder layer, hence one decision for all layers.
3. **Write** the overrides: ``remat_policy=custom`` and every key as ``remat`` / ``device`` /
   ``offload`` (``decoder_layer_input`` never ``remat``: base.yml says it "cannot be
   rematerialized"; the layer input is kept by the checkpoint anyway, so ``device`` costs
   nothing more).
4. **Verify** them through MaxText: the step is built again from the config with those
   overrides applied by ``pyconfig`` (MaxText's own ``get_remat_policy`` builds the policy;
   the planner's policy object plays no part) and compiled on the planner's verifying
   compiler with ``compile_xla_flags`` as compiler options, as ``train_compile`` does. The
   verified figure is ``argument + output - alias + temp`` of ``memory_analysis()``; it must
   be within the budget the plan was held to.

MaxText's GPU settings are inputs: ``XLA_PYTHON_CLIENT_MEM_FRACTION`` (JAX's allocator takes
that fraction of HBM, 0.75 where unset) caps the budget at fraction x the profile's HBM, and
``XLA_FLAGS`` (MaxText's GPU scripts set ``--xla_disable_hlo_passes=rematerialization``) is
read by every compile of this process, the planner's anchors, its verify compiles and the
MaxText compile alike, so the plan is budgeted and verified under the same flags; both are
listed in the report. Start the process with the environment MaxText's training runs in.

Needs ``pip install "jax-offload-planner[maxtext]"`` (MaxText 0.2.5 and its dependencies,
Python >= 3.12).

The package, one job a module:

* ``config.py``: MaxText imported, its config read with ``pyconfig`` (the overrides, the
  quiet keys), the ``remat_policy: custom`` keys it honours (1, 2);
* ``step.py``: MaxText's train step built from the config as ``train_compile`` builds it (1);
* ``settings.py``: the GPU settings of the environment and the budget they allow;
* ``result.py``: :class:`MaxTextPlan`, the custom-remat block (3) and its verification
  record (4);
* ``planner.py``: :class:`MaxTextPlanner` and :func:`plan_maxtext`, the steps in order.
"""

from planner._src.planning.maxtext.planner import MaxTextPlanner, plan_maxtext
from planner._src.planning.maxtext.result import MaxTextPlan

__all__ = ["MaxTextPlan", "MaxTextPlanner", "plan_maxtext"]
