"""A runnable endpoint: prints each record, fails the records of one key.

    python -m keyshare_endpoint.example --port 8080 --fail-key key-3
    keyshare member --group g --topic orders --deliver http://127.0.0.1:8080/ --dlq orders.dlq
"""
import argparse
import logging
import os

from . import Failed, endpoint


def main():
    p = argparse.ArgumentParser(prog="python -m keyshare_endpoint.example", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8080)
    p.add_argument("--fail-key", help="fail this key's records (they are retried, then dead-lettered)")
    p.add_argument("--token-file", help="require the bearer token in this file (the member's --deliver-token-file)")
    p.add_argument("--concurrency", type=int, default=16, help="requests worked at once (default 16, the member's default)")
    args = p.parse_args()
    token = None
    if args.token_file:
        with open(args.token_file) as f:
            token = f.readline().strip()
    fail_key = None if args.fail_key is None else os.fsencode(args.fail_key)

    @endpoint(token=token, concurrency=args.concurrency)
    def handle(record):
        if fail_key is not None and record.key == fail_key:
            raise Failed("key %s is refused by --fail-key" % args.fail_key)
        # logging, not print: print from the server's threads mixes their lines
        logging.info("%s %s/%d@%d %r %r", record.member, record.topic, record.partition, record.offset, record.key, record.value)

    logging.basicConfig(level=logging.INFO, format="%(message)s")
    handle.serve(args.host, args.port)


if __name__ == "__main__":
    main()
