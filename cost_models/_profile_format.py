"""The profile file format: each figure an object of its value and its citation, parsed with
its unit; errors that say how to write the field.

Profiles are JSON files (shipped ones in `cost_models/profiles/`). Every figure is written as

    "hbm_bytes_per_s": {"value": "4.8 TB/s", "source": "<datasheet URL and what it says>"}

with its unit spelled out, so a reader can check it against the source and a typo in a unit is an
error rather than a silent factor of a thousand.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping

from ._hiding import HidingError, HidingModel
from ._profile_figures import (
    _FIGURES,
    _LINK_FIGURES,
    _SOURCE_HINT,
    ATTENTION_DIRECTIONS,
    ProfileError,
    _Figure,
)
from ._sharing import LinkSharing
from ._units import FLOP_RATE, UnitError, parse_quantity


def _parse_hiding(raw: object, field: str, where: str, sources: dict[str, str]) -> HidingModel:
    """{"value": {"eta", "capacity", "floor", "form"}, "source": ...}; the source recorded."""
    form = (
        '{"value": {"eta": 0.24, "capacity": "2.66 ms", "floor": 0.0, "form": "eta+capacity"}, '
        f'"source": "{_SOURCE_HINT}"}}'
    )
    if not isinstance(raw, Mapping) or set(raw) != {"value", "source"}:
        raise ProfileError(
            f"{where}: field {field!r} (a calibrated hiding model) must be an object with "
            f"exactly a value and its source, like {form}; got {raw!r:.80}."
        )
    source = raw["source"]
    if not isinstance(source, str) or not source.strip():
        raise ProfileError(
            f"{where}: field {field!r} has an empty source. Every figure needs a citation: {form}."
        )
    try:
        model = HidingModel.from_json(raw["value"], f"{where}: field {field!r}")
    except HidingError as err:
        raise ProfileError(str(err)) from None
    sources[field] = source
    return model


def _parse_shared(raw: object, where: str, sources: dict[str, str]) -> LinkSharing:
    """``link.shared``: {"value": {gpus: {"d2h", "h2d"}}, "source": ...}; the source recorded."""
    if not isinstance(raw, Mapping) or set(raw) != {"value", "source"}:
        raise ProfileError(
            f"{where}: field 'link.shared' (per-GPU host-link rates by GPUs copying at once) must "
            f"be an object with exactly a value and its source; got {raw!r:.80}."
        )
    source = raw["source"]
    if not isinstance(source, str) or not source.strip():
        raise ProfileError(
            f"{where}: field 'link.shared' has an empty source. Every figure needs a citation "
            "(a measurement file, or the published figures an assumed row is made of)."
        )
    sharing = LinkSharing.from_json(raw["value"], where)
    sources["link.shared"] = source
    return sharing


def _parse_attention(
    raw: object, where: str, sources: dict[str, str]
) -> dict[str, dict[int, float]]:
    """{"fwd": {"value": {"4096": "477 TFLOP/s", ...}, "source": ...}, "bwd": {...}}."""
    form = (
        '{"fwd": {"value": {"4096": "477 TFLOP/s", "16384": "546 TFLOP/s"}, '
        f'"source": "{_SOURCE_HINT}"}}, "bwd": {{...}}}}'
    )
    top = _expect_mapping(raw, where, "attention_flops_per_s")
    _check_keys(top, where, "attention_flops_per_s", required=(), optional=ATTENTION_DIRECTIONS)
    out: dict[str, dict[int, float]] = {}
    for d, entry in top.items():
        field = f"attention_flops_per_s.{d}"
        if not isinstance(entry, Mapping) or set(entry) != {"value", "source"}:
            raise ProfileError(
                f"{where}: field {field!r} must be an object with exactly a value (rates by key "
                f"length) and its source, like {form}; got {entry!r:.80}."
            )
        table = _expect_mapping(entry["value"], where, field)
        if not table:
            raise ProfileError(f"{where}: field {field!r} has no rates; write it like {form}.")
        rates: dict[int, float] = {}
        for length, rate in table.items():
            try:
                n = int(length)
                rates[n] = parse_quantity(rate, FLOP_RATE)
            except (UnitError, ValueError) as err:
                raise ProfileError(
                    f"{where}: field {field!r}, key length {length!r}: {err}. Write it like {form}."
                ) from None
        source = entry["source"]
        if not isinstance(source, str) or not source.strip():
            raise ProfileError(
                f"{where}: field {field!r} has an empty source. Every figure needs a citation."
            )
        sources[field] = source
        out[str(d)] = rates
    return out


def _expect_mapping(value: object, where: str, what: str) -> Mapping[str, object]:
    if not isinstance(value, Mapping):
        raise ProfileError(
            f"{where}: {what} must be a JSON object, got {type(value).__name__} {value!r:.60}. "
            "Compare with a shipped profile, e.g. cost_models/profiles/h100-sxm.json."
        )
    return value


def _check_keys(
    obj: Mapping[str, object],
    where: str,
    what: str,
    *,
    required: tuple[str, ...],
    optional: tuple[str, ...] = (),
) -> None:
    known = required + optional
    for key in obj:
        if key not in known:
            close = difflib.get_close_matches(key, known, n=1)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            raise ProfileError(
                f"{where}: unknown field {key!r} in {what}.{hint} Known fields: {', '.join(known)}."
            )
    for key in required:
        if key not in obj:
            figure = next((f for f in _FIGURES + _LINK_FIGURES if f.key == key), None)
            if figure is not None:
                how = (
                    f'Add it as "{key}": {{"value": {figure.example}, "source": "{_SOURCE_HINT}"}}.'
                )
            elif what == "matmul_flops_per_s":
                how = f'Add it as "{key}": {{"value": "989 TFLOP/s", "source": "{_SOURCE_HINT}"}}.'
            else:
                how = "Compare with a shipped profile, e.g. cost_models/profiles/h100-sxm.json."
            raise ProfileError(f"{where}: missing field {key!r} in {what}. {how}")


def _parse_figure(
    figure: _Figure, raw: object, field: str, where: str, sources: dict[str, str]
) -> float:
    """Parse {"value": ..., "source": ...}; record the source; raise ProfileError that teaches."""
    form = f'{{"value": {figure.example}, "source": "{_SOURCE_HINT}"}}'
    if not isinstance(raw, Mapping) or set(raw) != {"value", "source"}:
        raise ProfileError(
            f"{where}: field {field!r} ({figure.what}) must be an object with exactly a value and "
            f"its source, like {form}; got {raw!r:.80}."
        )
    source = raw["source"]
    if not isinstance(source, str) or not source.strip():
        raise ProfileError(
            f"{where}: field {field!r} has an empty source. Every figure needs a citation: {form}."
        )
    value = raw["value"]
    try:
        if figure.kind is not None:
            parsed = parse_quantity(value, figure.kind)
        elif isinstance(value, str | int | float) and not isinstance(value, bool):
            parsed = float(value)
        else:
            raise UnitError(f"{value!r} is not a number")
    except (UnitError, ValueError) as err:
        raise ProfileError(
            f"{where}: field {field!r} ({figure.what}): {err}. Write it like {figure.example}."
        ) from None
    if parsed < 0:
        raise ProfileError(
            f"{where}: field {field!r} ({figure.what}) is negative ({value!r}). "
            f"Write it like {figure.example}."
        )
    sources[field] = source
    return int(parsed) if figure.integer and parsed == int(parsed) else parsed
