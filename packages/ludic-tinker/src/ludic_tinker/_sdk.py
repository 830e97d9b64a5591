"""One way to call the Tinker SDK across versions 0.25 to 0.38, with a timeout on every wait.

What differs between versions and how this module absorbs it:

* client-creating calls (``create_lora_training_client``, ``create_sampling_client``,
  ``save_weights_and_get_sampling_client``…) return the client itself and block up to 0.36, and a
  future of the client in 0.38 (using that future *as* the client warns). :func:`call_for_client`
  runs the call off the event loop and unwraps a future when it gets one;
* ``SamplingClient.sample`` returns a ``concurrent.futures.Future`` up to 0.36 and a
  ``tinker.APIFuture`` (that is also a concurrent future) in 0.38. :func:`wait_result` takes both;
* every ``*_async`` method is deprecated in 0.38; this package never calls them.

The SDK's own waits have no default timeout (several reported hangs), so nothing here waits without
one, and SDK exceptions become :mod:`ludic_core.errors` exceptions that say what was waited for.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import threading
import typing
from collections.abc import Callable
from importlib import metadata
from typing import Any, TypeVar

import tinker

from ludic_core.errors import ConfigError, DataError, LudicTimeoutError, TransportError
from ludic_core.threads import run_in_daemon_thread

T = TypeVar("T")

__all__ = [
    "TinkerRequestError",
    "call_for_client",
    "call_for_client_blocking",
    "sdk_has_field",
    "sdk_version",
    "supported_loss_fns",
    "translate_error",
    "wait_result",
]


class TinkerRequestError(TransportError):
    """The Tinker service (or the SDK on its behalf) rejected or failed a request.

    ``category`` is the service's error category (``user``, ``server`` or ``unknown``); ``user`` means
    the request itself was invalid, so retrying it will not help.
    """

    def __init__(self, message: str, *, category: str = "unknown") -> None:
        super().__init__(message)
        self.category = category


@functools.cache
def sdk_version() -> tuple[int, ...]:
    """The installed ``tinker`` version as a tuple of ints, e.g. ``(0, 38, 0)``."""
    raw = metadata.version("tinker")
    parts: list[int] = []
    for piece in raw.split(".")[:3]:
        digits = "".join(ch for ch in piece if ch.isdigit())
        parts.append(int(digits) if digits else 0)
    return tuple(parts)


@functools.cache
def supported_loss_fns() -> frozenset[str]:
    """The built-in losses the installed SDK accepts (``LossFnType`` grows across versions)."""
    return frozenset(typing.get_args(tinker.types.LossFnType))


def sdk_has_field(model: type[Any], name: str) -> bool:
    """Whether a pydantic SDK type has a field (e.g. ``AdamParams.weight_decay``)."""
    fields = getattr(model, "model_fields", None)
    return fields is not None and name in fields


def translate_error(exc: BaseException, what: str) -> Exception:
    """Map an SDK exception to the Ludic hierarchy, naming the operation that failed."""
    if isinstance(exc, tinker.RequestFailedError):
        category = getattr(getattr(exc, "category", None), "value", None) or str(
            getattr(exc, "category", "unknown")
        )
        return TinkerRequestError(
            f"Tinker {what} failed ({category} error): {exc}", category=str(category).lower()
        )
    if isinstance(exc, tinker.AuthenticationError | tinker.PermissionDeniedError):
        return ConfigError(f"Tinker rejected the credentials during {what}: {exc}")
    if isinstance(exc, tinker.APIConnectionError):
        return TransportError(f"could not reach the Tinker service during {what}: {exc}")
    if isinstance(exc, tinker.TinkerError):
        return TinkerRequestError(f"Tinker {what} failed: {exc}")
    if isinstance(exc, ValueError) and "Error retrieving result" in str(exc):
        # A fatal HTTP status while polling a future surfaces from the SDK as a ValueError.
        return TinkerRequestError(f"Tinker {what} failed: {exc}")
    if isinstance(exc, DataError | ConfigError):
        return exc
    return TransportError(f"Tinker {what} failed: {type(exc).__name__}: {exc}")


async def wait_result(future: Any, *, timeout_s: float, what: str) -> Any:
    """Await a Tinker future of any SDK version without blocking the event loop, for ``timeout_s``.

    Accepts a ``tinker.APIFuture`` (0.38's ``sample()`` result is one, as are training futures in
    every supported version) or a ``concurrent.futures.Future`` (``sample()`` up to 0.36).
    """
    try:
        if isinstance(future, tinker.APIFuture):
            return await asyncio.wait_for(future.result_async(timeout=timeout_s), timeout=timeout_s + 1.0)
        if isinstance(future, concurrent.futures.Future):
            return await asyncio.wait_for(asyncio.wrap_future(future), timeout=timeout_s)
    except TimeoutError as exc:
        raise LudicTimeoutError(f"waited {timeout_s:g} s for Tinker {what} and got no result") from exc
    except Exception as exc:
        raise translate_error(exc, what) from exc
    raise DataError(f"Tinker {what} returned {type(future).__name__}, expected a future")


async def call_for_client(fn: Callable[[], Any], *, timeout_s: float, what: str) -> Any:
    """Run a client-creating SDK call and return the client, on any SDK version.

    The call runs in a worker thread because the SDK may block the caller (≤0.36 always does, and
    every version does while it opens its session). A future of the client (0.38) is unwrapped.
    The worker thread cannot be cancelled: on timeout it is abandoned and the error says so. It is a
    daemon thread: on the event loop's default executor, ``asyncio.run`` would wait at shutdown for
    the SDK's background retries (minutes) before the process could exit.
    """

    try:
        return await asyncio.wait_for(
            run_in_daemon_thread(lambda: _client_of(fn, timeout_s), name="ludic-tinker-create-client"),
            timeout=timeout_s,
        )
    except TimeoutError as exc:
        raise LudicTimeoutError(
            f"waited {timeout_s:g} s for Tinker {what}; the service did not answer in time "
            "(the SDK keeps retrying in the background until it gives up)"
        ) from exc
    except Exception as exc:
        raise translate_error(exc, what) from exc


def call_for_client_blocking(fn: Callable[[], Any], *, timeout_s: float, what: str) -> Any:
    """:func:`call_for_client` for a synchronous caller (a constructor), with the same timeout, daemon
    thread and errors: the caller blocks, but never longer than ``timeout_s``."""
    outcome: list[Any] = []
    failure: list[BaseException] = []

    def work() -> None:
        try:
            outcome.append(_client_of(fn, timeout_s))
        except BaseException as exc:  # re-raised in the caller below
            failure.append(exc)

    thread = threading.Thread(target=work, name="ludic-tinker-create-client", daemon=True)
    thread.start()
    thread.join(timeout_s)
    if thread.is_alive():
        raise LudicTimeoutError(
            f"waited {timeout_s:g} s for Tinker {what}; the service did not answer in time "
            "(the SDK keeps retrying in the background until it gives up)"
        )
    if failure:
        raise translate_error(failure[0], what) from failure[0]
    return outcome[0]


def _client_of(fn: Callable[[], Any], timeout_s: float) -> Any:
    """``fn()``'s client: the call's result, or the result of the future it returned (SDK 0.38)."""
    result = fn()
    if isinstance(result, tinker.APIFuture):
        result = result.result(timeout=timeout_s)
    return result
