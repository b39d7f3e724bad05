"""What a record's function may say besides "done" (docs/delivery.md, "Answer").

Raise (or return) one of these from a record's function:

- ``Failed(reason)``: the record fails this attempt. The member retries it
  after its backoff and, after ``--max-attempts``, writes it to the
  dead-letter topic. Any other exception means the same, its text the
  reason.
- ``Fenced(reason)``: the record's fencing token is older than one a later
  owner of its range has written through the sink. The member retries it
  while it still works on it and never dead-letters it; the range's next
  owner sends it under its own token.
- ``Retry(reason, after=None)``: the endpoint, not the record, is in
  trouble (its database is down): the whole request is answered 503 and
  the member sends it again later, counting no attempt and dead-lettering
  nothing. ``after`` (seconds) becomes ``Retry-After``. Records of the
  request the function already applied are sent again too.
"""
from __future__ import annotations

from typing import Optional


class Outcome(Exception):
    """A record's outcome other than done."""

    status = ""

    def __init__(self, reason: str = ""):
        super().__init__(reason)
        self.reason = reason


class Failed(Outcome):
    """The record fails this attempt: retried, then dead-lettered."""

    status = "failed"


class Fenced(Outcome):
    """The record's fence is stale: retried while the member works on it, never dead-lettered."""

    status = "fenced"


class Retry(Outcome):
    """The endpoint's trouble: the whole request is answered 503 and sent again."""

    status = "retry"

    def __init__(self, reason: str = "", after: Optional[float] = None):
        super().__init__(reason)
        if after is not None and after < 0:
            raise ValueError("Retry(after=%r): a wait is 0 seconds or more" % (after,))
        self.after = after


class DeadlinePassed(Exception):
    """The request's Keyshare-Deadline passed before a record was applied.

    The rest of the request is not applied and the request is answered
    504: the member no longer waits for it and sends its records again.
    """


def result_of(outcome) -> dict:
    """The answer's result object for a record's outcome (None: done)."""
    if outcome is None:
        return {"status": "done"}
    return {"status": outcome.status, "error": outcome.reason}


def outcome_of(exc: BaseException) -> Outcome:
    """The outcome an exception raised by a record's function stands for."""
    if isinstance(exc, Outcome):
        return exc
    return Failed("%s: %s" % (type(exc).__name__, exc))
