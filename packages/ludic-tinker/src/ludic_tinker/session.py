"""Opening a Tinker session: credentials and reachability checked up front, clients created with timeouts.

The SDK raises for a missing key only at the first client creation, and for an unreachable service it
retries silently for five minutes. :func:`connect` fails in seconds instead:
it checks that a credential is configured and that the service answers HTTP at all before handing
back a ``tinker.ServiceClient``.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import attrs
import tinker

from ludic_core.errors import ConfigError, TransportError
from ludic_core.logs import get_logger
from ludic_core.rollout_settings import DEFAULT_MODEL_CALL_TIMEOUT_S
from ludic_tinker._sdk import call_for_client

__all__ = [
    "DEFAULT_BASE_URL",
    "TinkerTimeouts",
    "connect",
    "create_training_client",
    "create_training_client_from_checkpoint",
]

log = get_logger(__name__)

DEFAULT_BASE_URL = "https://tinker.thinkingmachines.dev/services/tinker-prod"


def _positive(_i: Any, attribute: attrs.Attribute[Any], value: float) -> None:
    if not value > 0:
        raise ConfigError(f"TinkerTimeouts.{attribute.name} must be > 0 seconds, got {value!r}")


@attrs.frozen
class TinkerTimeouts:
    """How long each kind of Tinker call may take, in seconds."""

    reachability_s: float = attrs.field(default=10.0, validator=_positive)
    create_client_s: float = attrs.field(default=180.0, validator=_positive)
    sample_s: float = attrs.field(default=DEFAULT_MODEL_CALL_TIMEOUT_S, validator=_positive)
    train_s: float = attrs.field(default=900.0, validator=_positive)
    """One ``forward_backward`` or ``optim_step`` result (a busy service queues them)."""
    save_s: float = attrs.field(default=600.0, validator=_positive)


def resolve_base_url(base_url: str | None) -> str:
    return (base_url or os.environ.get("TINKER_BASE_URL") or DEFAULT_BASE_URL).rstrip("/")


def _has_credentials(api_key: str | None) -> bool:
    if api_key or os.environ.get("TINKER_API_KEY") or os.environ.get("TINKER_CREDENTIAL_CMD"):
        return True
    auth = getattr(tinker, "auth", None)
    has = getattr(auth, "tinker_has_credentials", None)
    if has is not None:  # also finds a key stored by `tinker auth login` (SDK ≥ 0.30)
        return bool(has())
    return (Path.home() / ".tinker" / "credentials.json").exists()


def check_reachable(base_url: str, *, timeout_s: float) -> None:
    """Raise :class:`TransportError` unless ``base_url`` answers HTTP within ``timeout_s``.

    Any HTTP status counts as reachable (authentication is the SDK's business); only a failed
    connection or a timeout does not. ``timeout_s`` bounds the whole probe: httpx's own timeout is
    per read, so a server that drips one byte at a time would hold it forever. The probe runs in a
    daemon thread that is abandoned when the deadline passes.
    """
    import httpx  # a dependency of tinker

    outcome: list[BaseException | None] = []

    def probe() -> None:
        try:
            # The status line and headers are the answer; the body is never read.
            with httpx.stream("GET", f"{base_url}/api/v1/healthz", timeout=timeout_s):
                outcome.append(None)
        except BaseException as exc:  # handed to the caller's thread below
            outcome.append(exc)

    thread = threading.Thread(target=probe, name="ludic-tinker-reachability", daemon=True)
    thread.start()
    thread.join(timeout_s)
    hint = "check TINKER_BASE_URL and the network (without this check the SDK would retry for ~5 minutes)"
    if not outcome:
        raise TransportError(
            f"the Tinker service at {base_url} is unreachable: no complete answer within "
            f"timeout_s={timeout_s:g} (a deadline for the whole request); {hint}"
        )
    error = outcome[0]
    if isinstance(error, httpx.HTTPError):
        raise TransportError(
            f"the Tinker service at {base_url} is unreachable ({type(error).__name__}: {error}); {hint}"
        ) from error
    if error is not None:
        raise error


def connect(
    *,
    base_url: str | None = None,
    api_key: str | None = None,
    timeouts: TinkerTimeouts | None = None,
    verify_reachable: bool = True,
    **service_kwargs: Any,
) -> tinker.ServiceClient:
    """A ``tinker.ServiceClient`` for ``base_url`` (default: ``TINKER_BASE_URL`` or production).

    Raises :class:`~ludic_core.errors.ConfigError` at once when no credential is configured (no
    ``api_key``, ``TINKER_API_KEY``, ``TINKER_CREDENTIAL_CMD`` or stored login), and
    :class:`~ludic_core.errors.TransportError` within ``timeouts.reachability_s`` when the service
    does not answer.
    """
    timeouts = timeouts or TinkerTimeouts()
    url = resolve_base_url(base_url)
    if not _has_credentials(api_key):
        raise ConfigError(
            "no Tinker API key: set the TINKER_API_KEY environment variable (keys start with 'tml-'), "
            "pass api_key=..., or run `tinker auth login`"
        )
    if api_key is not None and not api_key.startswith(("tml-", "eyJ")):
        raise ConfigError(f"api_key must start with 'tml-' (a Tinker key), got one starting {api_key[:4]!r}")
    if verify_reachable:
        check_reachable(url, timeout_s=timeouts.reachability_s)
    log.info("tinker.connect", base_url=url)
    return tinker.ServiceClient(base_url=url, api_key=api_key, **service_kwargs)


async def create_training_client(
    service: tinker.ServiceClient,
    base_model: str,
    *,
    rank: int = 32,
    seed: int | None = None,
    timeouts: TinkerTimeouts | None = None,
) -> tinker.TrainingClient:
    """A new LoRA training run on ``base_model``."""
    if rank < 1:
        raise ConfigError(f"rank must be >= 1, got {rank!r}")
    timeouts = timeouts or TinkerTimeouts()
    return await call_for_client(
        lambda: service.create_lora_training_client(base_model=base_model, rank=rank, seed=seed),
        timeout_s=timeouts.create_client_s,
        what=f"create_lora_training_client({base_model!r})",
    )


async def create_training_client_from_checkpoint(
    service: tinker.ServiceClient,
    path: str,
    *,
    with_optimizer: bool = True,
    timeouts: TinkerTimeouts | None = None,
) -> tinker.TrainingClient:
    """A training run restored from a ``save_state`` checkpoint (weights, and Adam state by default)."""
    if not path.startswith("tinker://"):
        raise ConfigError(f"checkpoint path must be a tinker:// path from save_state, got {path!r}")
    timeouts = timeouts or TinkerTimeouts()
    create = (
        service.create_training_client_from_state_with_optimizer
        if with_optimizer
        else service.create_training_client_from_state
    )
    return await call_for_client(
        lambda: create(path), timeout_s=timeouts.create_client_s, what=f"restoring training state from {path}"
    )
