"""Read Shardline's readings table with boto3, blocks expanded into readings.

A block (``shardline-block-v1``, docs/formats.md "The block format") holds one device's readings
in one item, in DynamoDB's own types, columnar: ``dt`` (each member's ``ts_ms`` less the
first's), ``idp`` and ``ids`` (each member's event id after a shared prefix), ``m`` and
``tg`` (per metric and per tag, one value per member, ``None`` where a member has none),
``w`` and ``dw`` (the first member's write order and each member's less it).
Any other item of the table is one reading. ``expand`` turns an item, as boto3's
resource layer returns it, into readings; a block that breaks the format is refused
with the rule it broke, never half read.

    python read_blocks.py --table "$TABLE_NAME" > readings.jsonl

prints one JSON object per reading: ``device_id``, ``event_id``, ``ts_ms``, ``ts``,
``metrics`` (each the exact decimal stored, never a double), ``tags``, ``w`` (when the
copy was written: of two items holding one identity, Shardline answers the greater ``w``;
0 for an item stored before write orders). Credentials and region come from the usual boto3 sources;
``--endpoint-url`` points at a local stand-in.
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import re
import secrets
import struct
import sys
from decimal import Decimal
from typing import Any, Iterator

import boto3

#: The format version a block carries in ``block``.
BLOCK_FORMAT = 1
#: What a block's sort key has before the time (the blocks' lane).
BLOCK_LANE = "b#"


class BadBlock(ValueError):
    """A block that breaks the format, with the rule it broke."""


def rfc3339_ms(ts_ms: int) -> str:
    """UTC with milliseconds, as Shardline writes timestamps."""
    t = dt.datetime.fromtimestamp(ts_ms / 1000, tz=dt.timezone.utc)
    return t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ts_ms % 1000:03d}Z"


def number(value: Any) -> Decimal:
    """A metric: DynamoDB's number as boto3 reads it, a ``Decimal``, the exact decimal
    the device sent (what Shardline's readers answer), never a double."""
    return Decimal(value)


def dumps(reading: dict[str, Any]) -> str:
    """A reading as one JSON line, each metric written as its exact decimal text (the
    ``json`` module would need a double)."""
    texts: list[str] = []
    # A string no tag can hold by chance stands in for each number, then is replaced.
    token = secrets.token_hex(16)

    def placeholder(value: Any) -> str:
        if not isinstance(value, Decimal):
            raise TypeError(f"{type(value).__name__} is not JSON")
        texts.append(str(value))
        return f"{token}{len(texts) - 1}"

    line = json.dumps(reading, sort_keys=True, default=placeholder)
    return re.sub(f'"{token}(\\d+)"', lambda m: texts[int(m.group(1))], line)


def block_digest(members: list[tuple[int, str]]) -> str:
    """The 16 hex digits after ``#b.``: SHA-256 over each member's ``ts_ms`` (8 bytes,
    big-endian), its event id's length (1 byte) and the id's UTF-8 bytes."""
    h = hashlib.sha256()
    for ts_ms, event_id in members:
        raw = event_id.encode("utf-8")
        h.update(struct.pack(">q", ts_ms) + bytes([len(raw)]) + raw)
    return h.hexdigest()[:16]


def expand(item: dict[str, Any]) -> list[dict[str, Any]]:
    """The readings an item of the readings table holds, in order."""
    if "block" not in item:
        ts_ms = int(item["ts_ms"])
        return [
            {
                "device_id": item["device_id"],
                "event_id": item["event_id"],
                "ts_ms": ts_ms,
                "ts": rfc3339_ms(ts_ms),
                "metrics": {k: number(v) for k, v in item.get("metrics", {}).items()},
                "tags": dict(item.get("tags", {})),
                "w": int(item.get("w", 0)),
            }
        ]
    if int(item["block"]) != BLOCK_FORMAT:
        raise BadBlock(f"format {item['block']} is not {BLOCK_FORMAT}")
    ids = [item.get("idp", "") + rest for rest in item["ids"]]
    dts = [int(d) for d in item["dt"]]
    n = len(ids)
    if n == 0 or int(item["n"]) != n or len(dts) != n:
        raise BadBlock(f"n is {item['n']}, with {len(ids)} ids and {len(dts)} offsets")
    columns = {**item.get("m", {}), **{f"tag {k}": v for k, v in item.get("tg", {}).items()}}
    for name, column in columns.items():
        if len(column) != n:
            raise BadBlock(f"{name!r} has not {n} entries")
    first_w = int(item.get("w", 0))
    dws = [int(d) for d in item.get("dw", [])] or [0] * n
    if len(dws) != n:
        raise BadBlock(f"dw has {len(dws)} entries, not {n}")
    first_ms = int(item["ts_ms"])
    if dts[0] != 0 or ids[0] != item["event_id"]:
        raise BadBlock("its first member is not the one it names")
    members = [(first_ms + d, i) for d, i in zip(dts, ids)]
    if any(a >= b for a, b in zip(members, members[1:])):
        raise BadBlock("its members are not in order of (ts, event id), each once")
    head, _, digest = item["SK"].rpartition("#")
    if f"{BLOCK_LANE}{rfc3339_ms(first_ms)}#{ids[0]}" not in head:
        raise BadBlock("its sort key is not its first member's in the blocks' lane")
    if digest != block_digest(members):
        raise BadBlock(f"its sort key's digest {digest!r} is not its members'")
    out = []
    for i, (ts_ms, event_id) in enumerate(members):
        out.append(
            {
                "device_id": item["device_id"],
                "event_id": event_id,
                "ts_ms": ts_ms,
                "ts": rfc3339_ms(ts_ms),
                "metrics": {
                    name: number(column[i])
                    for name, column in item.get("m", {}).items()
                    if column[i] is not None
                },
                "tags": {
                    name: column[i]
                    for name, column in item.get("tg", {}).items()
                    if column[i] is not None
                },
                "w": first_w + dws[i],
            }
        )
    return out


def scan(table: Any) -> Iterator[dict[str, Any]]:
    """Every item of ``table`` (a boto3 ``Table``), page by page."""
    kwargs: dict[str, Any] = {}
    while True:
        page = table.scan(**kwargs)
        yield from page.get("Items", [])
        if "LastEvaluatedKey" not in page:
            return
        kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--table", required=True, help="the readings table")
    parser.add_argument("--endpoint-url", help="a local stand-in's endpoint")
    parser.add_argument("--region", default=None)
    args = parser.parse_args(argv)
    dynamodb = boto3.resource("dynamodb", endpoint_url=args.endpoint_url, region_name=args.region)
    table = dynamodb.Table(args.table)
    out = sys.stdout
    for item in scan(table):
        for reading in expand(item):
            out.write(dumps(reading) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
