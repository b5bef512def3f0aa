"""Typed configs: dataclasses, YAML presets, ``key=value`` overrides.

Every entry point has one dataclass whose fields carry their documentation. A run's
config is ``preset YAML  <-  key=value overrides``, coerced to the field types, with
unknown keys and bad values rejected with a message that names the field and the fix.
Nested dataclasses are addressed with dots (``replay.tau=1e-3``).
"""

from __future__ import annotations

import copy
import dataclasses
import json
import keyword
import types
import typing
from pathlib import Path
from typing import Any, TypeVar

import yaml

T = TypeVar("T")

__all__ = ["ConfigError", "parse_overrides", "from_dict", "apply_overrides", "to_dict",
           "load_preset", "PRESET_DIRS"]

# presets ship inside the package (agentsearch/configs/), so a non-editable install has them
PRESET_DIRS = [Path(__file__).resolve().parent.parent / "configs"]


class ConfigError(ValueError):
    """A bad preset, key or value; the message says which and how to fix it."""


def config_key(name: str) -> str:
    """A field's key in presets, overrides and dumps: its name, without the trailing ``_`` that
    a Python keyword needs as a field name (the field ``async_`` is the key ``async``)."""
    return name[:-1] if name.endswith("_") and keyword.iskeyword(name[:-1]) else name


def _field_types(cls) -> dict[str, Any]:
    hints = typing.get_type_hints(cls)
    return {config_key(f.name): hints[f.name] for f in dataclasses.fields(cls)}


def _coerce(value: Any, tp: Any, where: str) -> Any:
    origin = typing.get_origin(tp)
    if tp is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None or (isinstance(value, str) and value.lower() in ("none", "null")):
            if type(None) in args:
                return None
        errors = []
        for a in args:
            if a is type(None):
                continue
            try:
                return _coerce(value, a, where)
            except ConfigError as e:
                errors.append(str(e))
        raise ConfigError(errors[0] if errors else f"{where}: cannot be None")
    if origin is typing.Literal:
        choices = typing.get_args(tp)
        if value not in choices:
            raise ConfigError(f"{where}: {value!r} is not one of {list(choices)}")
        return value
    if dataclasses.is_dataclass(tp):
        if isinstance(value, tp):
            return value
        if isinstance(value, str) and "kind" in {f.name for f in dataclasses.fields(tp)}:
            value = {"kind": value}  # shorthand: `replay=hdr`
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: expected a mapping for {tp.__name__}, got {value!r}")
        return from_dict(tp, value, prefix=where + ".")
    if origin in (list, tuple):
        (inner, *_) = typing.get_args(tp) or (Any,)
        if isinstance(value, str):
            value = yaml.safe_load(value) if value.strip().startswith("[") else \
                [v for v in value.split(",") if v.strip()]
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{where}: expected a list, got {value!r}")
        seq = [_coerce(v, inner, f"{where}[{i}]") for i, v in enumerate(value)]
        return tuple(seq) if origin is tuple else seq
    if origin is dict or tp is dict:
        if isinstance(value, str):
            value = yaml.safe_load(value)
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: expected a mapping, got {value!r}")
        return {k: _scalar(v) for k, v in value.items()}
    if tp is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "1", "yes", "on"):
            return True
        if isinstance(value, str) and value.lower() in ("false", "0", "no", "off"):
            return False
        raise ConfigError(f"{where}: expected true/false, got {value!r}")
    if tp is int:
        if isinstance(value, bool):
            raise ConfigError(f"{where}: expected an integer, got {value!r}")
        if isinstance(value, int):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, str):
            try:
                f = float(value)
                if f.is_integer():
                    return int(f)
            except ValueError:
                pass
        raise ConfigError(f"{where}: expected an integer, got {value!r}")
    if tp is float:
        if isinstance(value, bool):
            raise ConfigError(f"{where}: expected a number, got {value!r}")
        try:
            return float(value)
        except (TypeError, ValueError):
            raise ConfigError(f"{where}: expected a number, got {value!r}") from None
    if tp is str:
        if isinstance(value, (dict, list)):
            raise ConfigError(f"{where}: expected a string, got {value!r}")
        return str(value)
    return value


def _scalar(v: Any) -> Any:
    """Free-form mappings (``env_kwargs``) get command-line strings typed like YAML scalars:
    ``topk=2`` -> 2, ``x=1e-3`` -> 0.001, ``flag=true`` -> True, ``y=null`` -> None; a YAML
    flow list or mapping too: ``kinds=[quarter,bar]`` -> ["quarter", "bar"], ``tools=[]`` -> []."""
    if isinstance(v, dict):
        return {k: _scalar(x) for k, x in v.items()}
    if not isinstance(v, str):
        return v
    low = v.strip().lower()
    if low[:1] in ("[", "{"):
        try:
            return _scalar(yaml.safe_load(v)) if low[:1] == "{" else yaml.safe_load(v)
        except yaml.YAMLError:
            return v  # not YAML after all: a string that starts with a bracket
    if low in ("true", "false"):
        return low == "true"
    if low in ("null", "~"):
        return None
    for cast in (int, float):
        try:
            return cast(v)
        except ValueError:
            pass
    return v


