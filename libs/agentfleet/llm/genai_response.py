"""google-genai's pruning of unknown response fields, planned once per model class.

Before validating an answer, ``BaseModel._from_response`` drops every key no model field
knows (forward compatibility) with ``_common._remove_extra_fields``, which, for each key of
each nested object, rebuilds the model's alias map and re-reads the field's annotation:
about 0.1 ms of every model call. :func:`prune_extra_fields` makes the same decisions from a
plan computed once per model class (the annotations of a built model do not change), so
:class:`~agentfleet.llm.genai_fast.FastGenerate` prunes with it and then lets the SDK's
``_from_response`` do the rest with its own pruning switched off.

Mirrors google-genai 3.4's ``_remove_extra_fields`` decision for decision;
``tests/unit/test_genai_response.py`` compares the two on answers with unknown fields at
every level, and the fast path's self-check (:mod:`agentfleet.llm.genai_selfcheck`) on a
sample answer with unknown fields before any model client uses it. Worth about 0.04-0.14 ms
of CPU per model call (``bench/genai_calls.py``, against the SDK's pruning).
"""

from __future__ import annotations

import typing
from dataclasses import dataclass
from typing import Any, Union

import pydantic
from google.genai import _common


@dataclass(frozen=True, slots=True)
class _Field:
    """What the pruning does below one known key of a model."""

    model: type[pydantic.BaseModel] | None
    """Prune a dict value as this model."""
    items: type[pydantic.BaseModel] | None
    """Prune the dict items of a list value as this model (None: leave the list alone)."""


_PLANS: dict[type[pydantic.BaseModel], dict[str, _Field]] = {}


def _plan(model: type[pydantic.BaseModel]) -> dict[str, _Field]:
    """The known keys of ``model`` (field names and aliases, an alias winning a clash as
    in the SDK) and what happens below each."""
    plan = _PLANS.get(model)
    if plan is not None:
        return plan
    # As the SDK does first: a model built on first use still has string annotations.
    model.model_rebuild(raise_errors=False)
    fields = model.model_fields
    names = {name: name for name in fields}
    names.update({f.alias: name for name, f in fields.items() if f.alias is not None})
    plan = {key: _field(fields[name].annotation) for key, name in names.items()}
    _PLANS[model] = plan
    return plan


def _field(annotation: Any) -> _Field:
    if typing.get_origin(annotation) is Union:
        annotation = typing.get_args(annotation)[0]
    if _common._is_struct_type(annotation):
        items = None
    else:
        args = typing.get_args(annotation)
        items = _common._as_base_model_type(args[0] if args else None)
    return _Field(model=_common._as_base_model_type(annotation), items=items)


def prune_extra_fields(model: type[pydantic.BaseModel], response: dict[str, Any]) -> None:
    """Removes, in place, the keys of ``response`` (and of its nested objects) that
    ``model`` does not know: what ``_common._remove_extra_fields`` does."""
    plan = _plan(model)
    for key, value in list(response.items()):
        known = plan.get(key)
        if known is None:
            del response[key]
        elif isinstance(value, dict):
            if known.model is not None:
                prune_extra_fields(known.model, value)
        elif isinstance(value, list) and known.items is not None:
            for item in value:
                if isinstance(item, dict):
                    prune_extra_fields(known.items, item)
