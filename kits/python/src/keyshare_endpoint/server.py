"""The HTTP/1.1 server: a thread per connection, connections kept alive.

The member keeps its connections open between requests (HTTP/1.1
keep-alive) and opens up to ``--concurrency`` of them; each gets a thread
here, blocked on its socket while idle. The Endpoint's ``concurrency``
bounds how many requests run the record function at once; a request
beyond it waits for a slot.
"""
from __future__ import annotations

import socket
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer



#: Bounds on a request's head, as http.client's: a line's length, and the
#: number of header lines.
_MAX_LINE = 65536
_MAX_HEADERS = 100


class _Headers(dict):
    """A request's headers by lower-case name (the first of a repeated one)."""

    def get(self, name, default=None):
        return dict.get(self, name.lower(), default)

    def __getitem__(self, name):
        return dict.get(self, name.lower())

    def __contains__(self, name):
        return dict.__contains__(self, name.lower())


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep the connection between requests
    # One write per answer: headers and body are buffered and flushed
    # together, so Nagle's algorithm never holds the body back.
    wbufsize = 1 << 16
    server_version = "keyshare-endpoint"

    def setup(self):
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def parse_request(self):
        """http.server's parse_request, with a lighter header parser.

        The standard one parses a request's head with the email package,
        which costs more than the rest of an answer: about 30 of the 70 us
        of CPU a one-record request took here. The member sends plain
        HTTP/1.1 heads; this reads them line by line within the same bounds
        (431 past them) and keeps http.server's rules for the request line,
        keep-alive and Expect: 100-continue.
        """
        self.command, self.request_version = None, self.default_request_version
        self.close_connection = True
        self.requestline = str(self.raw_requestline, "iso-8859-1").rstrip("\r\n")
        words = self.requestline.split()
        if len(words) != 3 or not words[2].startswith("HTTP/1."):
            self.request_version = "HTTP/1.0"  # an answer with a status line, then closed
            self.send_error(400, "Bad request line %r: want METHOD PATH HTTP/1.x" % self.requestline[:100])
            return False
        self.command, self.path, self.request_version = words
        self.close_connection = self.request_version == "HTTP/1.0"
        headers = _Headers()
        for _ in range(_MAX_HEADERS + 1):
            line = self.rfile.readline(_MAX_LINE + 1)
            if len(line) > _MAX_LINE:
                self.send_error(431, "A header line is over %d bytes" % _MAX_LINE)
                return False
            if line in (b"\r\n", b"\n", b""):
                break
            name, colon, value = str(line, "iso-8859-1").partition(":")
            if not colon or name != name.strip() or not name:
                self.send_error(400, "Bad header line %r" % line[:100])
                return False
            headers.setdefault(name.lower(), value.strip())
        else:
            self.send_error(431, "More than %d header lines" % _MAX_HEADERS)
            return False
        self.headers = headers
        connection = headers.get("Connection", "").lower()
        if connection == "close":
            self.close_connection = True
        elif connection == "keep-alive":
            self.close_connection = False
        if headers.get("Expect", "").lower() == "100-continue" and self.request_version != "HTTP/1.0":
            return self.handle_expect_100()
        return True

    def _body(self):
        """The request body, or None after answering a body it cannot read."""
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            return self._chunked()
        length = self.headers.get("Content-Length")
        if length is None:
            return b""
        try:
            n = int(length)
        except ValueError:
            self._answer(400, b"Content-Length %r is not a number" % length.encode(), close=True)
            return None
        if n > self.server.endpoint.max_body:
            self._answer(413, b"a body of %d bytes is over this endpoint's max_body of %d" % (n, self.server.endpoint.max_body), close=True)
            return None
        return self.rfile.read(n)

    def _chunked(self):
        parts, size = [], 0
        while True:
            line = self.rfile.readline()
            try:
                n = int(line.split(b";")[0].strip(), 16)
            except ValueError:
                self._answer(400, b"a chunk size that is not hexadecimal: %r" % line[:32], close=True)
                return None
            if n == 0:
                while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                    pass  # trailers
                return b"".join(parts)
            size += n
            if size > self.server.endpoint.max_body:
                self._answer(413, b"the body is over this endpoint's max_body", close=True)
                return None
            parts.append(self.rfile.read(n))
            self.rfile.readline()

    def _serve(self):
        body = self._body()
        if body is None:
            return
        r = self.server.endpoint.respond(self.command, self.headers, body)
        self._answer(r.status, r.body, r.headers)

    def _answer(self, status, body, headers=(), close=False):
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        if close:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        self.wfile.write(body)

    do_POST = do_GET = do_PUT = do_PATCH = do_DELETE = _serve

    def log_message(self, format, *args):  # one line per request is too many
        pass


class Server(ThreadingHTTPServer):
    """A ThreadingHTTPServer serving one Endpoint."""

    daemon_threads = True
    # The member opens its connections at once (up to --concurrency, 16 by
    # default; a benchmark opens 100): a backlog of 5 would drop SYNs.
    request_queue_size = 1024

    def __init__(self, address, endpoint):
        # The endpoint is anything with respond(method, headers, body), as
        # keyshare_endpoint.Endpoint has; this module does not import it, so
        # that the endpoint's serve can use this one.
        if not callable(getattr(endpoint, "respond", None)):
            raise TypeError("Server(address, endpoint): want an Endpoint (a function decorated with @endpoint), got %r" % (endpoint,))
        self.endpoint = endpoint
        super().__init__(address, _Handler)

    def handle_error(self, request, client_address):
        # A member that went away mid-request (a revoked range, a crash) is
        # no error here: it, or the range's next owner, sends the records again.
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


def make_server(endpoint, host: str = "127.0.0.1", port: int = 8080) -> Server:
    """A Server for endpoint on host:port (port 0: a free one, see server_address)."""
    return Server((host, port), endpoint)

