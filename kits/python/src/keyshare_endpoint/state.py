"""A record's key state, kept by the member (docs/delivery.md, "Keyed state").

With ``keyshare member --state`` each record comes with its key's state:
bytes the endpoint chose, or none. The record's function reads it as
``record.state`` and changes it with ``record.set_state(b"...")`` or
``record.delete_state()``; the change goes back in the record's result,
and only on a ``done`` one.

In a batch a key's state goes with its first record only: its later
records are marked ``previous``, their state being what the endpoint made
of the record before. The kit links each such record to that one, so
``record.state`` is always the key's state just before the record, as the
function's changes to the earlier records left it.
"""
from __future__ import annotations

import base64
from typing import Optional, Union

from .outcome import Retry


class StateNotKept(Retry):
    """A state change for a record the member sent without state.

    Without ``--state`` the member keeps no state, and a change would be
    lost. The member's set-up is wrong, not the record: like a wrong token,
    the request is answered 503 with this reason, and the member waits and
    sends it again, dead-lettering nothing.
    """


class RecordState:
    """What the request said of one record's key state, and its change.

    ``sent`` is the state the request carried (None: none); ``previous`` the
    RecordState of the key's record before this one in the request, when
    the request marked it previous.
    """

    __slots__ = ("sent", "previous", "changed", "value")

    def __init__(self, sent: Optional[bytes] = None, previous: Optional["RecordState"] = None):
        self.sent = sent
        self.previous = previous
        self.changed = False
        self.value: Optional[bytes] = None  # the change: None deletes

    def before(self) -> Optional[bytes]:
        """The key's state before the record: walked back, not recursed,
        since a batch may hold thousands of one key's records."""
        s = self
        while s.previous is not None:
            s = s.previous
            if s.changed:
                return s.value
        return s.sent

    def discard(self):
        """Forgets the change: a record not done changes no state."""
        self.changed, self.value = False, None

    def wire(self) -> Optional[dict]:
        """The result's "state", or None to leave it out."""
        if not self.changed:
            return None
        return {"value": None if self.value is None else base64.b64encode(self.value).decode()}


def not_kept(what: str) -> StateNotKept:
    return StateNotKept(
        "%s: the member sent this record without state, so it keeps none and the change would be lost; "
        "run keyshare member with --state" % what)


def state_bytes(value: Union[bytes, bytearray, memoryview]) -> bytes:
    """value as the bytes of a state, or TypeError naming what to pass."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, str):
        raise TypeError("set_state(%.40r): a state is bytes; encode the text first (value.encode())" % value)
    raise TypeError("set_state(%.40r): a state is bytes, got %s; use delete_state() to remove it" % (value, type(value).__name__))


def decode_state(raw, where: str):
    """A request record's "state" as (sent, is_previous); raw is not None.

    Raises ValueError naming what is wrong (the caller makes it a 400).
    """
    if not isinstance(raw, dict):
        raise ValueError("%sstate: %.60r is not an object" % (where, raw))
    if raw.get("previous") is True:
        return None, True
    if "value" not in raw:
        raise ValueError('%sstate: %.60r has neither "value" nor "previous"' % (where, raw))
    v = raw["value"]
    if v is None:
        return None, False
    if not isinstance(v, str):
        raise ValueError("%sstate.value: %.60r is not base64 text" % (where, v))
    try:
        return base64.b64decode(v, validate=True), False
    except ValueError as e:
        raise ValueError("%sstate.value: not base64 (standard alphabet, padded): %s" % (where, e)) from None
