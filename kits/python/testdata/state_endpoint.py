"""A counting endpoint built with the kit's keyed state (state_test.go).

It counts each key's records using only the state the member sends
(``record.state``) and answers the new count (``record.set_state``): it
keeps nothing of its own, so members can crash and ranges move without
losing a count. Run the members with --state.

    python3 testdata/state_endpoint.py --log answers.jsonl [--batch] [--break previous|sent]

--batch serves through @batch_endpoint (the function gets a request's
records); without it @endpoint calls it once per record. Each answered
record is a line {"member", "offset"} in --log. It prints "listening on
PORT" once it listens.

--break breaks the kit on purpose, so that the Go test can be seen to
fail. "previous": record.state reads only the state the request sent, as
a kit ignoring "previous" would, so a key's later records of a batch
count from nothing. "sent": the kit drops the state the request sends, so
each request counts from nothing.
"""
import argparse
import json
import threading

import keyshare_endpoint.record
from keyshare_endpoint import Record, batch_endpoint, endpoint, make_server

parser = argparse.ArgumentParser()
parser.add_argument("--port", type=int, default=0)
parser.add_argument("--log", required=True)
parser.add_argument("--batch", action="store_true")
parser.add_argument("--break", dest="broken", choices=["previous", "sent"])
args = parser.parse_args()

if args.broken == "previous":
    Record.state = property(lambda r: None if r._state is None else r._state.sent)
elif args.broken == "sent":
    decode_sent = keyshare_endpoint.record.decode_state
    keyshare_endpoint.record.decode_state = lambda raw, where: (None, decode_sent(raw, where)[1])

log_lock = threading.Lock()
log = open(args.log, "a", buffering=1)


def count(record):
    n = 0 if record.state is None else int(record.state)
    record.set_state(b"%d" % (n + 1))


def logged(records):
    with log_lock:
        log.write("".join(json.dumps({"member": r.member, "offset": r.offset}) + "\n" for r in records))


if args.batch:
    @batch_endpoint(concurrency=64)
    def handle(records):
        for r in records:
            count(r)
        logged(records)
else:
    @endpoint(concurrency=64)
    def handle(record):
        count(record)
        logged([record])

with make_server(handle, "127.0.0.1", args.port) as srv:
    print("listening on %d" % srv.server_address[1], flush=True)
    srv.serve_forever()
