"""Pipeline RL over Redis: actors generate while the learner trains (``pip install "ludic-core[redis]"``).

* :mod:`~ludic_core.pipeline.wire` — the binary (msgpack) message format, one message per actor batch;
* :mod:`~ludic_core.pipeline.actor` — :class:`RedisPipelineActor` / :func:`run_pipeline_actor`;
* :mod:`~ludic_core.pipeline.source` — :class:`RedisBatchSource`, the learner's ``BatchSource``;
* :mod:`~ludic_core.pipeline.versions` — reading a sampler's policy version without guessing;
* :mod:`~ludic_core.pipeline.connection` — lazy ``redis.asyncio`` connections with bounded waits.

Importing this package does not import ``redis``; connecting does (a missing install raises an error
that names the extra).
"""

from ludic_core.pipeline.actor import ActorStats, RedisPipelineActor, run_pipeline_actor
from ludic_core.pipeline.source import RedisBatchSource
from ludic_core.pipeline.versions import read_policy_version
from ludic_core.pipeline.wire import (
    DEFAULT_QUEUE_KEY,
    WIRE_FORMAT,
    WIRE_VERSION,
    BatchMessage,
    WireLimits,
    dead_letter_key,
    decode_message,
    encode_message,
)

__all__ = [
    "DEFAULT_QUEUE_KEY",
    "WIRE_FORMAT",
    "WIRE_VERSION",
    "ActorStats",
    "BatchMessage",
    "RedisBatchSource",
    "RedisPipelineActor",
    "WireLimits",
    "dead_letter_key",
    "decode_message",
    "encode_message",
    "read_policy_version",
    "run_pipeline_actor",
]
