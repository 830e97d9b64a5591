"""Each default is declared once: walks the settings classes of every package's source, the algorithm
presets and the backends' losses, and fails on a value stated in two places."""

from __future__ import annotations

import ast
import collections
from pathlib import Path

import attrs
import pytest

from ludic_core.algorithms import PRESETS, presets

PACKAGES = Path(__file__).resolve().parents[2]
SETTINGS_SUFFIXES = ("Config", "Settings", "Timeouts", "Params")
SPEC_MODULES = ("ludic_core/algorithms/losses.py", "ludic_core/algorithms/preprocess.py")
LOSS_MODULES = ("ludic-train/src/ludic_train/losses", "ludic-tinker/src/ludic_tinker/losses.py")


def _sources(pattern: str) -> list[Path]:
    if not PACKAGES.joinpath("ludic-core", "src").is_dir():
        pytest.skip("needs the repository's source tree")
    return sorted(PACKAGES.glob(pattern))


def _literal(node: ast.expr | None) -> object:
    """A number or string written in the source (not a bool, None or a name), else None."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        value = _literal(node.operand)
        return -value if isinstance(value, (int, float)) else None  # type: ignore[operator]
    if isinstance(node, ast.Constant) and not isinstance(node.value, bool):
        return node.value if isinstance(node.value, (int, float, str)) else None
    return None


def _is_attrs(node: ast.ClassDef) -> bool:
    for decorator in node.decorator_list:
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        if (
            isinstance(target, ast.Attribute)
            and isinstance(target.value, ast.Name)
            and target.value.id == "attrs"
        ):
            return True
    return False


def _field_defaults(node: ast.ClassDef) -> dict[str, object]:
    """An attrs class body's fields with a literal default (``x: T = 1`` or ``attrs.field(default=1)``)."""
    out = {}
    for stmt in node.body:
        if not (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)):
            continue
        value = stmt.value
        if (
            isinstance(value, ast.Call)
            and isinstance(value.func, ast.Attribute)
            and value.func.attr == "field"
        ):
            fixed = [k.value for k in value.keywords if k.arg == "init"]
            if fixed and isinstance(fixed[0], ast.Constant) and fixed[0].value is False:
                continue  # not settable, so not a default anyone passes
            value = next((k.value for k in value.keywords if k.arg == "default"), None)
        literal = _literal(value)
        if literal is not None:
            out[stmt.target.id] = literal
    return out


def _settings_classes() -> dict[str, dict[str, object]]:
    classes = {}
    for path in _sources("*/src/**/*.py"):
        spec_module = any(str(path).endswith(m) for m in SPEC_MODULES)
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.ClassDef) and _is_attrs(node)):
                continue
            if spec_module or node.name.endswith(SETTINGS_SUFFIXES):
                classes[f"{path.relative_to(PACKAGES)}:{node.name}"] = _field_defaults(node)
    return classes


def shared_defaults(classes: dict[str, dict[str, object]]) -> dict[tuple[str, object], list[str]]:
    owners = collections.defaultdict(list)
    for where, fields in classes.items():
        for name, value in fields.items():
            owners[(name, value)].append(where)
    return {key: where for key, where in owners.items() if len(where) > 1}


def test_the_check_finds_a_default_declared_in_two_classes() -> None:
    source = "@attrs.frozen\nclass AConfig:\n    timeout_s: float = 300.0\n"
    other = "@attrs.frozen\nclass BSettings:\n    timeout_s: float = attrs.field(default=300.0)\n"
    classes = {
        name: _field_defaults(next(n for n in ast.walk(ast.parse(text)) if isinstance(n, ast.ClassDef)))
        for name, text in (("a", source), ("b", other))
    }
    assert shared_defaults(classes) == {("timeout_s", 300.0): ["a", "b"]}


def test_no_settings_class_restates_another_ones_default() -> None:
    found = shared_defaults(_settings_classes())
    assert not found, f"defaults declared in two settings classes (read one from the other): {found}"


def test_no_preset_restates_a_default_of_what_it_builds() -> None:
    tree = ast.parse(Path(presets.__file__).read_text())
    restated = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            cls = getattr(presets, node.func.id, None)
            if isinstance(cls, type) and attrs.has(cls):
                defaults = {f.name: f.default for f in attrs.fields(cls)}
                for keyword in node.keywords:
                    value = _literal(keyword.value)
                    if value is None and isinstance(keyword.value, ast.Constant):
                        value = keyword.value.value  # booleans too: a preset restating a flag
                    if keyword.arg in defaults and value is not None and defaults[keyword.arg] == value:
                        restated.append(f"line {node.lineno}: {node.func.id}({keyword.arg}={value!r})")
    for preset in PRESETS.values():
        defaults = {f.name: f.default for f in attrs.fields(preset.credit)}
        restated += [
            f"{preset.name}: {preset.credit.__name__}({k}={v!r})"
            for k, v in preset.credit_values.items()
            if defaults.get(k, attrs.NOTHING) == v
        ]
    assert not restated, f"presets restating the defaults of their parts: {restated}"


def test_backend_losses_declare_no_hyper_parameter_defaults() -> None:
    # The torch losses subclass the specs and Tinker reads them: a number written there again would be
    # a second home for a preset's or a spec's value.
    paths = [p for m in LOSS_MODULES for p in _sources(m if m.endswith(".py") else f"{m}/*.py")]
    assert len(paths) > 5
    found = []
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                args = node.args
                positional = args.posonlyargs + args.args
                pairs = list(
                    zip(positional[len(positional) - len(args.defaults) :], args.defaults, strict=True)
                )
                pairs += [
                    (a, d) for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True) if d is not None
                ]
                for arg, default in pairs:
                    value = _literal(default)
                    if isinstance(value, float):
                        found.append(f"{path.name}:{node.lineno} {node.name}({arg.arg}={value!r})")
            elif isinstance(node, ast.ClassDef) and _is_attrs(node):
                found += [
                    f"{path.name}:{node.lineno} {node.name}.{name}={value!r}"
                    for name, value in _field_defaults(node).items()
                    if isinstance(value, float)
                ]
    assert not found, f"hyper-parameter defaults outside the loss specs: {found}"
