"""Baseline (a): one PutItem per reading with boto3, the way the seed articles write.

Reads keyed items (one JSON object per line), puts them one call at a time until the
file or the time budget ends, and prints what it did as JSON. Part of `cargo xtask bench`.
"""

import argparse
import json
import sys
import time
from decimal import Decimal

import boto3
from botocore.config import Config


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--endpoint", required=True)
    ap.add_argument("--table", required=True)
    ap.add_argument("--items", required=True)
    ap.add_argument("--seconds", type=float, default=0.0, help="stop after this long (0: no limit)")
    args = ap.parse_args()

    with open(args.items, encoding="utf-8") as f:
        items = [json.loads(line, parse_float=Decimal) for line in f if line.strip()]
    table = boto3.resource(
        "dynamodb",
        endpoint_url=args.endpoint,
        region_name="us-east-1",
        aws_access_key_id="bench",
        aws_secret_access_key="bench",
        config=Config(retries={"max_attempts": 3, "mode": "standard"}),
    ).Table(args.table)

    written = 0
    start = time.perf_counter()
    for item in items:
        if args.seconds and time.perf_counter() - start >= args.seconds:
            break
        table.put_item(Item=item)
        written += 1
    elapsed = time.perf_counter() - start
    json.dump({"written": written, "seconds": elapsed}, sys.stdout)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
