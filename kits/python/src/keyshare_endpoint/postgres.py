"""Effectively once into PostgreSQL (docs/exactly-once.md), with psycopg 3.

    from keyshare_endpoint.postgres import PostgresSink

    sink = PostgresSink("postgresql://app@db/app")
    sink.create_schema()

    @sink.endpoint
    def handle(cur, record):
        cur.execute("INSERT INTO orders (id, body) VALUES (%s, %s)", (record.key, record.value))

    handle.serve(port=8080)

Each record is one transaction (read committed) holding, all or nothing:

1. the partition's fence lock: pg_advisory_xact_lock_shared(hashtext(topic),
   partition), taken exclusive for the first write under a new token;
2. the fence check: the newest token of any range overlapping the
   record's [lo, hi) in <prefix>fences; a newer one than the record's
   refuses the write (Fenced); the first write under a new token records it;
3. the applied row, INSERT INTO <prefix>applied ... ON CONFLICT DO NOTHING:
   a record applied before commits without its effect;
4. the effect, ``effect(cur, record)``, through the transaction's cursor.

These are the rules and the tables of keyshare's Go sink (package pgsink):
a Go member and a Python endpoint may share them (the same prefix).
"""
from __future__ import annotations

import contextlib
import queue
import re
import threading
import time
from typing import Callable, Dict, List, Optional

try:
    import psycopg
except ImportError as e:  # pragma: no cover - depends on the install
    raise ImportError("keyshare_endpoint.postgres needs psycopg 3: pip install 'keyshare-endpoint[postgres]'") from e

from .endpoint import Endpoint
from .outcome import DeadlinePassed, Failed, Fenced, Retry

_PREFIX = re.compile(r"^[a-z_][a-z0-9_]{0,40}$")

Effect = Callable[["psycopg.Cursor", object], None]


class _Pool:
    """A few connections, each used by one thread at a time."""

    def __init__(self, conninfo, size):
        self._conninfo, self._free, self._lock = conninfo, queue.LifoQueue(), threading.Lock()
        self._slots = threading.BoundedSemaphore(size)

    def get(self):
        self._slots.acquire()
        try:
            return self._free.get_nowait()
        except queue.Empty:
            pass
        try:
            conn = psycopg.connect(self._conninfo, autocommit=False)
            # Read committed is enough, whatever the database's default:
            # the fence check is serialized by the advisory lock, a
            # duplicate by the applied table's key.
            conn.isolation_level = psycopg.IsolationLevel.READ_COMMITTED
            return conn
        except BaseException:
            self._slots.release()
            raise

    def put(self, conn):
        try:
            if not conn.closed and not conn.broken:
                conn.rollback()  # a no-op once committed
                self._free.put(conn)
        except psycopg.Error:
            conn.close()
        finally:
            self._slots.release()

    def close(self):
        while True:
            try:
                self._free.get_nowait().close()
            except queue.Empty:
                return


class _Advance(Exception):
    """A range's first write under a new token: run again with the lock exclusive."""

    def __init__(self, partitions=()):
        super().__init__("the range's token must be written")
        self.partitions = set(partitions)


def _fence_of(rec):
    """The record's (topic, partition, lo, hi, token), checked as pgsink checks a write."""
    if rec.fence is None or rec.range_lo is None or rec.range_hi is None:
        raise Failed("the record has no fence: the member sent none (deliver from keyshare member, which sends range and fence)")
    if not rec.topic:
        raise Failed("the record names no topic")
    if rec.partition < 0 or rec.offset < 0:
        raise Failed("partition %d, offset %d: both are 0 or more" % (rec.partition, rec.offset))
    if not (rec.range_lo < rec.range_hi <= 1 << 32):
        raise Failed("range [%d, %d): want lo < hi <= 2^32 (a key-hash range)" % (rec.range_lo, rec.range_hi))
    if rec.fence <= 0:
        raise Failed("fence %d: a token is an etcd revision, above 0" % rec.fence)
    return (rec.topic, rec.partition, rec.range_lo, rec.range_hi, rec.fence)


