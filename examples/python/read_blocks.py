"""Read Shardline's readings table with boto3, blocks expanded into readings.

A block (``shardline-block-v1``, docs/formats.md "The block format") holds one device's readings
in one item, in DynamoDB's own types, columnar: ``dt`` (each member's ``ts_ms`` less the
first's), ``idp`` and ``ids`` (each member's event id after a shared prefix), ``m`` and
``tg`` (per metric and per tag, one value per member, ``None`` where a member has none),
``w`` and ``dw`` (the first member's write order and each member's less it).
A slab or a run (``shardline-slab-v2``, docs/formats.md "The slab format") holds many
devices' readings the same way, with ``devs`` and ``dn`` (the devices, and each one's
number of members), ``t0`` (the members' times are ``t0 + dt``) and, for a sparse
column, ``mi`` or ``ti`` (the places of the members its values are of), its columns one
JSON object compressed by zlib in ``z`` (format 2; format 1 holds each as an attribute);
a compacted window's marker (``marker``) holds no reading.
Any other item of the table is one reading. ``expand`` turns an item, as boto3's
resource layer returns it, into readings; a block or slab that breaks the format is
refused with the rule it broke, never half read.

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
import zlib
from decimal import Decimal
from typing import Any, Iterator

import boto3

#: The format version a block carries in ``block``.
BLOCK_FORMAT = 1
#: What a block's sort key has before the time (the blocks' lane).
BLOCK_LANE = "b#"
#: The format version a slab or a run carries in ``slab``: its columns packed in ``z``.
SLAB_FORMAT = 2
#: The format version of a slab or a run whose columns are attributes of their own.
SLAB_FORMAT_PLAIN = 1
#: The columns a packed slab's ``z`` holds, and no other name.
SLAB_COLUMNS = {"devs", "dn", "dt", "dw", "idp", "ids", "m", "mi", "t0", "tg", "ti", "w"}
#: The most bytes a packed slab's columns inflate to.
MAX_INFLATED = 4 * 1024 * 1024


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


def slab_digest(members: list[tuple[str, int, str]]) -> str:
    """A slab's sort key: SHA-256 over each member's device's length (1 byte) and UTF-8
    bytes, its ``ts_ms`` (8 bytes, big-endian), its event id's length (1 byte) and
    UTF-8 bytes; the first 16 hex digits."""
    h = hashlib.sha256()
    for device, ts_ms, event_id in members:
        d, e = device.encode("utf-8"), event_id.encode("utf-8")
        h.update(bytes([len(d)]) + d + struct.pack(">q", ts_ms) + bytes([len(e)]) + e)
    return h.hexdigest()[:16]


def slab_column(name: str, values: list[Any], places: list[Any] | None, n: int) -> list[Any]:
    """One column of a slab, one entry per member (``None`` where a member has none):
    dense as stored, or sparse, its values at ``places``."""
    if places is None:
        if len(values) != n:
            raise BadBlock(f"{name!r} has not {n} entries")
        return list(values)
    at = [int(p) for p in places]
    if len(at) != len(values) or any(a >= b for a, b in zip(at, at[1:])):
        raise BadBlock(f"{name!r}'s places are not ascending, one a value")
    if at and not 0 <= at[0] <= at[-1] < n:
        raise BadBlock(f"{name!r} has a place outside its {n} members")
    column: list[Any] = [None] * n
    for place, value in zip(at, values):
        column[place] = value
    return column


def unpack_slab(item: dict[str, Any]) -> dict[str, Any]:
    """A packed slab's (format 2) attributes with its columns inflated from ``z``, as a
    plain slab (format 1) holds them; a plain one as it is."""
    version = int(item["slab"])
    if version == SLAB_FORMAT_PLAIN:
        return item
    if version != SLAB_FORMAT:
        raise BadBlock(f"slab format {version} is not {SLAB_FORMAT_PLAIN} or {SLAB_FORMAT}")
    packed = item.get("z")
    if packed is None or SLAB_COLUMNS & item.keys():
        raise BadBlock("a packed slab holds its columns in z, and only there")
    # boto3 reads a binary attribute as a Binary, whose .value is the bytes.
    inflate = zlib.decompressobj()
    text = inflate.decompress(bytes(getattr(packed, "value", packed)), MAX_INFLATED + 1)
    if len(text) > MAX_INFLATED or not inflate.eof:
        raise BadBlock(f"z is no zlib stream of at most {MAX_INFLATED} bytes")
    columns = json.loads(text)
    if not isinstance(columns, dict) or not columns.keys() <= SLAB_COLUMNS:
        raise BadBlock("z is not an object of the slab's columns")
    # A metric's number is the string of its decimal; every other number an integer.
    return {k: v for k, v in item.items() if k != "z"} | columns


def expand_slab(item: dict[str, Any]) -> list[dict[str, Any]]:
    """The readings a slab or a run holds, in order of (device, ts, event id)."""
    item = unpack_slab(item)
    n = int(item["n"])
    devs, counts = list(item["devs"]), [int(c) for c in item["dn"]]
    if len(devs) != len(counts) or any(c < 1 for c in counts) or sum(counts) != n:
        raise BadBlock(f"dn {counts} does not share {n} members among {len(devs)} devices")
    devices = [d for d, c in zip(devs, counts) for _ in range(c)]
    t0 = int(item["t0"])
    dts = [int(d) for d in item["dt"]]
    ids = [item.get("idp", "") + rest for rest in item["ids"]]
    if len(dts) != n or len(ids) != n:
        raise BadBlock(f"n is {n}, with {len(ids)} ids and {len(dts)} offsets")
    if any(not 0 <= d < 3_600_000 for d in dts):
        raise BadBlock("an offset outside the hour from t0")
    members = [(dev, t0 + d, i) for dev, d, i in zip(devices, dts, ids)]
    if any(a >= b for a, b in zip(members, members[1:])):
        raise BadBlock("its members are not in order of (device, ts, event id), each once")
    if item["PK"].startswith("s#") and item["SK"] != slab_digest(members):
        raise BadBlock(f"its sort key {item['SK']!r} is not its members' digest")
    if item["PK"].startswith("r#") and not item["SK"].startswith(f"{devs[0]}#"):
        raise BadBlock("its sort key does not start with its first device")
    metrics = {
        name: slab_column(name, values, item.get("mi", {}).get(name), n)
        for name, values in item.get("m", {}).items()
    }
    tags = {
        name: slab_column(f"tag {name}", values, item.get("ti", {}).get(name), n)
        for name, values in item.get("tg", {}).items()
    }
    first_w = int(item.get("w", 0))
    dws = [int(d) for d in item.get("dw", [])] or [0] * n
    if len(dws) != n:
        raise BadBlock(f"dw has {len(dws)} entries, not {n}")
    return [
        {
            "device_id": device,
            "event_id": event_id,
            "ts_ms": ts_ms,
            "ts": rfc3339_ms(ts_ms),
            "metrics": {k: number(c[i]) for k, c in metrics.items() if c[i] is not None},
            "tags": {k: c[i] for k, c in tags.items() if c[i] is not None},
            "w": first_w + dws[i],
        }
        for i, (device, ts_ms, event_id) in enumerate(members)
    ]


def expand(item: dict[str, Any]) -> list[dict[str, Any]]:
    """The readings an item of the readings table holds, in order."""
    if "marker" in item:
        return []
    if "slab" in item:
        return expand_slab(item)
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
