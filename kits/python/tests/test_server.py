import http.client
import json
import socket
import threading
import unittest

from helpers import body, wire_record
from keyshare_endpoint import endpoint, make_server


class ServerTest(unittest.TestCase):
    def setUp(self):
        self.seen = []
        self.srv = make_server(endpoint(lambda r: self.seen.append(r.offset), concurrency=2), port=0)
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()
        self.addCleanup(self.srv.server_close)
        self.addCleanup(self.srv.shutdown)
        self.conn = http.client.HTTPConnection(*self.srv.server_address[:2], timeout=10)
        self.addCleanup(self.conn.close)

    def post(self, payload, headers=None):
        self.conn.request("POST", "/records", payload, {"Content-Type": "application/json", **(headers or {})})
        resp = self.conn.getresponse()
        return resp, resp.read()

    def test_keeps_the_connection(self):
        for offset in range(3):
            resp, data = self.post(body(wire_record(offset)))
            self.assertEqual(resp.status, 200)
            self.assertEqual(resp.version, 11)
            self.assertEqual(json.loads(data), {"results": [{"status": "done"}]})
        # one socket for the three requests: the first one's is still the connection's
        self.assertEqual(self.seen, [0, 1, 2])
        self.assertIsNotNone(self.conn.sock)

    def test_chunked_body(self):
        raw = body(wire_record(5))
        self.conn.putrequest("POST", "/")
        self.conn.putheader("Transfer-Encoding", "chunked")
        self.conn.endheaders()
        self.conn.send(b"%x\r\n%s\r\n0\r\n\r\n" % (len(raw), raw))
        resp = self.conn.getresponse()
        resp.read()
        self.assertEqual(resp.status, 200)
        self.assertEqual(self.seen, [5])

    def raw(self, head):
        """Sends a raw request head and returns the answer's status line."""
        with socket.create_connection(self.srv.server_address[:2], timeout=10) as s:
            s.sendall(head)
            return s.makefile("rb").readline()

    def test_bad_heads(self):
        self.assertIn(b" 400 ", self.raw(b"POST /\r\n\r\n"))
        self.assertIn(b" 400 ", self.raw(b"POST / HTTP/2.0\r\n\r\n"))
        self.assertIn(b" 400 ", self.raw(b"POST / HTTP/1.1\r\nno colon\r\n\r\n"))
        self.assertIn(b" 400 ", self.raw(b"POST / HTTP/1.1\r\nHost: a\r\n folded: line\r\n\r\n"))
        self.assertIn(b" 431 ", self.raw(b"POST / HTTP/1.1\r\nX: " + b"a" * 70000 + b"\r\n\r\n"))
        self.assertIn(b" 431 ", self.raw(b"POST / HTTP/1.1\r\n" + b"X: a\r\n" * 101 + b"\r\n"))

    def test_headers_any_case(self):
        srv = make_server(endpoint(lambda r: None, token="t0k"), port=0)
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        self.addCleanup(srv.server_close)
        self.addCleanup(srv.shutdown)
        raw = body(wire_record(1))
        with socket.create_connection(srv.server_address[:2], timeout=10) as s:
            s.sendall(b"POST / HTTP/1.1\r\nauthorization: Bearer t0k\r\ncontent-length: %d\r\nConnection: close\r\n\r\n%s" % (len(raw), raw))
            answer = s.makefile("rb").read()  # to the end: the server closes, as asked
        self.assertTrue(answer.startswith(b"HTTP/1.1 200 "), answer)
        self.assertTrue(answer.endswith(b'{"results": [{"status": "done"}]}'), answer)

    def test_other_method(self):
        self.conn.request("GET", "/")
        resp = self.conn.getresponse()
        resp.read()
        self.assertEqual(resp.status, 405)


if __name__ == "__main__":
    unittest.main()
