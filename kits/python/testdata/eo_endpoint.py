#!/usr/bin/env python3
"""The endpoint kits/python's Go tests deliver to: the kit's PostgreSQL part.

Each record's effect is a row of eo_effects (partition, offset, key, SEQ of
its "key-K:SEQ" value, the member that sent it), applied through
PostgresSink.apply under the request's fence, so in the same transaction as
the sink's applied row and fence check; with --batch, a request's records
through PostgresSink.apply_batch, in one transaction.

To make a zombie's writes land late, as a slow network would deliver them,
the endpoint holds every request of member M while the file
CONTROL/hold-M exists, until CONTROL/release exists; then the held
requests apply, whatever the member did meanwhile. The log gets a line
{"held": M, "partition": P, "offset": O} per held record, and after it
applied {"stale": M, ..., "accepted": true|false}.

A record the sink skips as applied before (a member re-ran it after a
crash) gets a line {"duplicate": M, "partition": P, "offset": O} (not
with --batch, whose results do not say).

--unfenced turns the kit's fence check off (a switch for tests only), to
show what the check prevents; --forget-applied deletes a record's applied
row just before the sink applies it, to show what the applied rows prevent.
"""
import argparse
import json
import os
import threading
import time

import psycopg

from keyshare_endpoint import Endpoint, Fenced, make_server
from keyshare_endpoint.postgres import PostgresSink

EFFECTS = """CREATE TABLE IF NOT EXISTS eo_effects (
    id bigserial PRIMARY KEY, kafka_partition integer NOT NULL, kafka_offset bigint NOT NULL,
    key text NOT NULL, seq integer NOT NULL, writer text NOT NULL)"""


class Log:
    def __init__(self, path):
        self._f, self._lock = open(path, "a"), threading.Lock()

    def write(self, **line):
        with self._lock:
            self._f.write(json.dumps(line) + "\n")
            self._f.flush()


class HoldingEndpoint(Endpoint):
    """An Endpoint that holds a member's requests while CONTROL/hold-M exists."""

    def __init__(self, fn, control, log, **kw):
        super().__init__(fn, **kw)
        self.control, self.log, self.local = control, log, threading.local()

    def respond(self, method, headers, body, now=None):
        self.local.held = False
        try:
            doc = json.loads(body)
            member = doc["member"]
        except (ValueError, KeyError, TypeError):
            return super().respond(method, headers, body, now)
        if os.path.exists(os.path.join(self.control, "hold-" + os.path.basename(member))):
            for r in doc.get("records", []):
                self.log.write(held=member, partition=r["partition"], offset=r["offset"])
            while not os.path.exists(os.path.join(self.control, "release")):
                time.sleep(0.02)
            self.local.held = True
        return super().respond(method, headers, body, now)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--postgres", required=True)
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--log", required=True)
    p.add_argument("--control", required=True)
    p.add_argument("--unfenced", action="store_true")
    p.add_argument("--forget-applied", action="store_true")
    p.add_argument("--batch", action="store_true")
    args = p.parse_args()
    log = Log(args.log)
    sink = PostgresSink(args.postgres, prefix="eo_", pool_size=16, _skip_fence_check_for_tests=args.unfenced)
    sink.create_schema()
    with psycopg.connect(args.postgres, autocommit=True) as c:
        c.execute(EFFECTS)

    def effect(cur, rec):
        key = rec.key.decode()
        seq = int(rec.value.decode().split(":", 1)[1])
        cur.execute("INSERT INTO eo_effects (kafka_partition, kafka_offset, key, seq, writer) VALUES (%s, %s, %s, %s, %s)",
                    (rec.partition, rec.offset, key, seq, rec.member))

    def forget(rec):
        with psycopg.connect(args.postgres, autocommit=True) as c:
            c.execute("DELETE FROM eo_applied WHERE topic = %s AND kafka_partition = %s AND kafka_offset = %s",
                      (rec.topic, rec.partition, rec.offset))

    def handle(rec):
        held = ep.local.held
        if args.forget_applied:
            forget(rec)
        try:
            if not sink.apply(rec, effect):
                log.write(duplicate=rec.member, partition=rec.partition, offset=rec.offset)
        except Fenced:
            if held:
                log.write(stale=rec.member, partition=rec.partition, offset=rec.offset, accepted=False)
            raise
        if held:
            log.write(stale=rec.member, partition=rec.partition, offset=rec.offset, accepted=True)

    def handle_batch(recs):
        held = ep.local.held
        if args.forget_applied:
            for rec in recs:
                forget(rec)
        results = sink.apply_batch(recs, effect)
        if held:
            for rec, res in zip(recs, results):
                log.write(stale=rec.member, partition=rec.partition, offset=rec.offset, accepted=res is None)
        return results

    ep = HoldingEndpoint(handle_batch if args.batch else handle, args.control, log, batch=args.batch, concurrency=16)
    srv = make_server(ep, port=args.port)
    print("listening on", srv.server_address[1], flush=True)
    srv.serve_forever()


if __name__ == "__main__":
    main()
