"""tools/check_package_imports.py on a planted tree: an import between two packages is found (a lazy
one inside a function too), an import of ludic_core or of the package itself is not, and ludic_core may
import no other package."""

from __future__ import annotations

import importlib.util
from pathlib import Path

_SPEC = importlib.util.spec_from_file_location(
    "check_package_imports", Path(__file__).resolve().parents[1] / "check_package_imports.py"
)
assert _SPEC is not None and _SPEC.loader is not None
check = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(check)


def _module(root: Path, package: str, text: str, *, tests: bool = False) -> None:
    where = root / "packages" / package.replace("_", "-") / ("tests" if tests else f"src/{package}")
    where.mkdir(parents=True, exist_ok=True)
    (where / "mod.py").write_text(text)


def test_imports_between_packages_are_found(tmp_path: Path) -> None:
    _module(tmp_path, "ludic_core", "import json\nfrom ludic_core.errors import ConfigError\n")
    _module(tmp_path, "ludic_train", "from ludic_core.errors import ConfigError\nimport ludic_train.x\n")
    _module(tmp_path, "ludic_vllm", "import ludic_train\n", tests=True)
    assert check.violations(tmp_path) == []
    _module(tmp_path, "ludic_vllm", "def f():\n    from ludic_train.weights import export\n")
    _module(tmp_path, "ludic_core", "import ludic_train.recipes\n")
    found = check.violations(tmp_path)
    assert [line.split(": ", 1)[0] for line in found] == [
        "packages/ludic-core/src/ludic_core/mod.py:1",
        "packages/ludic-vllm/src/ludic_vllm/mod.py:2",
    ]
    assert "ludic_vllm imports ludic_train.weights" in found[1]
