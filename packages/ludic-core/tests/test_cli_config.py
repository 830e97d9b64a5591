"""The `ludic` command's config layer (cattrs over attrs classes) and its dispatch, without any env
package: unknown keys name the nearest valid key, wrong types name field, value and expected type, and
a command contributed by a package that is not installed names the package."""

from __future__ import annotations

import importlib
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import ClassVar

import attrs
import pytest

from ludic_core.errors import ConfigError
from ludic_core.run.configs import EvalConfig, RolloutsConfig
from ludic_core.run.loading import load_config, parse_override


def test_overrides_are_toml_values_and_nest() -> None:
    config = load_config(
        EvalConfig,
        flags={"env": "tictactoe", "backend": {"model": "m"}},
        overrides=[
            "episodes=5",
            "sampling.stop=['</move>']",
            "env_kwargs.opponent=minimax",
            "sampling.temperature=1",
        ],
    )
    assert (config.episodes, config.sampling.stop, config.env_kwargs) == (
        5,
        ("</move>",),
        {"opponent": "minimax"},
    )
    assert config.sampling.temperature == 1.0 and isinstance(config.sampling.temperature, float)
    assert parse_override("backend.model=gpt-4o-mini") == (["backend", "model"], "gpt-4o-mini")


def test_a_partial_nested_table_keeps_the_rest_of_the_commands_default() -> None:
    config = load_config(EvalConfig, flags={"env": "tictactoe"}, overrides=["rollout.concurrency=4"])
    # The command's rollout defaults (not RolloutSettings' own) survive an override of one field.
    assert (config.rollout.concurrency, config.rollout.max_steps, config.rollout.episode_timeout_s) == (
        4,
        20,
        1800.0,
    )
    rollouts = load_config(
        RolloutsConfig, flags={"env": "tictactoe", "output": "o.jsonl"}, overrides=["sampling.max_tokens=9"]
    )
    assert (rollouts.sampling.max_tokens, rollouts.sampling.temperature) == (9, 1.0)
    with pytest.raises(ConfigError, match=r"rollout\.on_failure = 'skip': expected Literal"):
        load_config(EvalConfig, flags={"env": "tictactoe"}, overrides=["rollout.on_failure=skip"])


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        (["episdes=3"], "unknown key 'episdes'; did you mean 'episodes'?"),
        (
            ["sampling.temprature=0.5"],
            "unknown key 'sampling.temprature'; did you mean 'sampling.temperature'?",
        ),
        (["episodes=5.5"], "episodes = 5.5: expected int (got float)"),
        (["episodes=true"], "episodes = True: expected int (got bool)"),
        (["episodes='5'"], "episodes = '5': expected int (got str)"),
        (["pass_k=[1, 'x']"], "pass_k[1] = 'x': expected int (got str)"),
        (["episodes=0"], "EvalConfig.episodes must be a finite number >= 1 or None, got 0"),
        (["pass_k=[2]"], "pass_k must list ks in [1, samples_per_prompt=1], got [2]"),
        (["novalue"], "override 'novalue' must look like key=value"),
        (["backend.base_url=http://h/v1"], "did you mean 'backend.base_urls'?"),
        (["backend.base_urls=[]"], "BackendConfig.base_urls must list at least one server URL"),
        (["backend.base_urls=['http://a/v1', 5]"], "backend.base_urls = ['http://a/v1', 5]: expected"),
        (["backend.base_urls=localhost:8000"], "'localhost:8000' is not an http(s) URL"),
        (["backend.base_urls=['http://a/v1', 'http://a/v1']"], "lists 'http://a/v1' more than once"),
    ],
)
def test_config_errors_name_what_is_wrong(overrides: list[str], expected: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(EvalConfig, flags={"env": "e"}, overrides=overrides)
    assert expected in str(info.value)


def test_every_problem_is_reported_at_once_and_required_fields_are_named() -> None:
    with pytest.raises(ConfigError) as info:
        load_config(RolloutsConfig, overrides=["seed=-1.5", "keep=3"])
    message = str(info.value)
    for part in ("env: missing (required, type str)", "seed = -1.5", "keep = 3"):
        assert part in message
    # Where each bad value came from: the override that set it.
    assert "override 'seed=-1.5': seed = -1.5" in message and "override 'keep=3': keep = 3" in message


def test_problems_name_the_file_and_the_key_path_that_set_them(tmp_path: Path) -> None:
    first, second = tmp_path / "base.toml", tmp_path / "run.toml"
    first.write_text('env = "tictactoe"\n[backend]\nmax_retries = 2\n')
    second.write_text('[backend]\nmax_retries = "two"\nmodle = "m"\n[sampling]\ntop_p = 2.0\n')
    with pytest.raises(ConfigError) as info:
        load_config(EvalConfig, files=[first, second], overrides=["sampling.temperature=hot"])
    message = str(info.value)
    # The value that failed was set last by run.toml, not base.toml, which also set it.
    assert f"config file {str(second)!r}: backend.max_retries = 'two': expected int" in message
    assert (
        f"config file {str(second)!r}: unknown key 'backend.modle'; did you mean 'backend.model'?" in message
    )
    assert "override 'sampling.temperature=hot': sampling.temperature = 'hot'" in message
    assert str(first) not in message


def test_a_validator_problem_names_every_file_that_set_its_table(tmp_path: Path) -> None:
    path = tmp_path / "run.toml"
    path.write_text('env = "tictactoe"\n[backend]\nmax_concurrency = 0\n')
    with pytest.raises(ConfigError) as info:
        load_config(EvalConfig, files=[path], flags={"backend": {"model": "m"}})
    message = str(info.value)
    assert "BackendConfig.max_concurrency" in message and "got 0" in message
    assert f"[backend] set by config file {str(path)!r}, command-line flags" in message


def test_a_whole_config_problem_names_the_files_it_was_read_from(tmp_path: Path) -> None:
    path = tmp_path / "run.toml"
    path.write_text('env = "tictactoe"\nepisodes = 1000\nsamples_per_prompt = 1001\n')
    with pytest.raises(ConfigError) as info:
        load_config(EvalConfig, files=[path])
    message = str(info.value)
    assert "1000 x 1001" in message and message.endswith(f"(config read from config file {str(path)!r})")


@attrs.frozen(kw_only=True)
class _Renamed(EvalConfig):
    RENAMED_KEYS: ClassVar[Mapping[str, str]] = {"backend.url": "backend.base_urls", "old.steps": "episodes"}


def test_a_renamed_key_is_refused_naming_its_new_spelling() -> None:
    overrides = ["backend.url=http://h:1/v1", "old.steps=5", "old.other=1"]
    with pytest.raises(ConfigError) as raised:
        load_config(_Renamed, flags={"env": "tictactoe"}, overrides=overrides)
    message = str(raised.value)
    assert (
        "override 'backend.url=http://h:1/v1': 'backend.url' was renamed: set 'backend.base_urls' instead"
        in message
    )
    # A table holding a renamed key names that key; its other keys wait for the next run.
    assert "'old.steps' was renamed: set 'episodes' instead" in message and "old.other" not in message


def test_a_toml_syntax_error_names_the_file_line_and_column(tmp_path: Path) -> None:
    path = tmp_path / "run.toml"
    path.write_text('env = "tictactoe"\n[backend\n')
    with pytest.raises(ConfigError, match=rf"config file {str(path)!r} is not valid toml: .*line 2, column"):
        load_config(EvalConfig, files=[path])


def test_toml_file_then_flags_then_overrides(tmp_path: Path) -> None:
    path = tmp_path / "run.toml"
    # A lone URL is a list of one.
    path.write_text('env = "a"\nepisodes = 7\n[backend]\nmodel = "from-file"\nbase_urls = "http://h/v1"\n')
    config = load_config(EvalConfig, files=[path], flags={"backend": {"model": "flag"}}, overrides=["env=b"])
    assert (config.env, config.episodes, config.backend.model, config.backend.base_urls) == (
        "b",
        7,
        "flag",
        ("http://h/v1",),
    )


def _ludic(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ludic_core.cli", *args], capture_output=True, text=True, timeout=120
    )


def test_ludic_lists_its_commands_and_names_missing_packages() -> None:
    listing = _ludic()
    assert listing.returncode == 0
    assert all(name in listing.stdout for name in ("envs", "eval", "rollouts", "recipes"))


def test_a_command_of_a_missing_package_names_the_package(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # As in the light install, whether or not ludic-train is installed here.
    cli_main = importlib.import_module("ludic_core.cli.main")

    commands = {name: ep for name, ep in cli_main.available_commands().items() if name != "train"}
    monkeypatch.setattr(cli_main, "available_commands", lambda: commands)
    assert cli_main.main(["train", "tictactoe-grpo"]) == 2
    assert "`ludic train` needs ludic-train: pip install ludic-train" in capsys.readouterr().err


def test_missing_backend_names_its_package_before_any_run_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # As in the light install, whether or not ludic-tinker (which contributes `tinker`) is installed here.
    backends = importlib.import_module("ludic_core.run.backends")
    builtins_only = backends.Registry(
        "backend", None, builtins={"openai": "ludic_core.run.backends:OpenAIBackend"}
    )
    monkeypatch.setattr(backends, "BACKENDS", builtins_only)
    monkeypatch.chdir(tmp_path)
    cli_main = importlib.import_module("ludic_core.cli.main")
    for kind, package in (("tinker", "ludic-tinker"), ("vllm", "ludic-vllm"), ("local", "ludic-train")):
        assert cli_main.main(["eval", "x", "--backend", kind, "--model", "m"]) == 2
        assert f"backend.kind = {kind!r} needs {package}: pip install {package}" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()


def test_backend_kind_is_checked_against_the_registry() -> None:
    from ludic_core.run.backends import check_backend
    from ludic_core.run.configs import BackendConfig

    with pytest.raises(ConfigError) as info:
        check_backend(BackendConfig(kind="opnai"))
    message = str(info.value)
    assert "backend.kind = 'opnai': not a registered backend; did you mean 'openai'?" in message
    assert "entry-point group 'ludic.backends'" in message
