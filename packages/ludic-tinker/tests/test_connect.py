"""Missing credentials and unreachable services fail fast with clear errors (not a 5-minute retry)."""

from __future__ import annotations

import socket
import time

import pytest

from ludic_core.errors import ConfigError, TransportError
from ludic_tinker import TinkerTimeouts, connect


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_missing_api_key_is_a_config_error(monkeypatch, tmp_path):
    for name in ("TINKER_API_KEY", "TINKER_CREDENTIAL_CMD"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    with pytest.raises(ConfigError, match="TINKER_API_KEY"):
        connect(base_url="http://127.0.0.1:1")


def test_malformed_api_key_is_a_config_error():
    with pytest.raises(ConfigError, match="tml-"):
        connect(base_url="http://127.0.0.1:1", api_key="sk-not-tinker")


def test_unreachable_service_fails_within_the_reachability_timeout():
    started = time.perf_counter()
    with pytest.raises(TransportError, match="unreachable"):
        connect(
            base_url=f"http://127.0.0.1:{_closed_port()}",
            api_key="tml-x",
            timeouts=TinkerTimeouts(reachability_s=2.0),
        )
    assert time.perf_counter() - started < 5.0


def test_timeouts_must_be_positive():
    with pytest.raises(ConfigError, match="train_s"):
        TinkerTimeouts(train_s=0)
