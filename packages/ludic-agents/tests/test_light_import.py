"""ludic-agents without extras imports without torch or transformers."""

from __future__ import annotations

import subprocess
import sys
import textwrap

BLOCKER = textwrap.dedent(
    """
    import importlib.abc, sys

    class Block(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in {"torch", "transformers", "jinja2", "tokenizers"}:
                raise ImportError(f"blocked heavy import: {name}")
            return None

    sys.meta_path.insert(0, Block())
    import pkgutil, importlib, ludic_agents
    for mod in pkgutil.walk_packages(ludic_agents.__path__, "ludic_agents."):
        if not mod.name.startswith("ludic_agents.testing"):
            importlib.import_module(mod.name)
    import ludic_agents.testing  # the helpers import lazily too; only building a tokenizer needs [hf]
    heavy = sorted(m for m in sys.modules if m.split(".")[0] in {"torch", "transformers", "jinja2", "tokenizers"})
    assert not heavy, heavy
    from ludic_agents import ReActAgent, xml_tag_parser, Tool
    print("ok")
    """
)


def test_imports_without_heavy_dependencies() -> None:
    out = subprocess.run([sys.executable, "-c", BLOCKER], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def test_agents_are_registered_by_entry_point() -> None:
    from ludic_agents import Agent, ReActAgent, ToolAgent
    from ludic_core.registry import AGENTS

    assert AGENTS.get("agent") is Agent
    assert AGENTS.get("tool_agent") is ToolAgent
    assert AGENTS.get("react") is ReActAgent
