"""Read a run config: TOML (or a run directory's ``config.json``) plus ``key=value`` overrides, structured
into an attrs class by cattrs and validated before anything heavy starts.

Why cattrs: the library's data types are attrs classes already, so cattrs structures them as they are
(nested classes, ``Literal``, ``X | None``, tuples) with no second schema, and it reports every bad field
at once with its path. It adds one small pure-Python dependency. Command-line flags stay with stdlib
argparse: the flags are few, and ``key=value`` reaches every field without a flag per field (tyro,
cyclopts or jsonargparse would generate flags from the classes, but each brings a larger dependency tree
into the torch-free install).

Values of overrides are read as TOML values (``episodes=5`` is an int, ``stop=["</move>"]`` a list,
``model=gpt-4o`` a string because it is not valid TOML), and types are checked strictly: ``5.5`` is not an
int, ``"5"`` is not a number, ``true`` is not an int. Errors name the field, the value and the expected
type; an unknown key names the nearest valid key.
"""

from __future__ import annotations

import copy
import difflib
import json
import tomllib
import types
import typing
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import attrs
import cattrs
from cattrs.errors import ClassValidationError, ForbiddenExtraKeysError, IterableValidationError

from ludic_core.errors import ConfigError

__all__ = [
    "layered_value",
    "load_config",
    "make_converter",
    "merged",
    "parse_override",
    "structure_config",
    "to_json",
]

C = TypeVar("C")


def _type_name(tp: Any) -> str:
    if isinstance(tp, type):
        return tp.__name__
    return str(tp).replace("typing.", "")


def _strict(tp: type, accepts: tuple[type, ...]) -> Any:
    def structure(value: Any, _tp: Any) -> Any:
        if (isinstance(value, bool) and tp is not bool) or not isinstance(value, accepts):
            raise TypeError(f"got {type(value).__name__}")
        return tp(value)

    return structure


def _strings(value: Any, _tp: Any) -> tuple[str, ...]:
    # A lone string is a list of one (`--base-url URL`, `data=run.jsonl`), never a list of characters.
    if isinstance(value, str):
        return (value,)
    if not isinstance(value, (list, tuple)):
        raise TypeError(f"got {type(value).__name__}")
    wrong = [f"[{i}] is {type(v).__name__}" for i, v in enumerate(value) if not isinstance(v, str)]
    if wrong:
        raise TypeError(f"every item must be a str; {', '.join(wrong)}")
    return tuple(value)


def make_converter() -> cattrs.Converter:
    """A converter that refuses unknown keys and never coerces between types (ints widen to floats; a
    lone string where a list of strings is expected is a list of one)."""
    converter = cattrs.Converter(forbid_extra_keys=True, detailed_validation=True)
    converter.register_structure_hook(int, _strict(int, (int,)))
    converter.register_structure_hook(float, _strict(float, (int, float)))
    converter.register_structure_hook(str, _strict(str, (str,)))
    converter.register_structure_hook(bool, _strict(bool, (bool,)))
    converter.register_structure_hook_func(lambda tp: tp == tuple[str, ...], _strings)
    return converter


def parse_override(text: str) -> tuple[list[str], Any]:
    """``"a.b=1"`` -> ``(["a", "b"], 1)``; the value is a TOML value, else the plain string."""
    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or not key or any(not part for part in key.split(".")):
        raise ConfigError(f"override {text!r} must look like key=value (nested: section.key=value)")
    try:
        value = tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw
    return key.split("."), value


def _set(data: dict[str, Any], path: Sequence[str], value: Any, text: str) -> None:
    node = data
    for part in path[:-1]:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise ConfigError(f"override {text!r}: {part!r} is a value, not a table")
        node = child
    node[path[-1]] = value


