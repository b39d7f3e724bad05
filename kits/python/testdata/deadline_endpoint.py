#!/usr/bin/env python3
"""An endpoint of kits/python's tests: the kit's @endpoint, with a token, a slow record.

Each record applied is a line {"offset", "attempt", "at", "deadline"} in
--log (at and deadline in Unix seconds; deadline null without one). The
record at --slow-offset takes --slow-seconds on its first attempt, after
which the request's deadline may have passed: the kit must apply none of
the request's later records then.
"""
import argparse
import json
import threading
import time

from keyshare_endpoint import endpoint, make_server


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--log", required=True)
    p.add_argument("--token-file", required=True)
    p.add_argument("--slow-offset", type=int, default=0)
    p.add_argument("--slow-seconds", type=float, default=0)
    args = p.parse_args()
    with open(args.token_file) as f:
        token = f.readline().strip()
    lock, log = threading.Lock(), open(args.log, "a")

    @endpoint(token=token)
    def handle(record):
        if record.offset == args.slow_offset and record.attempt == 1:
            time.sleep(args.slow_seconds)
        with lock:
            log.write(json.dumps({"offset": record.offset, "attempt": record.attempt, "at": time.time(), "deadline": record.deadline}) + "\n")
            log.flush()

    srv = make_server(handle, port=args.port)
    print("listening on", srv.server_address[1], flush=True)
    srv.serve_forever()


if __name__ == "__main__":
    main()
