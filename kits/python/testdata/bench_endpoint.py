#!/usr/bin/env python3
"""The endpoint of kits/python's benchmark: the kit, with Parallel Consumer's work.

Each record's work is a sleep uniform in 0-5 ms drawn from its partition
and offset (the same draw as keyshare-bench's), a request's records one
after the other. Records at offsets below --warmup are answered without
work and not counted; once --records counted records are done, their
first and last finish times (Unix seconds) go to --result as JSON.
"""
import argparse
import json
import threading
import time

from keyshare_endpoint import endpoint, make_server

MASK = (1 << 64) - 1


def work_of(partition, offset, max_ns=5_000_000):
    x = (offset * 0x9E3779B97F4A7C15 + partition) & MASK
    x ^= x >> 31
    x = (x * 0xBF58476D1CE4E5B9) & MASK
    x ^= x >> 29
    return (x % (max_ns + 1)) / 1e9


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--records", type=int, required=True)
    p.add_argument("--warmup", type=int, default=0)
    p.add_argument("--result", required=True)
    p.add_argument("--no-work", action="store_true")
    p.add_argument("--concurrency", type=int, default=100)
    args = p.parse_args()
    lock = threading.Lock()
    done, span = set(), {}

    @endpoint(concurrency=args.concurrency)
    def handle(r):
        if r.offset < args.warmup:
            return
        if not args.no_work:
            time.sleep(work_of(r.partition, r.offset))
        now = time.time()
        with lock:
            if r.offset in done:
                return
            done.add(r.offset)
            span.setdefault("first", now)
            span["last"] = now
            if len(done) == args.records:
                with open(args.result, "w") as f:
                    json.dump({"first": span["first"], "last": now, "records": len(done)}, f)

    srv = make_server(handle, port=args.port)
    print("listening on", srv.server_address[1], flush=True)
    srv.serve_forever()


if __name__ == "__main__":
    main()
