"""Turning a function of records into a delivery endpoint's answers."""
from __future__ import annotations

import hmac
import json
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, List, Optional, Tuple

from .outcome import DeadlinePassed, Outcome, Retry, outcome_of, result_of
from .record import BadRequest, UnknownVersion, decode_request
from .server import make_server

log = logging.getLogger("keyshare_endpoint")

#: The request header that carries a request's deadline, in milliseconds
#: since the Unix epoch, when the member runs with --deliver-timeout.
DEADLINE_HEADER = "Keyshare-Deadline"

#: The member's default --concurrency: requests it keeps open at once.
DEFAULT_CONCURRENCY = 16


@dataclass
class Response:
    """An HTTP answer: status, headers and body."""

    status: int
    body: bytes = b""
    headers: List[Tuple[str, str]] = field(default_factory=list)


def _text(status, message, *headers):
    return Response(status, message.encode("utf-8", "replace"), [("Content-Type", "text/plain; charset=utf-8"), *headers])


class Endpoint:
    """A delivery endpoint around ``fn``.

    With ``batch=False`` (``@endpoint``) fn takes one Record and is called
    for each record of a request in order; with ``batch=True``
    (``@batch_endpoint``) it takes the request's list of Records and
    returns None (all done) or one result per record: None for done, or a
    ``Failed`` or ``Fenced`` (returned or as an exception instance).

    ``token``: the bearer token the member sends (``--deliver-token-file``);
    a request without it is answered 401, which the member waits out.
    ``concurrency``: how many requests run ``fn`` at once (the member's
    ``--concurrency``, 16 by default, is how many it sends at once).

    The Endpoint is callable as fn itself, so a decorated function can
    still be called directly.
    """

    def __init__(self, fn: Callable, *, batch: bool = False, token: Optional[str] = None,
                 concurrency: int = DEFAULT_CONCURRENCY, max_body: int = 64 << 20):
        if not callable(fn):
            raise TypeError("Endpoint(fn): fn must be callable, got %r" % (fn,))
        if not isinstance(concurrency, int) or concurrency < 1:
            raise ValueError("concurrency=%r: the requests worked at once, 1 or more" % (concurrency,))
        if token is not None and (not token or token != token.strip()):
            raise ValueError("token: empty, or with white space around it; pass the token the member's --deliver-token-file holds, stripped")
        self.fn = fn
        self.batch = batch
        self.concurrency = concurrency
        self.max_body = max_body
        self._expected_auth = None if token is None else ("Bearer " + token).encode()
        self._slots = threading.BoundedSemaphore(concurrency)
        self.__wrapped__ = fn
        self.__doc__ = getattr(fn, "__doc__", None)

    def __call__(self, *args, **kwargs):
        return self.fn(*args, **kwargs)

    def authorized(self, authorization: Optional[str]) -> bool:
        """Whether a request's Authorization header carries the token."""
        if self._expected_auth is None:
            return True
        return hmac.compare_digest((authorization or "").encode(), self._expected_auth)

    def respond(self, method: str, headers, body: bytes, now: Optional[float] = None) -> Response:
        """The answer to one HTTP request (headers: a mapping, case-insensitive get)."""
        if method != "POST":
            return _text(405, "a delivery endpoint takes POST, not %s" % method, ("Allow", "POST"))
        if not self.authorized(headers.get("Authorization")):
            # 401 is the member's set-up, not the records': it waits and sends again.
            return _text(401, "missing or wrong bearer token", ("WWW-Authenticate", "Bearer"))
        deadline = None
        raw = headers.get(DEADLINE_HEADER)
        if raw is not None:
            try:
                deadline = int(raw) / 1000.0
            except ValueError:
                return _text(400, "%s %r: want milliseconds since the Unix epoch" % (DEADLINE_HEADER, raw))
        try:
            _, records = decode_request(body, deadline)
        except UnknownVersion as e:
            return _text(501, str(e))  # the member waits, dead-lettering nothing
        except BadRequest as e:
            return _text(400, str(e))
        if deadline is not None and (now if now is not None else time.time()) > deadline:
            return _text(504, "the request's deadline passed before it was applied")
        with self._slots:
            try:
                results = self._run_batch(records) if self.batch else self._run_each(records)
            except Retry as e:
                extra = [] if e.after is None else [("Retry-After", str(int(e.after + 0.999)))]
                return _text(503, e.reason or "the endpoint asks for the request again later", *extra)
            except DeadlinePassed as e:
                return _text(504, str(e) or "the request's deadline passed before it was applied")
        body = json.dumps({"results": [_result(rec, r) for rec, r in zip(records, results)]}).encode()
        return Response(200, body, [("Content-Type", "application/json")])

    def _run_each(self, records) -> list:
        """Runs fn on each record in order.

        After a key's first record not done, the key's later records of the
        request are not applied: the member sends them again once that one
        is settled, and applying them now would put them before it.
        """
        results, stopped = [], {}
        for rec in records:
            k = rec.order_key
            if k is not None and k in stopped:
                first = stopped[k]
                results.append(type(first)("an earlier record of the key in this request was not done: " + first.reason))
                continue
            if rec.deadline is not None and time.time() > rec.deadline:
                raise DeadlinePassed("the request's deadline passed at offset %d: the rest was not applied" % rec.offset)
            outcome = self._call(rec)
            if outcome is not None and k is not None:
                stopped[k] = outcome
            results.append(outcome)
        return results

    def _call(self, rec) -> Optional[Outcome]:
        try:
            got = self.fn(rec)
        except (Retry, DeadlinePassed):
            raise
        except Exception as e:  # a failing record, as a Go handler's error
            if not isinstance(e, Outcome):
                log.warning("record %s/%d@%d failed", rec.topic, rec.partition, rec.offset, exc_info=True)
            return outcome_of(e)
        return got if isinstance(got, Outcome) and not isinstance(got, Retry) else None

    def _run_batch(self, records) -> list:
        deadline = records[0].deadline if records else None
        if deadline is not None and time.time() > deadline:  # it waited for a slot past it
            raise DeadlinePassed("the request's deadline passed while it waited for one of the endpoint's %d slots" % self.concurrency)
        try:
            got = self.fn(records)
        except (Retry, DeadlinePassed):
            raise
        except Exception as e:
            if not isinstance(e, Outcome):
                log.warning("batch of %d records failed", len(records), exc_info=True)
            o = outcome_of(e)
            return [o] * len(records)
        if got is None:
            return [None] * len(records)
        got = list(got)
        if len(got) != len(records):
            # The function's bug, not the records': trouble (503), sent again.
            raise Retry("the batch function returned %d results for %d records" % (len(got), len(records)))
        out = []
        for i, r in enumerate(got):
            if isinstance(r, Retry):
                raise r
            if r is not None and not isinstance(r, Outcome):
                raise Retry("result %d of the batch is %r: want None, Failed or Fenced" % (i, r))
            out.append(r)
        return out

    def serve(self, host: str = "127.0.0.1", port: int = 8080):
        """Serves the endpoint on host:port until interrupted; make_server
        gives the server itself, to run it on a thread of one's own."""
        with make_server(self, host, port) as srv:
            print("keyshare endpoint listening on http://%s:%d/" % srv.server_address[:2], flush=True)
            try:
                srv.serve_forever()
            except KeyboardInterrupt:
                pass


def _result(rec, outcome) -> dict:
    """The answer's result for rec: its outcome and, when done, the change
    the function made to its key's state. A record not done changes no
    state (the member would refuse the answer), so its change is dropped."""
    result = result_of(outcome)
    if rec._state is not None:
        if outcome is not None:
            rec._state.discard()
        change = rec._state.wire()
        if change is not None:
            result["state"] = change
    return result


def endpoint(fn=None, **options):
    """Decorator: ``@endpoint`` or ``@endpoint(token=..., concurrency=...)`` on a function of one Record."""
    if fn is None:
        return lambda f: Endpoint(f, batch=False, **options)
    return Endpoint(fn, batch=False, **options)


def batch_endpoint(fn=None, **options):
    """Decorator: as ``endpoint``, on a function of a request's list of Records."""
    if fn is None:
        return lambda f: Endpoint(f, batch=True, **options)
    return Endpoint(fn, batch=True, **options)
