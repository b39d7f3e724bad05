import json
import time
import unittest

from helpers import Headers, body, wire_record
from keyshare_endpoint import Failed, Fenced, Retry, batch_endpoint, endpoint


def results(resp):
    return [(r["status"], r.get("error", "")) for r in json.loads(resp.body)["results"]]


class RecordEndpointTest(unittest.TestCase):
    def setUp(self):
        self.applied = []

        @endpoint
        def handle(record):
            if record.value == b"fail":
                raise Failed("told to")
            if record.value == b"fence":
                raise Fenced("stale")
            if record.value == b"bug":
                raise KeyError("missing")
            if record.value == b"retry":
                raise Retry("db down", after=2.5)
            self.applied.append(record.offset)

        self.ep = handle

    def post(self, *records, headers=None, **kw):
        return self.ep.respond("POST", Headers(headers or {}), body(*records, **kw))

    def test_done(self):
        r = self.post(wire_record(1))
        self.assertEqual(r.status, 200)
        self.assertEqual(results(r), [("done", "")])
        self.assertIn(("Content-Type", "application/json"), r.headers)

    def test_outcomes(self):
        r = self.post(wire_record(1, value=b"fail"), wire_record(2, key=b"b", value=b"fence"),
                      wire_record(3, key=b"c", value=b"bug"), wire_record(4, key=b"d"))
        self.assertEqual(results(r), [("failed", "told to"), ("fenced", "stale"), ("failed", "KeyError: 'missing'"), ("done", "")])
        self.assertEqual(self.applied, [4])

    def test_key_stops_at_first_not_done(self):
        r = self.post(wire_record(1, value=b"fail"), wire_record(2, key=b"other"), wire_record(3), wire_record(4, key=None, value=b"fail"),
                      wire_record(5, key=None))
        got = results(r)
        self.assertEqual([s for s, _ in got], ["failed", "done", "failed", "failed", "done"])
        self.assertIn("an earlier record of the key", got[2][1])
        self.assertEqual(self.applied, [2, 5])  # offset 3 waits for 1; a null key has no order

    def test_retry_is_trouble(self):
        r = self.post(wire_record(1), wire_record(2, key=b"b", value=b"retry"))
        self.assertEqual(r.status, 503)
        self.assertIn(("Retry-After", "3"), r.headers)

    def test_version(self):
        r = self.post(wire_record(1), version=2)
        self.assertEqual(r.status, 501)
        self.assertEqual(self.applied, [])

    def test_bad_body(self):
        r = self.ep.respond("POST", Headers(), b"{")
        self.assertEqual(r.status, 400)
        self.assertIn(b"not JSON", r.body)

    def test_method(self):
        self.assertEqual(self.ep.respond("GET", Headers(), b"").status, 405)

    def test_deadline_passed(self):
        past = str(int((time.time() - 1) * 1000))
        r = self.post(wire_record(1), headers={"Keyshare-Deadline": past})
        self.assertEqual(r.status, 504)
        self.assertEqual(self.applied, [])
        future = str(int((time.time() + 60) * 1000))
        self.assertEqual(self.post(wire_record(2), headers={"keyshare-deadline": future}).status, 200)
        self.assertEqual(self.applied, [2])
        self.assertEqual(self.post(wire_record(3), headers={"Keyshare-Deadline": "soon"}).status, 400)

    def test_deadline_passing_mid_request(self):
        deadline = time.time() + 0.2

        @endpoint
        def slow(record):
            self.applied.append(record.offset)
            time.sleep(0.3)

        r = slow.respond("POST", Headers({"Keyshare-Deadline": str(int(deadline * 1000))}),
                         body(wire_record(1, key=b"a"), wire_record(2, key=b"b")))
        self.assertEqual(r.status, 504)
        self.assertEqual(self.applied, [1])  # the second record came past the deadline

    def test_token(self):
        ep = endpoint(lambda r: None, token="s3cret")
        self.assertEqual(ep.respond("POST", Headers(), body(wire_record(1))).status, 401)
        self.assertEqual(ep.respond("POST", Headers({"Authorization": "Bearer nope"}), body(wire_record(1))).status, 401)
        ok = ep.respond("POST", Headers({"Authorization": "Bearer s3cret"}), body(wire_record(1)))
        self.assertEqual(ok.status, 200)
        self.assertNotIn(b"s3cret", ep.respond("POST", Headers(), body(wire_record(1))).body)

    def test_options_checked(self):
        with self.assertRaises(ValueError):
            endpoint(lambda r: None, concurrency=0)
        with self.assertRaises(ValueError):
            endpoint(lambda r: None, token=" padded ")

    def test_still_callable(self):
        self.assertIsNone(self.ep(type("R", (), {"value": b"x", "offset": 9})()))
        self.assertEqual(self.applied, [9])


class BatchEndpointTest(unittest.TestCase):
    def test_results(self):
        @batch_endpoint
        def handle(records):
            return [None, Failed("no"), Fenced("old")]

        r = handle.respond("POST", Headers(), body(wire_record(1), wire_record(2, key=b"b"), wire_record(3, key=b"c")))
        self.assertEqual(results(r), [("done", ""), ("failed", "no"), ("fenced", "old")])

    def test_none_is_all_done(self):
        seen = []
        handle = batch_endpoint(lambda records: seen.extend(r.offset for r in records))
        r = handle.respond("POST", Headers(), body(wire_record(1), wire_record(2)))
        self.assertEqual(results(r), [("done", ""), ("done", "")])
        self.assertEqual(seen, [1, 2])

    def test_raise_fails_all(self):
        @batch_endpoint
        def handle(records):
            raise ValueError("bad batch")

        r = handle.respond("POST", Headers(), body(wire_record(1), wire_record(2)))
        self.assertEqual(results(r), [("failed", "ValueError: bad batch")] * 2)

    def test_deadline_passed_waiting_for_a_slot(self):
        import threading
        seen, entered, go = [], threading.Event(), threading.Event()

        @batch_endpoint(concurrency=1)
        def handle(records):
            if records[0].offset == 1:
                entered.set()
                go.wait(5)
            seen.append(records[0].offset)

        first = threading.Thread(target=handle.respond, args=("POST", Headers(), body(wire_record(1))))
        first.start()
        entered.wait(5)
        deadline = str(int((time.time() + 0.2) * 1000))
        late = []
        second = threading.Thread(target=lambda: late.append(handle.respond("POST", Headers({"Keyshare-Deadline": deadline}), body(wire_record(2)))))
        second.start()
        time.sleep(0.4)  # the second request waits for the slot past its deadline
        go.set()
        first.join(5)
        second.join(5)
        self.assertEqual(late[0].status, 504)
        self.assertEqual(seen, [1])

    def test_wrong_count_is_trouble(self):
        handle = batch_endpoint(lambda records: [None])
        r = handle.respond("POST", Headers(), body(wire_record(1), wire_record(2)))
        self.assertEqual(r.status, 503)
        self.assertIn(b"1 results for 2 records", r.body)


if __name__ == "__main__":
    unittest.main()
