import unittest

from helpers import body, wire_record
from keyshare_endpoint import BadRequest, UnknownVersion, decode_request


class DecodeTest(unittest.TestCase):
    def test_fields(self):
        rec = wire_record(42, key=b"order-17", value=b'{"amount":12}', headers=[("traceparent", b"00-4bf"), ("n", None)])
        rec["unknown"] = "ignored"
        member, [r] = decode_request(body(rec, member="worker-7"), deadline=1.5)
        self.assertEqual(member, "worker-7")
        self.assertEqual((r.topic, r.partition, r.offset, r.timestamp), ("orders", 0, 42, 1767323045123))
        self.assertEqual((r.key, r.value), (b"order-17", b'{"amount":12}'))
        self.assertEqual(r.headers, [("traceparent", b"00-4bf"), ("n", None)])
        self.assertEqual((r.attempt, r.hash, r.range_lo, r.range_hi, r.fence), (1, 12345, 0, 1 << 32, 7))
        self.assertEqual((r.member, r.deadline), ("worker-7", 1.5))

    def test_null_and_empty(self):
        rec = wire_record(1, key=None, value=b"", fence=None)
        rec["timestamp"] = None
        _, [r] = decode_request(body(rec))
        self.assertIsNone(r.key)
        self.assertEqual(r.value, b"")
        self.assertIsNone(r.timestamp)
        self.assertIsNone(r.fence)
        self.assertIsNone(r.range_lo)
        self.assertIsNone(r.order_key)

    def test_header_name_bytes(self):
        rec = wire_record(1)
        rec["headers"] = [{"key": "a\ufffd", "key_bytes": "Yf8=", "value": None}]  # b"a\xff"
        _, [r] = decode_request(body(rec))
        name = r.headers[0][0]
        self.assertEqual(name.encode("utf-8", "surrogateescape"), b"a\xff")

    def test_other_version(self):
        with self.assertRaises(UnknownVersion) as c:
            decode_request(body(wire_record(1), version=2))
        self.assertIn("version 2", str(c.exception))

    def test_bad_bodies_name_the_field(self):
        bad_b64 = wire_record(3)
        bad_b64["value"] = "not base64!"
        no_offset = wire_record(3)
        del no_offset["offset"]
        for raw, want in [
            (b"{", "not JSON"),
            (b"[]", "not a JSON object"),
            (body(bad_b64), "records[0].value"),
            (body(wire_record(1), no_offset), "records[1].offset"),
            (b'{"version": 1, "member": "m", "records": {}}', "records:"),
        ]:
            with self.subTest(want=want):
                with self.assertRaises(BadRequest) as c:
                    decode_request(raw)
                self.assertIn(want, str(c.exception))


if __name__ == "__main__":
    unittest.main()
