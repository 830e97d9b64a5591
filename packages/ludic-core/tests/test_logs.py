"""ludic_core.logs: structlog call sites that produce stdlib records under the ``ludic`` logger."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator

import pytest
import structlog

from ludic_core.logs import get_logger, stdlib_logger_name


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def app_handler() -> Iterator[_Collect]:
    """What an application does: a handler on the ``ludic`` logger (level left to each test)."""
    root = logging.getLogger("ludic")
    handler = _Collect()
    old_level = root.level
    root.addHandler(handler)
    try:
        yield handler
    finally:
        root.removeHandler(handler)
        root.setLevel(old_level)


@pytest.mark.parametrize(
    ("module", "expected"),
    [
        ("ludic_core.engine", "ludic.core.engine"),
        ("ludic_train.local_client", "ludic.train.local_client"),
        ("ludic_vllm.publisher", "ludic.vllm.publisher"),
        ("ludic", "ludic"),
        ("ludic.core.engine", "ludic.core.engine"),
        ("my_app.weights", "ludic.my_app.weights"),
    ],
)
def test_module_names_map_under_the_ludic_logger(module: str, expected: str) -> None:
    assert stdlib_logger_name(module) == expected
    assert get_logger(module)._logger is logging.getLogger(expected)


def test_event_and_fields_render_into_the_record(caplog: pytest.LogCaptureFixture) -> None:
    log = get_logger("ludic_core.engine")
    with caplog.at_level(logging.DEBUG, logger="ludic"):
        log.warning("engine.episode_failed", episode=3, error="ValueError('boom')", note="two words")
    [record] = caplog.records
    assert record.name == "ludic.core.engine"
    assert record.levelno == logging.WARNING
    assert record.getMessage() == (
        "engine.episode_failed episode=3 error=ValueError('boom') note='two words'"
    )
    # The structured form stays available to applications that want it.
    assert record.event_dict == {  # type: ignore[attr-defined]
        "event": "engine.episode_failed",
        "episode": 3,
        "error": "ValueError('boom')",
        "note": "two words",
    }
    # File, line and function name the call site, not structlog or ludic_core.logs.
    assert record.pathname == __file__
    assert record.funcName == "test_event_and_fields_render_into_the_record"


def test_bound_context_positional_args_and_exc_info(caplog: pytest.LogCaptureFixture) -> None:
    log = get_logger("ludic_core.engine").bind(run="r1")
    with caplog.at_level(logging.DEBUG, logger="ludic"):
        log.info("loaded %d rows", 5, split="train")
        try:
            raise ValueError("boom")
        except ValueError:
            log.exception("engine.crashed", step=2)
    loaded, crashed = caplog.records
    assert loaded.getMessage() == "loaded 5 rows run=r1 split=train"
    assert loaded.funcName == "test_bound_context_positional_args_and_exc_info"
    assert crashed.levelno == logging.ERROR
    assert crashed.getMessage() == "engine.crashed run=r1 step=2"
    assert crashed.exc_info is not None and crashed.exc_info[0] is ValueError
    # A "%" in a rendered value is not re-read as a stdlib format string.
    with caplog.at_level(logging.DEBUG, logger="ludic"):
        log.warning("rate", value="100%s")
    assert caplog.records[-1].getMessage() == "rate run=r1 value=100%s"


def test_info_is_silent_until_the_app_turns_it_on(app_handler: _Collect) -> None:
    log = get_logger("ludic_core.batch_sources")
    log.info("quiet.info")
    log.debug("quiet.debug")
    assert app_handler.records == []
    logging.getLogger("ludic").setLevel(logging.INFO)
    log.info("loud.info", n=1)
    log.debug("still.quiet")
    assert [r.getMessage() for r in app_handler.records] == ["loud.info n=1"]
    assert app_handler.records[0].name == "ludic.core.batch_sources"


def test_a_disabled_call_renders_nothing(app_handler: _Collect) -> None:
    class Loud:
        def __repr__(self) -> str:
            raise AssertionError("a disabled log call rendered its arguments")

    log = get_logger("ludic_core.engine")
    logging.getLogger("ludic").setLevel(logging.INFO)
    log.debug("costly", value=Loud())
    assert app_handler.records == []


def test_structlog_global_config_is_untouched(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG, logger="ludic"):
        get_logger("ludic_core.engine").info("anything", x=1)
    assert caplog.records
    assert not structlog.is_configured()


# Run in a fresh interpreter: pytest installs its own handlers on the root logger, so only there is
# "no logging configured" the real default.
_FRESH_PROCESS = textwrap.dedent(
    """
    import importlib, importlib.util, logging, pkgutil
    import structlog

    for top in ("ludic_core", "ludic_envs", "ludic_agents", "ludic_train", "ludic_vllm", "ludic_tinker"):
        if importlib.util.find_spec(top) is None:
            continue
        package = importlib.import_module(top)
        for info in pkgutil.walk_packages(package.__path__, top + "."):
            try:
                importlib.import_module(info.name)
            except ImportError:
                pass  # a module for an optional dependency that is not installed here

    from ludic_core.logs import get_logger

    log = get_logger("ludic_core.engine")
    log.debug("hidden.debug", a=1)
    log.info("hidden.info", a=1)
    log.warning("shown.warning", episode=3)
    problems = []
    if structlog.is_configured():
        problems.append("structlog configured")
    for name in ("", "ludic"):
        logger = logging.getLogger(name)
        if logger.handlers or (name and logger.level != logging.NOTSET):
            problems.append(f"logger {name!r} configured: {logger.handlers} level {logger.level}")
    raise SystemExit("; ".join(problems) or None)
    """
)


def test_quiet_by_default_in_a_fresh_process() -> None:
    proc = subprocess.run(
        [sys.executable, "-W", "ignore", "-c", _FRESH_PROCESS],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"},
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == ""  # never the library's: scripts may print JSON there
    # The stdlib's last-resort handler: WARNING and above, message only, on stderr.
    assert proc.stderr == "shown.warning episode=3\n"
