"""The package root exports the client side: every name resolves, lazily, without the server pieces."""

from __future__ import annotations

import ast
import importlib
import inspect
import subprocess
import sys

import pytest

import ludic_vllm

# The server extension (vLLM and the web stack it runs on) and the publisher extra (torch, safetensors).
SERVER_AND_EXTRAS = ("vllm", "fastapi", "uvicorn", "torch", "safetensors", "transformers")


def test_all_has_no_duplicates() -> None:
    assert len(ludic_vllm.__all__) == len(set(ludic_vllm.__all__))


def test_all_matches_the_lazy_map() -> None:
    assert set(ludic_vllm.__all__) - {"__version__"} == set(ludic_vllm._MODULE_OF)


@pytest.mark.parametrize("name", sorted(set(ludic_vllm.__all__) - {"__version__"}))
def test_every_name_resolves_to_its_submodule_object(name: str) -> None:
    # The submodule import path keeps working and gives the very same object.
    module = importlib.import_module(ludic_vllm._MODULE_OF[name])
    assert getattr(ludic_vllm, name) is getattr(module, name)
    assert name in dir(ludic_vllm)


def test_type_checking_imports_match_the_lazy_map() -> None:
    """What mypy and IDEs see (the ``if TYPE_CHECKING:`` imports) is what the root resolves at run time."""
    tree = ast.parse(inspect.getsource(ludic_vllm))
    block = next(
        node
        for node in tree.body
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"
    )
    seen = {
        alias.name: node.module
        for node in block.body
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    }
    assert seen == ludic_vllm._MODULE_OF


def test_unknown_names_raise_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'NoSuchThing'"):
        _ = ludic_vllm.NoSuchThing  # type: ignore[attr-defined]


def _modules_after(code: str) -> list[str]:
    script = f"import sys\n{code}\nprint(sorted(sys.modules))\n"
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
    )
    return ast.literal_eval(out.stdout.strip().splitlines()[-1])


def test_importing_the_root_imports_no_submodule_and_not_aiohttp() -> None:
    loaded = _modules_after("import ludic_vllm")
    assert [m for m in loaded if m.startswith("ludic_vllm.")] == []
    assert [m for m in loaded if m.partition(".")[0] in (*SERVER_AND_EXTRAS, "aiohttp")] == []


def test_resolving_every_exported_name_imports_no_server_piece() -> None:
    loaded = _modules_after(
        "import ludic_vllm\nfor name in ludic_vllm.__all__:\n    getattr(ludic_vllm, name)"
    )
    assert [m for m in loaded if m.partition(".")[0] in SERVER_AND_EXTRAS] == []
    assert [m for m in loaded if m in ("ludic_vllm.routes", "ludic_vllm.serve", "ludic_vllm.worker")] == []
