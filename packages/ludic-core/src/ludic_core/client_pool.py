"""Several inference servers behind one client: :class:`ClientPool`.

A run that outgrows one inference server starts several (one vLLM per node or per GPU group) and gives
the engine one pool of their clients. Each request goes to the member with the fewest requests in
flight, ties broken in turn, so a slow or busy server gets less work and a fast one more; an episode's
calls may land on different servers, which is sound as long as every server holds the same weights
(the trainer's publisher pushes each update to all of them: ``ludic_vllm`` publishers take a list of
servers). The pool is a :class:`~ludic_core.inference.ChatClient` when its members are (token level),
and a :class:`~ludic_core.message_client.MessageClient` when they are (message level).

``get_policy_version`` answers the **oldest** version any member reports: a request may be served by
any of them, so staleness is never underestimated while an update is still reaching some servers.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from ludic_core.errors import ConfigError
from ludic_core.inference import SamplingParams, TokenCompletionRequest
from ludic_core.message_client import MessageCompletion
from ludic_core.types import ChatResponse, Message

__all__ = ["ClientPool"]

T = TypeVar("T")


class ClientPool:
    """Route each request to the least-busy of ``clients`` (see the module docstring).

    ``in_flight`` and ``served`` (per member, in order) show how the load spread.
    """

    def __init__(self, clients: Sequence[Any]) -> None:
        members = list(clients)
        if not members:
            raise ConfigError("ClientPool needs at least one client, got none")
        kinds = {
            (callable(getattr(c, "complete_tokens", None)), callable(getattr(c, "complete_messages", None)))
            for c in members
        }
        if kinds - {(True, False), (False, True), (True, True)} or len(kinds) > 1:
            described = [type(c).__name__ for c in members]
            raise ConfigError(
                "ClientPool members must all be token-level ChatClients (complete_tokens) or all "
                f"MessageClients (complete_messages); got {described}"
            )
        self.clients = members
        self.in_flight = [0] * len(members)
        self.served = [0] * len(members)
        self._next = 0

    def _pick(self) -> int:
        # Least in flight; among equals, the first at or after the rotating start, so idle members
        # share the load instead of the first one taking every request.
        n = len(self.clients)
        order = [(self._next + k) % n for k in range(n)]
        index = min(order, key=lambda i: self.in_flight[i])
        self._next = (index + 1) % n
        return index

    async def _call(self, method: str, call: Callable[[Any], Awaitable[T]]) -> T:
        index = self._pick()
        client = self.clients[index]
        if not callable(getattr(client, method, None)):
            raise ConfigError(f"ClientPool member {index} ({type(client).__name__}) has no {method}")
        self.in_flight[index] += 1
        try:
            result = await call(client)
        finally:
            self.in_flight[index] -= 1
        self.served[index] += 1
        return result

    async def complete_tokens(self, request: TokenCompletionRequest) -> ChatResponse:
        return await self._call("complete_tokens", lambda c: c.complete_tokens(request))

    async def complete_messages(
        self, messages: Sequence[Message], sampling: SamplingParams, *, seed: int | None = None
    ) -> MessageCompletion:
        return await self._call(
            "complete_messages", lambda c: c.complete_messages(messages, sampling, seed=seed)
        )

    async def get_policy_version(self) -> int:
        """The oldest version among the members (each must have ``get_policy_version``)."""
        readers = [getattr(c, "get_policy_version", None) for c in self.clients]
        missing = [type(c).__name__ for c, r in zip(self.clients, readers, strict=True) if not callable(r)]
        if missing:
            raise ConfigError(f"ClientPool.get_policy_version: members {missing} report no policy version")
        versions = await asyncio.gather(*(r() for r in readers if callable(r)))
        return min(versions)

    async def aclose(self) -> None:
        closers = [getattr(c, "aclose", None) for c in self.clients]
        await asyncio.gather(*(close() for close in closers if callable(close)))

    async def __aenter__(self) -> ClientPool:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