def from_dict(cls: type[T], data: dict, prefix: str = "") -> T:
    """Build ``cls`` from a (nested) dict, checking keys and types."""
    types_ = _field_types(cls)
    unknown = sorted(set(data) - set(types_))
    if unknown:
        import difflib

        hints = [difflib.get_close_matches(k, list(types_), n=1) for k in unknown]
        msg = ", ".join(f"{prefix}{k}" + (f" (did you mean {prefix}{h[0]}?)" if h else "")
                        for k, h in zip(unknown, hints))
        raise ConfigError(f"unknown config key(s): {msg}. Known keys: {sorted(types_)}")
    names = {config_key(f.name): f.name for f in dataclasses.fields(cls)}
    kwargs = {names[k]: _coerce(v, types_[k], prefix + k) for k, v in data.items()}
    try:
        return cls(**kwargs)
    except (TypeError, ValueError) as e:
        raise ConfigError(f"{cls.__name__}: {e}") from None


def to_dict(cfg) -> dict:
    """The config as a nested dict keyed as in presets (``config_key``)."""
    out = {}
    for f in dataclasses.fields(cfg):
        value = getattr(cfg, f.name)
        out[config_key(f.name)] = (to_dict(value) if dataclasses.is_dataclass(value)
                                   else copy.deepcopy(value))
    return out


def parse_overrides(items: list[str]) -> dict:
    """``["a=1", "b.c=x"]`` -> ``{"a": "1", "b": {"c": "x"}}`` (values coerced later)."""
    out: dict = {}
    for item in items:
        if "=" not in item:
            raise ConfigError(f"override {item!r} is not key=value (e.g. steps=50)")
        key, value = item.split("=", 1)
        key = key.strip().lstrip("-").replace("-", "_")
        if not key:
            raise ConfigError(f"override {item!r} has an empty key")
        node = out
        parts = key.split(".")
        for p in parts[:-1]:
            if isinstance(node.get(p), str):  # `replay=hdr replay.tau=1e-3`
                node[p] = {"kind": node[p]}
            node = node.setdefault(p, {})
            if not isinstance(node, dict):
                raise ConfigError(f"override {item!r} conflicts with an earlier one")
        if isinstance(node.get(parts[-1]), dict):  # `replay.tau=1e-3 replay=hdr`
            node[parts[-1]]["kind"] = value
        else:
            node[parts[-1]] = value
    return out


def _merge(base: dict, extra: dict) -> dict:
    """Deep merge. A scalar given for a nested section sets that section's ``kind``
    (``replay=hdr`` means ``replay.kind=hdr``), keeping the section's other keys."""
    out = dict(base)
    for k, v in extra.items():
        if isinstance(out.get(k), str) and isinstance(v, dict):
            out[k] = {"kind": out[k]}
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = _merge(out[k], v)
        elif isinstance(out.get(k), dict) and isinstance(v, str):
            out[k] = {**out[k], "kind": v}
        else:
            out[k] = v
    return out


def load_preset(name_or_path: str, _seen: tuple[str, ...] = ()) -> dict:
    """A preset by name (``agentsearch/configs/NAME.yaml``) or a YAML file path. A preset with
    ``extends: OTHER`` is OTHER's settings with its own merged on top."""
    if name_or_path in _seen:
        raise ConfigError("presets extend each other in a cycle: "
                          f"{' -> '.join((*_seen, name_or_path))}")
    p = Path(name_or_path)
    found = p if p.suffix in (".yaml", ".yml") and p.exists() else next(
        (f for f in (d / f"{name_or_path}.yaml" for d in PRESET_DIRS) if f.exists()), None)
    if found is not None:
        data = yaml.safe_load(found.read_text()) or {}
        parent = data.pop("extends", None)
        return _merge(load_preset(parent, (*_seen, name_or_path)), data) if parent else data
    known = sorted({f.stem for d in PRESET_DIRS if d.exists() for f in d.glob("*.yaml")})
    raise ConfigError(f"unknown preset {name_or_path!r}; known presets: {known} "
                      "(or pass a path to a .yaml file)")


def apply_overrides(cls: type[T], preset: str | dict | None, overrides: list[str] | dict) -> T:
    """``cls`` from a preset (name, path or dict) with ``key=value`` overrides on top."""
    base = load_preset(preset) if isinstance(preset, str) else dict(preset or {})
    extra = parse_overrides(overrides) if isinstance(overrides, list) else overrides
    return from_dict(cls, _merge(base, extra))


def dump(cfg, path: str | Path) -> None:
    """Write the resolved config (YAML) so a run folder records exactly what ran."""
    Path(path).write_text(yaml.safe_dump(json.loads(json.dumps(to_dict(cfg), default=str)),
                                         sort_keys=False))


def field_docs(cls) -> dict[str, str]:
    """The docstring under each dataclass field (the string literal that follows it)."""
    import ast
    import inspect
    import textwrap

    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    body = tree.body[0].body
    docs = {}
    for node, nxt in zip(body, body[1:]):
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and \
                isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant) and \
                isinstance(nxt.value.value, str):
            docs[node.target.id] = " ".join(nxt.value.value.split())
    return docs


def reference(cls, prefix: str = "") -> list[tuple[str, str, str]]:
    """(key, default, doc) rows for every field, nested sections flattened with dots."""
    rows = []
    docs = field_docs(cls)
    defaults = cls()
    for f in dataclasses.fields(cls):
        value = getattr(defaults, f.name)
        if dataclasses.is_dataclass(value):
            rows += reference(type(value), prefix + config_key(f.name) + ".")
        else:
            rows.append((prefix + config_key(f.name), json.dumps(value, default=str),
                         docs.get(f.name, "")))
    return rows
