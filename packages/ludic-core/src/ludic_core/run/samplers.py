"""Where a training recipe's episodes are sampled: the sampler kinds ``backend.kind`` names, registered
in the entry-point group ``"ludic.samplers"`` (name -> a callable returning a :class:`SamplerKind`):
ludic-train ``local`` (in-process), ludic-vllm ``vllm`` (vLLM servers that get the weights every step),
ludic-tinker ``tinker`` (the Tinker service samples and trains). A kind runs a recipe itself (its run
config class, runner and checks) or ``extends`` another kind: that kind's runner opens this kind's
:class:`Sampler` (``open``) around the model it trains, and its run config gains this kind's ``tables``."""

from __future__ import annotations

import importlib
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import attrs

from ludic_core.errors import ConfigError
from ludic_core.publisher import PolicyPublisher
from ludic_core.registry import Registry
from ludic_core.run.backends import PROVIDED_BY, Backend

__all__ = ["SAMPLERS", "Sampler", "SamplerKind", "SamplerOpener", "get_sampler", "import_path"]


async def _nothing_to_close() -> None:
    return None


@attrs.frozen(kw_only=True)
class Sampler:
    """``backend``: what the engine's agents sample through; ``publisher``: where the trainer publishes
    (None on torchrun ranks but 0); ``description``: one line for ``--dry-run``; ``close``: release
    what the opener started (a server, an exported model), after the backend."""

    backend: Backend
    publisher: PolicyPublisher | None
    description: str
    close: Callable[[], Awaitable[None]] = _nothing_to_close

    async def aclose(self) -> None:
        try:
            await self.backend.aclose()
        finally:
            await self.close()


SamplerOpener = Callable[..., Awaitable[Sampler]]
"""``(config, model, tokenizer, *, run_dir, dry_run, export) -> Sampler``: ``export(directory)`` writes
the trained model (merged) and its tokenizer as a pretrained directory; ``dry_run``: build what can be
built without starting or contacting anything."""


def _import_path(_instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    for path in value if isinstance(value, tuple) else (value,):
        module, sep, name = (path or "").partition(":")
        if path is not None and (not sep or not module or not name):
            raise ConfigError(
                f"{type(_instance).__name__}.{attribute.name} must be 'module:function', got {path!r}"
            )


def import_path(path: str) -> Any:
    """The object at ``"module:name"``."""
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name)


@attrs.frozen(kw_only=True)
class SamplerKind:
    """``runner`` and ``checks``, ``open``: ``"module:function"`` paths; ``tables``: table name ->
    settings class; ``defaults``: this kind's defaults for the run config."""

    summary: str
    config_class: type | None = None
    runner: str | None = attrs.field(default=None, validator=_import_path)
    checks: tuple[str, ...] = attrs.field(default=(), validator=_import_path)
    extends: str | None = None
    open: str | None = attrs.field(default=None, validator=_import_path)
    tables: Mapping[str, type] = attrs.field(factory=dict)
    defaults: Mapping[str, Any] = attrs.field(factory=dict)


SAMPLERS: Registry[Any] = Registry("sampler", "ludic.samplers")
"""Sampler kind (``backend.kind`` of a training recipe) -> a callable returning its :class:`SamplerKind`."""


def _registered(kind: str) -> SamplerKind:
    package = PROVIDED_BY.get(kind)
    SAMPLERS.check(
        kind, field="backend.kind", hint=f"; {kind} needs {package}: pip install {package}" if package else ""
    )
    return SAMPLERS.build_checked(SamplerKind, kind, field="backend.kind")


def get_sampler(kind: str) -> tuple[SamplerKind, SamplerKind]:
    """``(the kind, the kind whose runner it runs on)``; an unknown kind is a ConfigError naming
    ``backend.kind``, close names and the registered ones."""
    sampler = _registered(kind)
    if sampler.extends is None:
        return sampler, sampler
    base = _registered(sampler.extends)
    if base.config_class is None or sampler.open is None:
        raise ConfigError(f"sampler {kind!r} must open a sampler and extend a kind that runs recipes")
    fields = {name: attrs.field(type=cls, factory=cls) for name, cls in sampler.tables.items()}
    config_class = attrs.make_class(
        base.config_class.__name__, fields, bases=(base.config_class,), frozen=True, kw_only=True
    )
    return sampler, attrs.evolve(base, config_class=config_class, checks=(*sampler.checks, *base.checks))
