"""Publish readings to Shardline's ingest queue with boto3.

Readings go in the documented message format, ``{"readings": [...]}`` with up to 500
readings per message, ten messages per SendMessageBatch call. Entries SQS refuses are
sent again (with back-off) and reported if they keep failing. With ``--print-keys`` the
script also prints, for each reading, the DynamoDB key Shardline stores it under: the
stable shard hash of docs/formats.md (``shardline-hash-v1``) over the time-bucket layout.

    python publish.py --queue-url "$QUEUE_URL" --device sensor-alpha-001 --count 100

Credentials and region come from the usual boto3 sources; ``--endpoint-url`` points at a
local stand-in.
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import sys
import time
import uuid
from typing import Iterable, Iterator

import boto3

#: Most readings one message may carry.
MAX_READINGS_PER_MESSAGE = 500
#: Most messages one SendMessageBatch call may carry.
MAX_BATCH = 10
#: Most bytes of one message.
MAX_MESSAGE_BYTES = 256 * 1024


def shard_hash(s: str) -> int:
    """shardline-hash-v1: first 8 bytes of SHA-256(UTF-8), big-endian."""
    return int.from_bytes(hashlib.sha256(s.encode("utf-8")).digest()[:8], "big")


def shard_index(s: str, n: int) -> int:
    if n < 1:
        raise ValueError("the shard count must be at least 1")
    return shard_hash(s) % n


def rfc3339_ms(ts_ms: int) -> str:
    """UTC with milliseconds, as Shardline writes timestamps in keys."""
    t = dt.datetime.fromtimestamp(ts_ms / 1000, tz=dt.timezone.utc)
    return t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ts_ms % 1000:03d}Z"


def bucket_label(ts_ms: int, bucket: str) -> str:
    t = dt.datetime.fromtimestamp(ts_ms / 1000, tz=dt.timezone.utc)
    return {
        "minute": t.strftime("%Y-%m-%dT%H:%M"),
        "hour": t.strftime("%Y-%m-%dT%H"),
        "day": t.strftime("%Y-%m-%d"),
        "month": t.strftime("%Y-%m"),
    }[bucket]


def reading_key(
    device_id: str, event_id: str, ts_ms: int, shards: int, bucket: str, fanout: int = 1
) -> dict[str, str]:
    """The key of a reading under the time-bucket layout (N = ``shards``), for a device
    whose fan-out at the reading's keying time is ``fanout``: the cold key
    ``{s}#{bucket}`` at fan-out 1, sub-shard ``{s}.{1 + hash(event_id) % k}`` above."""
    s = shard_index(device_id, shards)
    shard = f"{s}" if fanout <= 1 else f"{s}.{1 + shard_index(event_id, fanout)}"
    return {
        "PK": f"{shard}#{bucket_label(ts_ms, bucket)}",
        "SK": f"{device_id}#{rfc3339_ms(ts_ms)}#{event_id}",
    }


def readings(device: str, count: int, start_ms: int, every_ms: int) -> Iterator[tuple[int, dict]]:
    """``count`` readings of ``device``, ``every_ms`` apart, each with its timestamp."""
    for i in range(count):
        ts_ms = start_ms + i * every_ms
        yield ts_ms, {
            "device_id": device,
            "event_id": f"{ts_ms}-{uuid.uuid4().hex[:8]}",
            "ts": rfc3339_ms(ts_ms),
            "metrics": {"temperature": 20.0 + (i % 50) / 10},
            "tags": {"source": "python-example"},
        }


def messages(items: Iterable[dict], per_message: int) -> Iterator[str]:
    """Message bodies of up to ``per_message`` readings, each within SQS's size limit."""
    chunk: list[dict] = []
    for reading in items:
        candidate = chunk + [reading]
        body = json.dumps({"readings": candidate}, separators=(",", ":"))
        if chunk and (len(candidate) > per_message or len(body.encode()) > MAX_MESSAGE_BYTES):
            yield json.dumps({"readings": chunk}, separators=(",", ":"))
            chunk = [reading]
        else:
            chunk = candidate
    if chunk:
        yield json.dumps({"readings": chunk}, separators=(",", ":"))


def send_all(sqs, queue_url: str, bodies: list[str], attempts: int = 5) -> int:
    """Sends every body with SendMessageBatch; returns how many could not be sent."""
    failed = 0
    for first in range(0, len(bodies), MAX_BATCH):
        pending = {str(i): body for i, body in enumerate(bodies[first : first + MAX_BATCH])}
        for attempt in range(attempts):
            if not pending:
                break
            if attempt:
                time.sleep(min(2.0, 0.1 * 2**attempt))
            answer = sqs.send_message_batch(
                QueueUrl=queue_url,
                Entries=[{"Id": i, "MessageBody": b} for i, b in pending.items()],
            )
            for ok in answer.get("Successful", []):
                pending.pop(ok["Id"], None)
            for refused in answer.get("Failed", []):
                if refused.get("SenderFault"):
                    # A bad entry does not get better with a retry.
                    print(f"refused: {refused}", file=sys.stderr)
                    pending.pop(refused["Id"], None)
                    failed += 1
        failed += len(pending)
    return failed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queue-url", required=True)
    parser.add_argument("--endpoint-url", help="a local stand-in instead of AWS")
    parser.add_argument("--region")
    parser.add_argument("--device", default="sensor-alpha-001")
    parser.add_argument("--count", type=int, default=100)
    parser.add_argument("--every-ms", type=int, default=1000, help="time between readings")
    parser.add_argument(
        "--start-ms", type=int, help="first reading's timestamp (default: count readings ago)"
    )
    parser.add_argument("--per-message", type=int, default=50)
    parser.add_argument("--print-keys", action="store_true", help="print each reading's key")
    parser.add_argument("--shards", type=int, default=8, help="the table's N (SHARDS)")
    parser.add_argument("--bucket", default="hour", choices=["minute", "hour", "day", "month"])
    args = parser.parse_args()
    if not 1 <= args.per_message <= MAX_READINGS_PER_MESSAGE:
        parser.error(f"--per-message must be 1 to {MAX_READINGS_PER_MESSAGE}")

    now_ms = int(time.time() * 1000)
    start_ms = args.start_ms if args.start_ms is not None else now_ms - args.count * args.every_ms
    batch = list(readings(args.device, args.count, start_ms, args.every_ms))
    bodies = list(messages((r for _, r in batch), args.per_message))
    sqs = boto3.client("sqs", endpoint_url=args.endpoint_url, region_name=args.region)
    failed = send_all(sqs, args.queue_url, bodies)
    if args.print_keys:
        for ts_ms, r in batch:
            key = reading_key(r["device_id"], r["event_id"], ts_ms, args.shards, args.bucket)
            print(json.dumps({"event_id": r["event_id"], **key}))
    print(
        f"sent {len(batch)} readings in {len(bodies)} messages; {failed} messages failed",
        file=sys.stderr,
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
