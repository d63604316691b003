"""Stage 5, emit: what the user pastes or applies, from a solved plan.

- ``emit.py``: the checkpoint policy (one, or one per layer group), the XLA flags and the
  MaxText YAML of an assignment (``Emitted``);
- ``paste.py``: those as self-contained snippets to paste (Python, shell, MaxText);
- ``apply.py``: ``plan.apply(step_fn)``, the step under the plan's policies per call site,
  without editing the model.
"""
