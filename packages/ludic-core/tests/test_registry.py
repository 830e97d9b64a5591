from __future__ import annotations

import sys
from pathlib import Path

import pytest

from ludic_core.errors import RegistryError
from ludic_core.registry import (
    ALGORITHMS,
    ENVS,
    Registry,
    make_algorithm,
    make_env,
    register_algorithm,
    register_env,
)
from ludic_core.suggestions import close_names, did_you_mean
from ludic_core.testing import GuessNumberEnv


def test_register_and_build_by_name() -> None:
    registry: Registry[GuessNumberEnv] = Registry("env", None)
    registry.register("guess", GuessNumberEnv)
    env = registry.build("guess", max_number=3)
    assert isinstance(env, GuessNumberEnv) and env.max_number == 3
    assert "guess" in registry and registry.names() == ["guess"]


def test_duplicate_registration_needs_overwrite() -> None:
    registry: Registry[object] = Registry("env", None)
    registry.register("x", GuessNumberEnv)
    registry.register("x", GuessNumberEnv)  # same factory again is fine
    with pytest.raises(RegistryError, match="already registered"):
        registry.register("x", dict)
    registry.register("x", dict, overwrite=True)
    assert registry.get("x") is dict


def test_unknown_name_lists_known_names() -> None:
    registry: Registry[object] = Registry("protocol", None)
    registry.register("alpha", dict)
    with pytest.raises(RegistryError, match=r"unknown protocol 'beta'; known: \['alpha'\]"):
        registry.get("beta")
    with pytest.raises(RegistryError, match="factory must be callable"):
        registry.register("bad", 3)  # type: ignore[arg-type]


def test_an_unknown_name_suggests_the_closest_registered_names() -> None:
    registry: Registry[object] = Registry("env", "test.group")
    for name in ("tictactoe", "tictactoe_selfplay", "gsm8k"):
        registry.register(name, dict)
    with pytest.raises(RegistryError) as info:
        registry.get("tictactoee")
    message = str(info.value)
    assert message.startswith("unknown env 'tictactoee'; did you mean 'tictactoe' or 'tictactoe_selfplay'?")
    assert "'gsm8k'" in message.split("known:")[1]  # every name is still listed
    with pytest.raises(RegistryError) as info:
        registry.get("zzz")
    assert "did you mean" not in str(info.value)  # nothing close: no guess


def test_did_you_mean_orders_the_closest_first() -> None:
    assert close_names("grpoo", ["sft", "grpo", "gspo", "dr_grpo"]) == ["grpo", "gspo", "dr_grpo"]
    assert did_you_mean("grpoo", ["grpo"]) == "did you mean 'grpo'? "
    assert did_you_mean("xyz", ["grpo"]) == ""


def test_module_level_env_registry() -> None:
    register_env("test-guess", GuessNumberEnv, overwrite=True)
    try:
        assert isinstance(make_env("test-guess"), GuessNumberEnv)
    finally:
        ENVS.unregister("test-guess")


def test_algorithms_registry_builds_presets_by_name() -> None:
    calls: list[dict[str, object]] = []

    def make_toy(**kwargs: object) -> str:
        calls.append(kwargs)
        return "toy algorithm"

    assert ALGORITHMS.entry_point_group == "ludic.algorithms"
    register_algorithm("test-toy", make_toy)
    try:
        assert make_algorithm("test-toy", group_size=4) == "toy algorithm" and calls == [{"group_size": 4}]
        assert "test-toy" in ALGORITHMS
        with pytest.raises(
            RegistryError,
            match=r"unknown algorithm 'test-nope'; did you mean 'test-toy'\? known: \[.*'test-toy'",
        ):
            make_algorithm("test-nope")
    finally:
        ALGORITHMS.unregister("test-toy")


def test_entry_points_make_envs_available_without_import(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An installed distribution that declares a `ludic.envs` entry point is found by name, lazily."""
    pkg = tmp_path / "thirdparty_envs_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(
        "from ludic_core.testing import GuessNumberEnv\n"
        "class TenEnv(GuessNumberEnv):\n"
        "    def __init__(self, **kw):\n"
        "        super().__init__(max_number=10, **kw)\n"
    )
    dist = tmp_path / "thirdparty_envs-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: thirdparty-envs\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(
        "[ludic.envs]\nten = thirdparty_envs_pkg:TenEnv\nbroken = nowhere_mod:X\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    registry: Registry[object] = Registry("env", "ludic.envs")
    assert {"ten", "broken"} <= set(registry.names())
    assert "thirdparty_envs_pkg" not in sys.modules  # listing names does not import
    env = registry.build("ten")
    assert type(env).__name__ == "TenEnv" and env.max_number == 10  # type: ignore[attr-defined]
    with pytest.raises(RegistryError, match="loading entry point 'nowhere_mod:X' failed"):
        registry.get("broken")
