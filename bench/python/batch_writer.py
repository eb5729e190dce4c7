"""Baseline (b): boto3's Table.batch_writer (25 puts per BatchWriteItem, resends
UnprocessedItems), one thread, as its documentation shows it.

Reads keyed items (one JSON object per line), writes them all and prints what it did as
JSON. Part of `cargo xtask bench`.
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

    start = time.perf_counter()
    with table.batch_writer(overwrite_by_pkeys=["PK", "SK"]) as batch:
        for item in items:
            batch.put_item(Item=item)
    elapsed = time.perf_counter() - start
    json.dump({"written": len(items), "seconds": elapsed}, sys.stdout)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
