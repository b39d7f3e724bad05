#!/usr/bin/env python3
"""A keyshare delivery endpoint with keyed state (docs/delivery.md, "Keyed
state"), standard library only.

It counts the records of each key using only the state the member sends
with each record, and answers the new count as the key's state: it keeps
nothing of its own between requests, so it can be killed and started again,
and any number of members can share it. Run the members with --state:

    python3 state_endpoint.py --port 8080 --log answers.jsonl
    keyshare member --group g --topic orders --state --deliver http://127.0.0.1:8080/

Each answered record is a line {"member", "key", "offset", "count"} in
--log. --delay waits that many seconds before answering a request.

With --own-memory it ignores the state the member sends and counts in its
own memory instead, as an endpoint without keyed state would: a test's
switch-off, whose counts go wrong once the endpoint is started again.

keyshare's tests run this file.
"""
import argparse
import base64
import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

args = None
lock = threading.Lock()
own_memory = {}  # key: count, with --own-memory only


def count_of(rec, earlier):
    """The key's count before rec: from the state the member sent, or on a
    key's later record in the request, from the record before it."""
    state = rec.get("state")
    if state is None:
        raise ValueError("the record came without state: run the member with --state")
    if state.get("previous"):
        return earlier[rec["key"]]
    if state["value"] is None:  # the key has no state yet
        return 0
    return int(base64.b64decode(state["value"]))


def answer_records(member, records):
    """A result per record, each with the key's new count as its state."""
    earlier, results, lines = {}, [], []
    for rec in records:
        count = count_of(rec, earlier)
        if args.own_memory:
            with lock:
                count = own_memory.get(rec["key"], 0)
                own_memory[rec["key"]] = count + 1
        count += 1
        earlier[rec["key"]] = count
        results.append({"status": "done", "state": {"value": base64.b64encode(str(count).encode()).decode()}})
        key = base64.b64decode(rec["key"]).decode("utf-8", "replace") if rec["key"] is not None else None
        lines.append(json.dumps({"member": member, "key": key, "offset": rec["offset"], "count": count}))
    return results, lines


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep connections between requests
    wbufsize = -1  # headers and body in one write

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if body.get("version") != 1:
            return self.answer(501, b"unknown version")  # not the records' fault: the member waits
        if args.delay > 0:
            time.sleep(args.delay)
        try:
            results, lines = answer_records(body["member"], body["records"])
        except ValueError as e:
            return self.answer(400, str(e).encode())
        if args.log:
            with lock, open(args.log, "a") as f:
                f.write("".join(line + "\n" for line in lines))
        self.answer(200, json.dumps({"results": results}).encode())

    def answer(self, status, body):
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *a):  # quiet: one line per request is too many
        pass


class Server(ThreadingHTTPServer):
    allow_reuse_address = True  # started again on its port at once

    def handle_error(self, request, client_address):
        # A member that went away mid-request is no error here: the
        # records are sent again.
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, default=8080)
    p.add_argument("--log")
    p.add_argument("--delay", type=float, default=0.0)
    p.add_argument("--own-memory", action="store_true")
    args = p.parse_args()
    server = Server(("127.0.0.1", args.port), Handler)
    print("listening on", server.server_address[1], flush=True)
    server.serve_forever()
