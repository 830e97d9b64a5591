"""Print queued pipeline messages as JSON lines: ``python -m ludic_core.pipeline.dump URL KEY``.

The wire format is binary (msgpack with packed token arrays), so ``redis-cli LRANGE`` shows bytes;
this reads the same list with ``LRANGE`` (nothing is popped or changed) and prints one JSON object per
message: the header, the batch meta and, per item, its length, action tokens, weight and meta (with
``--tokens``, also its token ids, masks and logprobs). A message that does not decode, e.g. in the
dead-letter list (``--dead``), is printed with the reason the learner refused it and its first bytes.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any

from ludic_core.errors import DataError, missing_extra
from ludic_core.pipeline.connection import redact_url
from ludic_core.pipeline.wire import BatchMessage, dead_letter_key, decode_message, excerpt
from ludic_core.saw import SAWItem

__all__ = ["describe", "main"]


def _describe_item(item: SAWItem, *, tokens: bool) -> dict[str, Any]:
    described: dict[str, Any] = {
        "tokens": len(item),
        "action_tokens": item.num_action_tokens,
        "weight": item.weight,
        "sampling_temperature": item.sampling_temperature,
        "has_actor_logps": item.actor_logps is not None,
        "has_teacher_logps": item.teacher_logps is not None,
        "meta": item.meta,
    }
    if tokens:
        described.update(
            input_ids=item.input_ids,
            action_mask=item.action_mask,
            actor_logps=item.actor_logps,
            teacher_logps=item.teacher_logps,
        )
    return described


def describe(raw: bytes, *, tokens: bool = False) -> dict[str, Any]:
    """A JSON-ready view of one raw message, or of why it does not decode."""
    try:
        message: BatchMessage = decode_message(raw)
    except DataError as exc:
        return {"bytes": len(raw), "error": str(exc), "starts": excerpt(raw, 80)}
    return {
        "bytes": len(raw),
        "actor_id": message.actor_id,
        "batch_index": message.batch_index,
        "created_at": message.created_at,
        "policy_version": message.policy_version,
        "num_rollouts": message.num_rollouts,
        "meta": message.meta,
        "items": [_describe_item(item, tokens=tokens) for item in message.items],
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m ludic_core.pipeline.dump", description=(__doc__ or "").split("\n\n")[0]
    )
    parser.add_argument("url", help="e.g. redis://127.0.0.1:6379/0")
    parser.add_argument("queue_key", help="the actors' queue_key, e.g. ludic:pipeline:batches")
    parser.add_argument("--dead", action="store_true", help="read <queue_key>:dead instead")
    parser.add_argument("--start", type=int, default=0, help="first list index (default 0: the oldest)")
    parser.add_argument("--count", type=int, default=1, help="how many messages (default 1)")
    parser.add_argument("--tokens", action="store_true", help="also print token ids, masks and logprobs")
    parser.add_argument("--timeout-s", type=float, default=10.0, help="bound on connecting and reading")
    args = parser.parse_args(argv)
    if args.count < 1:
        parser.error(f"--count must be >= 1, got {args.count}")
    try:
        import redis
    except ImportError as exc:
        raise missing_extra("ludic-core", "redis", "redis") from exc
    key = dead_letter_key(args.queue_key) if args.dead else args.queue_key
    client = redis.Redis.from_url(
        args.url, socket_connect_timeout=args.timeout_s, socket_timeout=args.timeout_s
    )
    try:
        raws = client.lrange(key, args.start, args.start + args.count - 1)
    except (redis.RedisError, OSError) as exc:
        print(f"Redis at {redact_url(args.url)} failed LRANGE {key!r}: {exc}", file=sys.stderr)
        return 1
    finally:
        client.close()
    for offset, raw in enumerate(raws):
        data = raw if isinstance(raw, bytes) else str(raw).encode()  # bytes: the client does not decode
        view = {"key": key, "index": args.start + offset, **describe(data, tokens=args.tokens)}
        # default=repr: meta may hold bytes or int keys, which JSON cannot show as they are.
        print(json.dumps(view, default=repr, ensure_ascii=False))
    if not raws:
        print(f"{key!r} holds no message at index {args.start}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
