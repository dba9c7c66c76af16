"""A minimal kustomize for the tests: renders ``deploy/k8s`` overlays without kubectl.

It implements only what our kustomizations use, and refuses anything else, so a manifest
that needs more cannot pass unnoticed: ``resources`` (files and kustomization folders),
``namespace``, and ``patches`` given by ``path`` (optionally with a ``target`` of kind and
name) as either a strategic-merge patch (a mapping: maps merge, lists of named items merge
by name, other lists are replaced) or a JSON 6902 patch (a list of add/replace/remove ops).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

SUPPORTED_KEYS = {"apiVersion", "kind", "namespace", "resources", "patches"}
CLUSTER_SCOPED = {"Namespace", "ClusterRole", "ClusterRoleBinding", "PersistentVolume"}

Object = dict[str, Any]


class KustomizeError(ValueError):
    pass


def render(folder: Path) -> list[Object]:
    """The objects ``kustomize build folder`` would print (for the supported features)."""
    spec = yaml.safe_load((folder / "kustomization.yaml").read_text())
    unsupported = set(spec) - SUPPORTED_KEYS
    if unsupported:
        raise KustomizeError(f"{folder}: unsupported kustomization keys {sorted(unsupported)}")
    objects: list[Object] = []
    for entry in spec.get("resources", []):
        path = (folder / entry).resolve()
        if path.is_dir():
            objects += render(path)
        else:
            objects += [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
    _check_unique(objects, folder)
    for patch in spec.get("patches", []):
        _apply_patch(objects, folder / patch["path"], patch.get("target"))
    namespace = spec.get("namespace")
    if namespace:
        for obj in objects:
            if obj["kind"] == "Namespace":
                obj["metadata"]["name"] = namespace
            elif obj["kind"] not in CLUSTER_SCOPED:
                obj["metadata"]["namespace"] = namespace
    return objects


def _key(obj: Object) -> tuple[str, str]:
    return obj["kind"], obj["metadata"]["name"]


def _check_unique(objects: list[Object], folder: Path) -> None:
    seen: set[tuple[str, str]] = set()
    for obj in objects:
        if _key(obj) in seen:
            raise KustomizeError(f"{folder}: {_key(obj)} defined twice")
        seen.add(_key(obj))


def _apply_patch(objects: list[Object], path: Path, target: dict[str, str] | None) -> None:
    patch = yaml.safe_load(path.read_text())
    if target is not None:
        unsupported = set(target) - {"kind", "name"}
        if unsupported:
            raise KustomizeError(f"{path}: unsupported target keys {sorted(unsupported)}")
        matches = [
            o
            for o in objects
            if all(
                value == (o["kind"] if key == "kind" else o["metadata"]["name"])
                for key, value in target.items()
            )
        ]
    else:
        if not isinstance(patch, dict):
            raise KustomizeError(f"{path}: a JSON 6902 patch needs a target")
        matches = [o for o in objects if _key(o) == _key(patch)]
    if not matches:
        raise KustomizeError(f"{path}: the patch matches no resource")
    for obj in matches:
        if isinstance(patch, list):
            for op in patch:
                _json_patch(obj, op, path)
        else:
            merged = _merge(obj, {k: v for k, v in patch.items() if k not in ("apiVersion",)})
            obj.clear()
            obj.update(merged)


def _merge(base: Any, patch: Any) -> Any:
    if isinstance(base, dict) and isinstance(patch, dict):
        result = dict(base)
        for key, value in patch.items():
            result[key] = _merge(base[key], value) if key in base else copy.deepcopy(value)
        return result
    if isinstance(base, list) and isinstance(patch, list) and _named(base) and _named(patch):
        result = [copy.deepcopy(item) for item in base]
        index = {item["name"]: i for i, item in enumerate(result)}
        for item in patch:
            if item["name"] in index:
                result[index[item["name"]]] = _merge(result[index[item["name"]]], item)
            else:
                result.append(copy.deepcopy(item))
        return result
    return copy.deepcopy(patch)


def _named(items: list[Any]) -> bool:
    return bool(items) and all(isinstance(i, dict) and "name" in i for i in items)


def _json_patch(obj: Object, op: dict[str, Any], path: Path) -> None:
    if op.get("op") not in ("add", "replace", "remove"):
        raise KustomizeError(f"{path}: unsupported op {op.get('op')!r}")
    *parents, last = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].split("/")[1:]]
    node: Any = obj
    for part in parents:
        try:
            node = node[int(part)] if isinstance(node, list) else node[part]
        except (KeyError, IndexError, ValueError):
            raise KustomizeError(f"{path}: {op['path']} does not exist in {_key(obj)}") from None
    if op["op"] == "remove":
        del node[int(last) if isinstance(node, list) else last]
    elif isinstance(node, list):
        value = copy.deepcopy(op["value"])
        if last == "-":
            node.append(value)
        elif op["op"] == "add":
            node.insert(int(last), value)
        else:
            node[int(last)] = value
    else:
        if op["op"] == "replace" and last not in node:
            raise KustomizeError(f"{path}: {op['path']} does not exist in {_key(obj)}")
        node[last] = copy.deepcopy(op["value"])
