#!/usr/bin/env python3
"""Times PostgresSink against the database at --postgres: µs a record.

One thread applies --records records one transaction each (apply), then
the same count in batches of --batch (apply_batch); each effect is one
INSERT. Prints {"apply_us": ..., "batch_us": ...}.
"""
import argparse
import json
import time

import psycopg

from keyshare_endpoint import Record
from keyshare_endpoint.postgres import PostgresSink


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--postgres", required=True)
    p.add_argument("--records", type=int, default=2000)
    p.add_argument("--batch", type=int, default=100)
    args = p.parse_args()
    with psycopg.connect(args.postgres, autocommit=True) as c:
        c.execute("CREATE TABLE IF NOT EXISTS bench_effects (kafka_offset bigint, value bytea)")
    sink = PostgresSink(args.postgres, prefix="bench_", pool_size=1)
    sink.create_schema()

    def effect(cur, rec):
        cur.execute("INSERT INTO bench_effects VALUES (%s, %s)", (rec.offset, rec.value))

    def record(offset, partition):
        return Record("bench", partition, offset, None, b"key", b"value", [], 1, 7, 0, 1 << 32, 5, "m")

    n, out = args.records, {}
    start = time.perf_counter()
    for o in range(n):
        sink.apply(record(o, 0), effect)
    out["apply_us"] = (time.perf_counter() - start) / n * 1e6
    start = time.perf_counter()
    for o in range(0, n, args.batch):
        sink.apply_batch([record(i, 1) for i in range(o, o + args.batch)], effect)
    out["batch_us"] = (time.perf_counter() - start) / n * 1e6
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
