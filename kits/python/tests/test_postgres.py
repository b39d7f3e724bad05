"""The PostgreSQL part, against a real server: KEYSHARE_TEST_POSTGRES_URL.

Skipped without it (or without psycopg); kits/python's Go test runs it
against a PostgreSQL it starts.
"""
import json
import os
import unittest

from helpers import Headers, body, wire_record
from keyshare_endpoint import Fenced, decode_request

URL = os.environ.get("KEYSHARE_TEST_POSTGRES_URL")
try:
    import psycopg
    from keyshare_endpoint.postgres import PostgresSink
except ImportError:
    psycopg = None


def record(offset, **kw):
    return decode_request(body(wire_record(offset, **kw)))[1][0]


@unittest.skipUnless(URL and psycopg, "set KEYSHARE_TEST_POSTGRES_URL (and install the [postgres] extra) to run")
class PostgresSinkTest(unittest.TestCase):
    def setUp(self):
        self.prefix = "t%s_" % self.id().rsplit(".", 1)[-1].lower()[5:30]  # test_once -> tonce_
        self.sink = PostgresSink(URL, prefix=self.prefix, pool_size=4)
        self.addCleanup(self.sink.close)
        with psycopg.connect(URL, autocommit=True) as c:
            for t in ("applied", "fences", "effects"):
                c.execute("DROP TABLE IF EXISTS %s%s" % (self.prefix, t))
            c.execute("CREATE TABLE %seffects (kafka_offset bigint, value bytea)" % self.prefix)
        self.sink.create_schema()
        self.sink.create_schema()  # idempotent

    def effect(self, cur, rec):
        cur.execute("INSERT INTO %seffects VALUES (%%s, %%s)" % self.prefix, (rec.offset, rec.value))

    def effects(self):
        with psycopg.connect(URL) as c:
            return [r[0] for r in c.execute("SELECT kafka_offset FROM %seffects ORDER BY kafka_offset" % self.prefix)]

    def test_once(self):
        self.assertTrue(self.sink.apply(record(1), self.effect))
        self.assertFalse(self.sink.apply(record(1), self.effect))  # a re-run: skipped
        self.assertEqual(self.effects(), [1])
        self.assertEqual(self.sink.stats, {"applied": 1, "duplicates": 1, "fenced": 0})

    def test_effect_error_keeps_nothing(self):
        def bad(cur, rec):
            self.effect(cur, rec)
            raise RuntimeError("boom")

        with self.assertRaises(RuntimeError):
            self.sink.apply(record(2), bad)
        self.assertTrue(self.sink.apply(record(2), self.effect))  # the applied row was rolled back too
        self.assertEqual(self.effects(), [2])

    def test_stale_fence_refused(self):
        self.assertTrue(self.sink.apply(record(1, fence=10, lo=0, hi=1 << 31), self.effect))
        # A later owner of part of the range writes under a newer token.
        self.assertTrue(self.sink.apply(record(2, fence=20, lo=1 << 30, hi=1 << 31), self.effect))
        with self.assertRaises(Fenced) as c:
            self.sink.apply(record(3, fence=10, lo=0, hi=1 << 31), self.effect)
        self.assertIn("token 20", str(c.exception))
        # A range that does not overlap is not fenced.
        self.assertTrue(self.sink.apply(record(4, fence=5, lo=1 << 31, hi=1 << 32), self.effect))
        self.assertEqual(self.effects(), [1, 2, 4])

    def test_no_fence_fails(self):
        with self.assertRaises(Exception) as c:
            self.sink.apply(record(1, fence=None), self.effect)
        self.assertIn("no fence", str(c.exception))

    def test_batch(self):
        self.sink.apply(record(1, fence=20, lo=0, hi=1 << 31), self.effect)
        res = self.sink.apply_batch([record(1, fence=20, lo=0, hi=1 << 31),  # a duplicate
                                     record(2, fence=20, lo=0, hi=1 << 31),
                                     record(3, key=b"x", fence=10, lo=0, hi=1 << 32),  # stale
                                     record(4, key=b"y", fence=30, lo=1 << 31, hi=1 << 32)], self.effect)
        self.assertEqual([type(r).__name__ for r in res], ["NoneType", "NoneType", "Fenced", "NoneType"])
        self.assertEqual(self.effects(), [1, 2, 4])

    def test_endpoint_answers_fenced(self):
        ep = self.sink.endpoint(self.effect)
        self.sink.apply(record(1, fence=20), self.effect)
        r = ep.respond("POST", Headers(), body(wire_record(2, fence=10), wire_record(3, key=b"z", fence=20)))
        self.assertEqual([x["status"] for x in json.loads(r.body)["results"]], ["fenced", "done"])

    def test_prune(self):
        for o in range(5):
            self.sink.apply(record(o), self.effect)
        self.assertEqual(self.sink.prune("orders", 0, 3), 3)
        self.assertTrue(self.sink.apply(record(0), self.effect))  # pruned: the fence is all that guards it

    def test_unfenced_switch_lets_stale_writes_through(self):
        self.sink.apply(record(1, fence=20), self.effect)
        off = PostgresSink(URL, prefix=self.prefix, pool_size=1, _skip_fence_check_for_tests=True)
        self.addCleanup(off.close)
        self.assertTrue(off.apply(record(2, fence=10), self.effect))


if __name__ == "__main__":
    unittest.main()
