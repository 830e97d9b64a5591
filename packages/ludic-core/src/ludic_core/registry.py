"""Register and build envs, interaction protocols and agent harnesses by name.

Packages register components as entry points (``[project.entry-points."ludic.envs"]`` ``tictactoe =
"ludic_envs.tictactoe:TicTacToeEnv"``), so installing ``ludic-envs`` makes ``make_env("tictactoe")`` work
with no import by the user. Entry points load lazily, on first request of their name, and names
registered in code take precedence. ludic-core's standard protocols (``"single_agent"``,
``"multi_agent"``, ``"delegating"``; kwargs in :mod:`ludic_core.protocols.standard`) are built in, not
entry points, so they resolve without package metadata (a source checkout on ``sys.path``).
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Callable, Mapping
from importlib import metadata
from typing import Any, Generic, TypeVar

from ludic_core.errors import ConfigError, RegistryError
from ludic_core.suggestions import did_you_mean

__all__ = [
    "AGENTS",
    "ALGORITHMS",
    "ENVS",
    "PROTOCOLS",
    "Registry",
    "make_agent",
    "make_algorithm",
    "make_env",
    "make_protocol",
    "register_agent",
    "register_algorithm",
    "register_env",
    "register_protocol",
]

T = TypeVar("T")
B = TypeVar("B")
Factory = Callable[..., T]


class Registry(Generic[T]):
    """A name → factory table for one kind of component, backed by an entry-point group."""

    def __init__(
        self, kind: str, entry_point_group: str | None, *, builtins: Mapping[str, str] | None = None
    ) -> None:
        self.kind = kind
        self.entry_point_group = entry_point_group
        # name -> "module:attribute", imported on first use; consulted before entry points so that an
        # installed package cannot silently replace a built-in name (register in code to do that).
        self._builtins = dict(builtins or {})
        self._factories: dict[str, Factory[T]] = {}
        self._lock = threading.Lock()

    def register(self, name: str, factory: Factory[T], *, overwrite: bool = False) -> Factory[T]:
        if not name or not isinstance(name, str):
            raise RegistryError(f"{self.kind} name must be a non-empty str, got {name!r}")
        if not callable(factory):
            raise RegistryError(f"{self.kind} {name!r}: factory must be callable, got {factory!r}")
        with self._lock:
            if name in self._factories and not overwrite and self._factories[name] is not factory:
                raise RegistryError(
                    f"{self.kind} {name!r} is already registered to {self._factories[name]!r}; "
                    "pass overwrite=True to replace it"
                )
            self._factories[name] = factory
        return factory

    def unregister(self, name: str) -> None:
        with self._lock:
            self._factories.pop(name, None)

    def _entry_points(self) -> dict[str, metadata.EntryPoint]:
        if self.entry_point_group is None:
            return {}
        return {ep.name: ep for ep in metadata.entry_points(group=self.entry_point_group)}

    def names(self) -> list[str]:
        return sorted(set(self._factories) | set(self._builtins) | set(self._entry_points()))

    def get(self, name: str) -> Factory[T]:
        with self._lock:
            factory = self._factories.get(name)
        if factory is not None:
            return factory
        target = self._builtins.get(name)
        if target is not None:
            module, _, attribute = target.partition(":")
            return self.register(name, getattr(importlib.import_module(module), attribute))
        ep = self._entry_points().get(name)
        if ep is None:
            raise RegistryError(self.unknown(name))
        try:
            loaded = ep.load()
        except Exception as exc:
            raise RegistryError(
                f"{self.kind} {name!r}: loading entry point {ep.value!r} failed: {exc}"
            ) from exc
        return self.register(name, loaded)

    def unknown(self, name: str) -> str:
        """The error text for an unregistered ``name``: the closest registered names, then all of them."""
        group = f" (entry-point group {self.entry_point_group!r})" if self.entry_point_group else ""
        return f"unknown {self.kind} {name!r}; {did_you_mean(name, self.names())}known: {self.names()}{group}"

    def build(self, name: str, /, **kwargs: Any) -> T:
        return self.get(name)(**kwargs)

    def check(self, name: str, *, field: str, hint: str = "") -> None:
        """Refuse an unregistered ``name`` given as ``field`` with a :class:`ConfigError` naming the
        close names, all of them and the entry-point group, then ``hint``."""
        if name not in self:
            group = f" (entry-point group {self.entry_point_group!r})" if self.entry_point_group else ""
            raise ConfigError(
                f"{field} = {name!r}: not a registered {self.kind}; {did_you_mean(name, self.names())}"
                f"registered: {', '.join(self.names()) or 'none'}{group}{hint}"
            )

    def build_checked(self, cls: type[B], name: str, /, *, field: str, **kwargs: Any) -> B:
        """``build(name, **kwargs)`` after :meth:`check`; a ConfigError unless it built a ``cls``."""
        self.check(name, field=field)
        built = self.build(name, **kwargs)
        if not isinstance(built, cls):
            raise ConfigError(
                f"{self.kind} {name!r} is registered as {type(built).__name__}, not a {cls.__name__}"
            )
        return built

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name in self.names()


ENVS: Registry[Any] = Registry("env", "ludic.envs")
PROTOCOLS: Registry[Any] = Registry(
    "protocol",
    "ludic.protocols",
    builtins={
        "single_agent": "ludic_core.protocols.standard:SINGLE_AGENT",
        "multi_agent": "ludic_core.protocols.standard:MULTI_AGENT",
        "delegating": "ludic_core.protocols.standard:DELEGATING",
    },
)
AGENTS: Registry[Any] = Registry("agent", "ludic.agents")


def register_env(name: str, factory: Factory[Any], *, overwrite: bool = False) -> Factory[Any]:
    return ENVS.register(name, factory, overwrite=overwrite)


def register_protocol(name: str, factory: Factory[Any], *, overwrite: bool = False) -> Factory[Any]:
    return PROTOCOLS.register(name, factory, overwrite=overwrite)


def register_agent(name: str, factory: Factory[Any], *, overwrite: bool = False) -> Factory[Any]:
    return AGENTS.register(name, factory, overwrite=overwrite)


def make_env(name: str, /, **kwargs: Any) -> Any:
    """Build a registered env: ``make_env("tictactoe", opponent="minimax")``."""
    return ENVS.build(name, **kwargs)


def make_protocol(name: str, /, **kwargs: Any) -> Any:
    return PROTOCOLS.build(name, **kwargs)


def make_agent(name: str, /, **kwargs: Any) -> Any:
    return AGENTS.build(name, **kwargs)


ALGORITHMS: Registry[Any] = Registry("algorithm", "ludic.algorithms")
"""RL algorithm presets by name: each factory takes keyword arguments and returns an algorithm. ludic-core
registers its presets (:mod:`ludic_core.algorithms.presets`: ``"grpo"``, ``"spo"``, ``"opd"``, ``"mopd"``
…), which return a torch-free :class:`~ludic_core.algorithms.spec.AlgorithmSpec` that every trainer
takes."""


def register_algorithm(name: str, factory: Factory[Any], *, overwrite: bool = False) -> Factory[Any]:
    return ALGORITHMS.register(name, factory, overwrite=overwrite)


def make_algorithm(name: str, /, **kwargs: Any) -> Any:
    """Build a registered algorithm preset: ``make_algorithm("grpo", group_size=8)``."""
    return ALGORITHMS.build(name, **kwargs)