def read_file(path: str | Path) -> dict[str, Any]:
    """A TOML file, or a JSON file (a run directory's ``config.json``), as a dict."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"config file {str(path)!r} cannot be read: {exc}") from exc
    try:
        if path.suffix == ".json":
            data = json.loads(raw)
        else:
            data = tomllib.loads(raw.decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise ConfigError(
            f"config file {str(path)!r} is not valid {path.suffix[1:] or 'TOML'}: {exc}"
        ) from exc
    if not isinstance(data, dict):
        raise ConfigError(f"config file {str(path)!r} must hold a table, got {type(data).__name__}")
    return data


def _attrs_class(tp: Any) -> type | None:
    """The attrs class inside ``tp`` (``X`` or ``X | None``), if any."""
    if attrs.has(tp):
        return typing.cast(type, tp)
    if isinstance(tp, types.UnionType) or typing.get_origin(tp) is typing.Union:
        for arg in typing.get_args(tp):
            if attrs.has(arg):
                return typing.cast(type, arg)
    return None


Problem = tuple[list[str], str]
"""A config problem: the key path it is about (``[]``: the whole config) and its message."""


def _messages(exc: BaseException, cls: type, data: Any, path: list[str]) -> Iterable[Problem]:
    """One readable problem per leaf error of a cattrs exception group."""
    if isinstance(exc, ForbiddenExtraKeysError):
        valid = [f.name for f in attrs.fields(exc.cl)]
        for key in sorted(exc.extra_fields):
            where = ".".join([*path, key])
            close = difflib.get_close_matches(key, valid, n=1, cutoff=0.5)
            hint = f"; did you mean {'.'.join([*path, close[0]])!r}?" if close else ""
            yield [*path, key], f"unknown key {where!r}{hint} (valid keys here: {', '.join(valid)})"
        return
    if isinstance(exc, (ClassValidationError, IterableValidationError)):
        with_notes, without_notes = exc.group_exceptions()
        for sub in without_notes:
            yield from _messages(sub, cls, data, path)
        for sub, note in with_notes:
            name = getattr(note, "name", None)
            index = getattr(note, "index", None)
            if name is not None:
                sub_path = [*path, str(name)]
                sub_data = data.get(name) if isinstance(data, Mapping) else None
                sub_cls = _attrs_class(getattr(note, "type", None)) or cls
            else:
                sub_path = [*path[:-1], f"{path[-1]}[{index}]"] if path else [f"[{index}]"]
                sub_data = data[index] if isinstance(data, list) and isinstance(index, int) else None
                sub_cls = cls
            if isinstance(sub, (ClassValidationError, IterableValidationError, ForbiddenExtraKeysError)):
                yield from _messages(sub, sub_cls, sub_data, sub_path)
            elif isinstance(sub, KeyError):
                expected = _type_name(getattr(note, "type", "?"))
                yield sub_path, f"{'.'.join(sub_path)}: missing (required, type {expected})"
            else:
                expected = _type_name(getattr(note, "type", "?"))
                yield sub_path, f"{'.'.join(sub_path)} = {sub_data!r}: expected {expected} ({sub})"
        return
    # A validator's ConfigError already names the class, the field and the value.
    yield path, str(exc) if isinstance(exc, ConfigError) else f"{'.'.join(path) or 'config'}: {exc}"


def _holds(layer: Mapping[str, Any], path: Sequence[str]) -> bool:
    """Whether ``layer`` sets ``path`` (a list index in a part, ``stop[2]``, counts as its list)."""
    node: Any = layer
    for part in path:
        key = part.split("[", 1)[0]
        if not isinstance(node, Mapping) or key not in node:
            return False
        node = node[key]
    return True


def _nested(path: Sequence[str], value: Any) -> dict[str, Any]:
    """``["a", "b"], 1`` -> ``{"a": {"b": 1}}``."""
    node: dict[str, Any] = {path[-1]: value}
    for part in reversed(path[:-1]):
        node = {part: node}
    return node


def _located(problem: Problem, layers: Sequence[tuple[str, Mapping[str, Any]]], data: Any) -> str:
    """The problem's message with where its key was set: a value's problem names the layer that set it
    last (a config file, the command-line flags, an override); a table's problem (a validator's, about
    a combination of its keys) names every layer that set keys of it."""
    path, message = problem
    if not path:  # the whole config (a check across its fields): the files it was read from
        return _with_files(message, layers)
    holders = [source for source, layer in layers if _holds(layer, path)]
    if not holders:
        return message
    if _holds(data, path) and isinstance(_value_at(data, path), Mapping):
        return f"{message} ([{'.'.join(path)}] set by {', '.join(holders)})"
    return f"{holders[-1]}: {message}"


def _with_files(message: str, layers: Sequence[tuple[str, Mapping[str, Any]]]) -> str:
    files = [source for source, _layer in layers if source.startswith("config file")]
    return f"{message} (config read from {', '.join(files)})" if files else message


def _value_at(data: Mapping[str, Any], path: Sequence[str]) -> Any:
    node: Any = data
    for part in path:
        node = node[part.split("[", 1)[0]]
    return node


def _layered(
    data: dict[str, Any],
    files: Sequence[str | Path],
    overrides: Sequence[str],
    flags: Mapping[str, Any] | None,
    defaults: Mapping[str, Any] | None,
) -> tuple[dict[str, Any], list[tuple[str, Mapping[str, Any]]]]:
    # Each layer with where it came from, so a problem names the file, flag or override that set its key.
    layers: list[tuple[str, Mapping[str, Any]]] = [("defaults", dict(defaults or {}))]
    layers += [(f"config file {str(f)!r}", read_file(f)) for f in files]
    layers.append(("command-line flags", dict(flags or {})))
    for _source, layer in layers:
        data = merged(data, layer)
    for text in overrides:
        path, value = parse_override(text)
        _set(data, path, value, text)  # an override replaces its key's value whole
        layers.append((f"override {text!r}", _nested(path, value)))
    return data, layers


def load_config(
    cls: type[C],
    *,
    files: Sequence[str | Path] = (),
    overrides: Sequence[str] = (),
    flags: Mapping[str, Any] | None = None,
    defaults: Mapping[str, Any] | None = None,
) -> C:
    """Structure ``cls`` from ``defaults`` (a nested dict, e.g. a recipe's own defaults), then the
    files, then the command's ``flags`` (a nested dict), then the overrides (later wins). Raises
    :class:`~ludic_core.errors.ConfigError` listing every problem.

    A nested table given in part keeps the rest of its field's default: ``rollout.concurrency=4``
    changes the concurrency only, not the command's other rollout settings. A key that ``cls``'s
    ``RENAMED_KEYS`` (old dotted key -> new) lists is refused with its new spelling named."""
    data, layers = _layered(nested_defaults(cls), files, overrides, flags, defaults)
    if renamed := _renamed(cls, data):
        raise ConfigError(
            f"invalid {cls.__name__}:\n  " + "\n  ".join(_located(p, layers, data) for p in renamed)
        )
    return _structure(cls, data, layers)


def structure_config(cls: type[C], data: Mapping[str, Any]) -> C:
    """``data`` (a config table given in code or read from JSON) structured into ``cls``, as strictly
    as :func:`load_config` does; raises :class:`~ludic_core.errors.ConfigError` listing every problem."""
    return _structure(cls, dict(data), [])


def _structure(cls: type[C], data: dict[str, Any], layers: Sequence[tuple[str, Mapping[str, Any]]]) -> C:
    try:
        return make_converter().structure(data, cls)
    except (ClassValidationError, ForbiddenExtraKeysError) as exc:
        problems = [_located(problem, layers, data) for problem in _messages(exc, cls, data, [])]
        raise ConfigError(f"invalid {cls.__name__}:\n  " + "\n  ".join(problems)) from exc
    except ConfigError as exc:
        # A validator's error (a bad value, a bad combination) says what; the files say where.
        located = _with_files(str(exc), layers)
        if located == str(exc):
            raise
        raise ConfigError(located) from exc


def _renamed(cls: type, data: Mapping[str, Any]) -> list[Problem]:
    """The keys of ``data`` that ``cls.RENAMED_KEYS`` (old dotted key -> new) lists, naming the new key."""
    renamed: Mapping[str, str] = getattr(cls, "RENAMED_KEYS", {})
    return [
        (old.split("."), f"{old!r} was renamed: set {new!r} instead")
        for old, new in renamed.items()
        if _holds(data, old.split("."))
    ]


def nested_defaults(cls: type) -> dict[str, Any]:
    """The defaults of ``cls``'s nested attrs fields, unstructured (recursively); plain fields are left
    out, so their class defaults apply when a layer does not set them."""
    converter = make_converter()
    data: dict[str, Any] = {}
    for field in attrs.fields(cls):
        default = field.default
        if isinstance(default, attrs.Factory) and not default.takes_self:  # type: ignore[arg-type]
            value = default.factory()
        elif default is not attrs.NOTHING and not isinstance(default, attrs.Factory):  # type: ignore[arg-type]
            value = default
        else:
            continue
        if attrs.has(type(value)):
            data[field.name] = converter.unstructure(value)
    return data


def merged(*layers: Mapping[str, Any]) -> dict[str, Any]:
    """The nested dicts ``layers`` merged, later wins (copies: no layer is changed)."""
    out: dict[str, Any] = {}
    for layer in layers:
        for key, value in layer.items():
            if isinstance(value, Mapping) and isinstance(out.get(key), dict):
                out[key] = merged(out[key], value)
            else:
                out[key] = copy.deepcopy(dict(value) if isinstance(value, Mapping) else value)
    return out


def layered_value(
    path: Sequence[str],
    *,
    files: Sequence[str | Path] = (),
    overrides: Sequence[str] = (),
    defaults: Mapping[str, Any] | None = None,
) -> Any:
    """The value the layers of :func:`load_config` give ``path`` (None: none sets it), read before the
    config class is known (``backend.kind`` chooses a recipe's)."""
    data, _layers = _layered({}, files, overrides, None, defaults)
    return _value_at(data, path) if _holds(data, path) else None


def to_json(config: Any) -> dict[str, Any]:
    """The resolved config as plain JSON data (what ``config.json`` in a run directory holds)."""
    return typing.cast(dict[str, Any], make_converter().unstructure(config))
