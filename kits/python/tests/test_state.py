"""Keyed state (docs/delivery.md, "Keyed state") through the kit."""
import base64
import json
import unittest

from helpers import Headers, body, wire_record
from keyshare_endpoint import BadRequest, Failed, batch_endpoint, decode_request, endpoint


def with_state(rec, state):
    rec["state"] = state
    return rec


def value(b):
    return {"value": None if b is None else base64.b64encode(b).decode()}


def answer(ep, *records):
    r = ep.respond("POST", Headers(), body(*records))
    return r.status, (json.loads(r.body)["results"] if r.status == 200 else r.body.decode())


@endpoint
def count(record):
    """Counts the key's records in its state; b"stop" deletes it, b"fail" fails."""
    if record.value == b"fail":
        record.set_state(b"999")  # dropped: the record is not done
        raise Failed("told to")
    if record.value == b"stop":
        return record.delete_state()
    n = 0 if record.state is None else int(record.state)
    record.set_state(str(n + 1).encode())


class DecodeStateTest(unittest.TestCase):
    def test_sent_and_none(self):
        _, recs = decode_request(body(with_state(wire_record(1), value(b"12")), with_state(wire_record(2, key=b"j"), value(None))))
        self.assertEqual([r.state for r in recs], [b"12", None])
        self.assertTrue(all(r.state_kept for r in recs))

    def test_empty_state_is_not_none(self):
        _, recs = decode_request(body(with_state(wire_record(1), {"value": ""})))
        self.assertEqual(recs[0].state, b"")

    def test_without_state_flag(self):
        _, recs = decode_request(body(wire_record(1)))
        self.assertFalse(recs[0].state_kept)
        self.assertIsNone(recs[0].state)

    def test_previous_follows_the_earlier_records_change(self):
        _, recs = decode_request(body(
            with_state(wire_record(1), value(b"3")),
            with_state(wire_record(2, key=b"other"), value(b"x")),
            with_state(wire_record(3), {"previous": True}),
            with_state(wire_record(4), {"previous": True})))
        self.assertEqual(recs[2].state, b"3", "unchanged so far: the state sent with offset 1")
        recs[0].set_state(b"4")
        self.assertEqual(recs[2].state, b"4")
        self.assertEqual(recs[3].state, b"4", "offset 3 changed nothing: what offset 1 left")
        recs[2].delete_state()
        self.assertIsNone(recs[3].state)
        self.assertEqual(recs[1].state, b"x", "another key's state is its own")

    def test_bad_state(self):
        for state, want in [
            ("MTI=", "records[0].state: 'MTI=' is not an object"),
            ({}, 'has neither "value" nor "previous"'),
            ({"value": 12}, "records[0].state.value: 12 is not base64 text"),
            ({"value": "!!"}, "records[0].state.value: not base64"),
            ({"previous": True}, 'records[0].state: "previous", but no earlier record of the key'),
        ]:
            with self.subTest(state=state), self.assertRaises(BadRequest) as cm:
                decode_request(body(with_state(wire_record(1), state)))
            self.assertIn(want, str(cm.exception))


class RecordEndpointStateTest(unittest.TestCase):
    def test_put_delete_unchanged(self):
        @endpoint
        def handle(record):
            if record.offset == 1:
                record.set_state(b"")
            elif record.offset == 2:
                record.delete_state()

        status, results = answer(handle, *(with_state(wire_record(i, key=b"k%d" % i), value(b"s")) for i in (1, 2, 3)))
        self.assertEqual(status, 200)
        self.assertEqual(results, [{"status": "done", "state": {"value": ""}},
                                   {"status": "done", "state": {"value": None}},
                                   {"status": "done"}])

    def test_a_batch_of_one_key_counts_on(self):
        recs = [with_state(wire_record(1), value(b"3"))] + [with_state(wire_record(i), {"previous": True}) for i in (2, 3)]
        status, results = answer(count, *recs)
        self.assertEqual(status, 200)
        self.assertEqual([r["state"] for r in results], [value(b"4"), value(b"5"), value(b"6")])

    def test_a_failed_record_changes_nothing(self):
        recs = [with_state(wire_record(1), value(None)),
                with_state(wire_record(2, value=b"fail"), {"previous": True}),
                with_state(wire_record(3), {"previous": True})]
        status, results = answer(count, *recs)
        self.assertEqual(status, 200)
        self.assertEqual(results[0], {"status": "done", "state": value(b"1")})
        self.assertEqual([r["status"] for r in results[1:]], ["failed", "failed"])
        self.assertNotIn("state", results[1], "a failed record's change would make the member refuse the answer")
        self.assertNotIn("state", results[2])

    def test_change_without_state_flag_names_it(self):
        status, text = answer(count, wire_record(1))
        self.assertEqual(status, 503, "the member's set-up, not the record: it waits, dead-lettering nothing")
        self.assertIn("--state", text)

    def test_null_key_has_no_state(self):
        status, results = answer(count, with_state(wire_record(1, key=None), value(None)))
        self.assertEqual(status, 200)
        self.assertEqual(results[0]["status"], "failed")
        self.assertIn("null key", results[0]["error"])

    def test_state_must_be_bytes(self):
        @endpoint
        def handle(record):
            record.set_state("12")

        _, results = answer(handle, with_state(wire_record(1), value(None)))
        self.assertEqual(results[0]["status"], "failed")
        self.assertIn("encode the text first", results[0]["error"])


class BatchEndpointStateTest(unittest.TestCase):
    def test_later_records_see_earlier_changes(self):
        @batch_endpoint
        def handle(records):
            for r in records:
                r.set_state(b"%d" % (int(r.state or b"0") + 1))

        recs = [with_state(wire_record(1, key=b"a"), value(b"7")),
                with_state(wire_record(2, key=b"b"), value(None)),
                with_state(wire_record(3, key=b"a"), {"previous": True}),
                with_state(wire_record(4, key=b"b"), {"previous": True})]
        status, results = answer(handle, *recs)
        self.assertEqual(status, 200)
        self.assertEqual([r["state"] for r in results], [value(b"8"), value(b"1"), value(b"9"), value(b"2")])

    def test_failed_results_drop_their_change(self):
        @batch_endpoint
        def handle(records):
            for r in records:
                r.set_state(b"x")
            return [None, Failed("no")]

        recs = [with_state(wire_record(1, key=b"a"), value(None)), with_state(wire_record(2, key=b"b"), value(None))]
        _, results = answer(handle, *recs)
        self.assertEqual(results, [{"status": "done", "state": value(b"x")}, {"status": "failed", "error": "no"}])


if __name__ == "__main__":
    unittest.main()