class PostgresSink:
    """Applies records through PostgreSQL transactions, each effect once, fenced.

    ``conninfo``: a libpq connection string or URL. ``prefix`` starts the
    names of the sink's two tables, ``<prefix>applied`` and
    ``<prefix>fences`` (lower-case letters, digits and underscores).
    ``pool_size``: connections kept, one per request at work (as many as
    the endpoint's concurrency). One prefix serves one consumer group.
    """

    def __init__(self, conninfo: str, *, prefix: str = "keyshare_", pool_size: int = 16,
                 _skip_fence_check_for_tests: bool = False):
        if not _PREFIX.match(prefix):
            raise ValueError("prefix %r: use lower-case letters, digits and underscores, starting with a letter or underscore, at most 41 characters" % (prefix,))
        if pool_size < 1:
            raise ValueError("pool_size=%r: 1 or more" % (pool_size,))
        self.prefix, self.applied_table, self.fences_table = prefix, prefix + "applied", prefix + "fences"
        self._pool = _Pool(conninfo, pool_size)
        # Turns the fence check off: only for tests that show what it
        # prevents. Never set it in an endpoint.
        self._unfenced = _skip_fence_check_for_tests
        # Pipeline mode needs libpq 14 or later (the binary build has it).
        self._pipelines = psycopg.Pipeline.is_supported()
        self._stats_lock = threading.Lock()
        self.stats = {"applied": 0, "duplicates": 0, "fenced": 0}

    def close(self):
        self._pool.close()

    def _count(self, what, n=1):
        with self._stats_lock:
            self.stats[what] += n

    def create_schema(self):
        """Creates the sink's tables if missing; concurrent callers take turns."""
        with psycopg.connect(self._pool._conninfo, autocommit=False) as conn:
            conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", ("keyshare pgsink schema " + self.prefix,))
            conn.execute("""CREATE TABLE IF NOT EXISTS %s (
    topic           text    NOT NULL,
    kafka_partition integer NOT NULL,
    kafka_offset    bigint  NOT NULL,
    token           bigint  NOT NULL,
    applied_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (topic, kafka_partition, kafka_offset)
)""" % self.applied_table)
            conn.execute("""CREATE TABLE IF NOT EXISTS %s (
    topic           text    NOT NULL,
    kafka_partition integer NOT NULL,
    lo              bigint  NOT NULL,
    hi              bigint  NOT NULL,
    token           bigint  NOT NULL,
    PRIMARY KEY (topic, kafka_partition, lo, hi)
)""" % self.fences_table)
            conn.commit()

    def prune(self, topic: str, partition: int, below: int) -> int:
        """Deletes the applied rows of a partition below an offset (the group's committed one)."""
        conn = self._pool.get()
        try:
            cur = conn.execute("DELETE FROM %s WHERE topic = %%s AND kafka_partition = %%s AND kafka_offset < %%s" % self.applied_table,
                               (topic, partition, below))
            conn.commit()
            return cur.rowcount
        finally:
            self._pool.put(conn)

    # The fence statements, as pgsink's (fence.go).

    def _pipeline(self, conn):
        """Statements sent together, their answers read at the block's end.

        The statements still run one after the other, each with its own
        snapshot: the lock's statement ends before the check's begins.
        """
        return conn.pipeline() if self._pipelines else contextlib.nullcontext()

    def _lock(self, conn, topic, partition, exclusive):
        fn = "pg_advisory_xact_lock" if exclusive else "pg_advisory_xact_lock_shared"
        conn.execute("SELECT %s(hashtext(%%s), %%s)" % fn, (topic, partition))

    def _check(self, conn, f, advance):
        """Sends the fence statement; its cursor's row is (newest overlapping token, the range already at its token)."""
        topic, partition, lo, hi, token = f
        args = {"t": topic, "p": partition, "lo": lo, "hi": hi, "tok": token}
        if not advance:
            return conn.execute("""SELECT coalesce(max(token), 0), coalesce(bool_or(lo = %%(lo)s AND hi = %%(hi)s AND token = %%(tok)s), false)
FROM %s WHERE topic = %%(t)s AND kafka_partition = %%(p)s AND lo < %%(hi)s AND hi > %%(lo)s""" % self.fences_table, args)
        # Make the range's row say its token, and drop the rows it covers
        # that are no newer, so the table keeps about one row per range.
        ft = self.fences_table
        return conn.execute("""WITH newest AS (
    SELECT coalesce(max(token), 0) AS token FROM {ft}
    WHERE topic = %(t)s AND kafka_partition = %(p)s AND lo < %(hi)s AND hi > %(lo)s
), covered AS (
    DELETE FROM {ft}
    WHERE topic = %(t)s AND kafka_partition = %(p)s AND lo >= %(lo)s AND hi <= %(hi)s AND NOT (lo = %(lo)s AND hi = %(hi)s)
    AND token <= %(tok)s AND (SELECT token FROM newest) <= %(tok)s
), advanced AS (
    INSERT INTO {ft} (topic, kafka_partition, lo, hi, token)
    SELECT %(t)s, %(p)s, %(lo)s, %(hi)s, %(tok)s WHERE (SELECT token FROM newest) <= %(tok)s
    ON CONFLICT (topic, kafka_partition, lo, hi) DO UPDATE SET token = greatest({ft}.token, excluded.token)
)
SELECT token FROM newest""".format(ft=ft), args)

    @staticmethod
    def _checked(cur, advance):
        """What a fence statement found: (newest, mine)."""
        row = cur.fetchone()
        return (row[0], True) if advance else (row[0], row[1])

    @staticmethod
    def _verdict(f, newest, mine, advance):
        if newest > f[4]:
            return Fenced("write refused: range [%d, %d) of %s/%d under token %d, but token %d was written for an overlapping range (a later owner holds it)"
                          % (f[2], f[3], f[0], f[1], f[4], newest))
        if not mine and not advance:
            return _Advance()
        return None

    def _insert_applied(self, conn, f, offset):
        """Sends the applied row's INSERT; its cursor's rowcount is 1 for a record not applied before."""
        return conn.execute("INSERT INTO %s (topic, kafka_partition, kafka_offset, token) VALUES (%%s, %%s, %%s, %%s) ON CONFLICT DO NOTHING"
                            % self.applied_table, (f[0], f[1], offset, f[4]))

    @staticmethod
    def _before_commit(records):
        deadline = min((r.deadline for r in records if r.deadline is not None), default=None)
        if deadline is not None and time.time() > deadline:
            raise DeadlinePassed("the request's deadline passed before its transaction committed: rolled back")

    def _transaction(self, attempt):
        """Runs attempt(cur) in a transaction on a pooled connection.

        The database's trouble (a lost connection, a server shutting
        down) is the endpoint's, not the record's: Retry.
        """
        conn = self._pool.get()
        try:
            with conn.cursor() as cur:
                return attempt(conn, cur)
        except psycopg.OperationalError as e:
            raise Retry("the database: %s" % e) from e
        finally:
            self._pool.put(conn)

    def apply(self, record, effect: Effect) -> bool:
        """Applies record under its fence; True if effect ran, False if applied before.

        Raises Fenced for a stale fence, Failed for a record without one;
        an effect's exception rolls everything back and is raised as is.
        """
        f = _fence_of(record)
        try:
            try:
                fresh = self._transaction(lambda conn, cur: self._apply_once(conn, cur, f, record, effect, False))
            except _Advance:
                fresh = self._transaction(lambda conn, cur: self._apply_once(conn, cur, f, record, effect, True))
        except Fenced:
            self._count("fenced")
            raise
        self._count("applied" if fresh else "duplicates")
        return fresh

    def _apply_once(self, conn, cur, f, record, effect, advance):
        # BEGIN, the lock, the check and the applied row in one round trip.
        with self._pipeline(conn):
            if not self._unfenced:
                # A statement of its own before the check: under read
                # committed each statement reads a snapshot taken when it
                # starts.
                self._lock(conn, f[0], f[1], advance)
                check = self._check(conn, f, advance)
            inserted = self._insert_applied(conn, f, record.offset)
        fresh = inserted.rowcount == 1
        if not self._unfenced:
            refused = self._verdict(f, *self._checked(check, advance), advance)
            if refused is not None:
                conn.rollback()
                raise refused
        if fresh:
            effect(cur, record)
        self._before_commit([record])
        conn.commit()
        return fresh

    def apply_batch(self, records, effect: Effect) -> List[Optional[Fenced]]:
        """Applies a request's records in one transaction; one result per record.

        Each partition's lock once (in one order), each range's fence check
        once, the applied rows of the records whose fence passed, then the
        effects in request order (each key's in offset order), one commit.
        A record under a stale fence gets Fenced and nothing of it is
        written; an effect's exception fails the whole batch, nothing kept.
        """
        fences = [_fence_of(r) for r in records]
        exclusive = set()
        try:
            res = self._transaction(lambda conn, cur: self._batch_once(conn, cur, records, fences, exclusive, effect))
        except _Advance as more:
            res = self._transaction(lambda conn, cur: self._batch_once(conn, cur, records, fences, more.partitions, effect))
        return res

    def _batch_once(self, conn, cur, records, fences, exclusive, effect):
        res: List[Optional[Fenced]] = [None] * len(records)
        if not self._unfenced:
            # BEGIN, the locks and the checks in one round trip.
            with self._pipeline(conn):
                for p in sorted({(f[0], f[1]) for f in fences}):  # one order: batches never wait on each other
                    self._lock(conn, p[0], p[1], p in exclusive)
                checks = {f: self._check(conn, f, (f[0], f[1]) in exclusive) for f in dict.fromkeys(fences)}
            verdicts: Dict[tuple, object] = {}
            for f, check in checks.items():
                adv = (f[0], f[1]) in exclusive
                verdicts[f] = self._verdict(f, *self._checked(check, adv), adv)
            advance = {(f[0], f[1]) for f, v in verdicts.items() if isinstance(v, _Advance)}
            if advance:
                conn.rollback()
                raise _Advance(advance | set(exclusive))
            res = [verdicts[f] for f in fences]
        with self._pipeline(conn):  # the applied rows in one round trip
            inserted = [self._insert_applied(conn, f, records[i].offset) if res[i] is None else None for i, f in enumerate(fences)]
        fresh = [c is not None and c.rowcount == 1 for c in inserted]
        for i, rec in enumerate(records):
            if fresh[i]:
                effect(cur, rec)
        self._before_commit(records)
        conn.commit()
        self._count("fenced", sum(r is not None for r in res))
        self._count("applied", sum(fresh))
        self._count("duplicates", sum(r is None and not fr for r, fr in zip(res, fresh)))
        return res

    def endpoint(self, effect: Effect = None, **options) -> Endpoint:
        """An Endpoint applying each record through the sink: ``@sink.endpoint`` on effect(cur, record)."""
        if effect is None:
            return lambda e: self.endpoint(e, **options)
        return Endpoint(lambda rec: self.apply(rec, effect), batch=False, **options)

    def batch_endpoint(self, effect: Effect = None, **options) -> Endpoint:
        """An Endpoint applying each request's records in one transaction."""
        if effect is None:
            return lambda e: self.batch_endpoint(e, **options)
        return Endpoint(lambda recs: self.apply_batch(recs, effect), batch=True, **options)
