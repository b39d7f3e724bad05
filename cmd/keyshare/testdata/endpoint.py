#!/usr/bin/env python3
"""A keyshare delivery endpoint (docs/delivery.md), standard library only.

It applies each record by appending a JSON line to --log, and refuses the
records whose key is --refuse-key. With --delay-file, it waits the seconds
that file holds (read at each request; absent or empty: no wait) before
applying a request's records; a member that closes the connection while it
waits (a revoked range's drain budget spent) gets nothing applied, and the
log has a line {"cancelled": [offsets], ...} instead. A request whose
Keyshare-Deadline (Unix ms, sent when the member has a --deliver-timeout)
has passed by the time it would be applied is not applied either (the
member sends it again as the next attempt): its log line is
{"expired": [offsets], ...}. Run it, then point a
member at it:

    python3 endpoint.py --port 8080 --log applied.jsonl
    keyshare member --group g --topic orders --deliver http://127.0.0.1:8080/

keyshare's tests run this file.
"""
import argparse
import base64
import json
import select
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

args = None
lock = threading.Lock()


def apply(member, rec):
    """The endpoint's work: here, one line per record in the log."""
    key = base64.b64decode(rec["key"]) if rec["key"] is not None else None
    if args.refuse_key is not None and key == args.refuse_key.encode():
        return "key %s is refused" % args.refuse_key
    line = {"member": member, "topic": rec["topic"], "partition": rec["partition"],
            "offset": rec["offset"], "attempt": rec["attempt"],
            "hash": rec["hash"], "range": rec["range"], "fence": rec["fence"],
            "key": key.decode("utf-8", "replace") if key is not None else None,
            "value": base64.b64decode(rec["value"]).decode("utf-8", "replace") if rec["value"] is not None else None}
    with lock, open(args.log, "a") as f:
        f.write(json.dumps(line) + "\n")
    return None


def delay():
    """The seconds --delay-file says to wait before answering."""
    if args.delay_file is None:
        return 0.0
    try:
        with open(args.delay_file) as f:
            return float(f.read().strip() or 0)
    except FileNotFoundError:
        return 0.0


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep connections between requests
    wbufsize = -1  # headers and body in one write: two small writes wait ~40 ms for the member's delayed ACK

    def closed_while_waiting(self, seconds):
        """Waits seconds, or until the member closes the connection (True)."""
        end = time.monotonic() + seconds
        while (left := end - time.monotonic()) > 0:
            readable, _, _ = select.select([self.connection], [], [], left)
            if readable and self.connection.recv(1, socket.MSG_PEEK) == b"":
                return True
        return False

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if body.get("version") != 1:
            return self.answer(501, b"unknown version")  # not the records' fault: the member waits
        records = body["records"]
        wait, started = delay(), time.time()
        if wait > 0 and self.closed_while_waiting(wait):
            line = {"cancelled": [r["offset"] for r in records], "member": body["member"],
                    "sent": started, "closed": time.time()}
            with lock, open(args.log, "a") as f:
                f.write(json.dumps(line) + "\n")
            self.close_connection = True
            return
        deadline = self.headers.get("Keyshare-Deadline")
        if deadline is not None and time.time() * 1000 > int(deadline):
            # Past its deadline the member no longer waits for this answer
            # and sends the records again: applying them now could run
            # beside that attempt (docs/delivery.md).
            line = {"expired": [r["offset"] for r in records], "member": body["member"],
                    "deadline": int(deadline), "at": time.time()}
            with lock, open(args.log, "a") as f:
                f.write(json.dumps(line) + "\n")
            self.close_connection = True
            return
        if len(records) == 1:  # one record: the status says it all
            err = apply(body["member"], records[0])
            return self.answer(422, err.encode()) if err else self.answer(200, b"")
        results, failed_keys = [], set()
        for rec in records:
            # After a key's first failure in a batch, its later records are
            # not applied: the member sends them again after the failed one.
            err = "an earlier record of the key failed" if rec["key"] in failed_keys else apply(body["member"], rec)
            if err:
                if rec["key"] is not None:  # a null key has no order to keep
                    failed_keys.add(rec["key"])
                results.append({"status": "failed", "error": err})
            else:
                results.append({"status": "done"})
        self.answer(200, json.dumps({"results": results}).encode())

    def answer(self, status, body):
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *a):  # quiet: one line per request is too many
        pass


class Server(ThreadingHTTPServer):
    def handle_error(self, request, client_address):
        # A member that went away mid-request (a revoked range, a crash)
        # is no error here: the records are sent again.
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, default=8080)
    p.add_argument("--log", default="applied.jsonl")
    p.add_argument("--refuse-key")
    p.add_argument("--delay-file")
    args = p.parse_args()
    server = Server(("127.0.0.1", args.port), Handler)
    print("listening on", server.server_address[1], flush=True)
    server.serve_forever()
