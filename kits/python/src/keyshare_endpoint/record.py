"""Decoding a delivery request (docs/delivery.md, "Request") into records."""
from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass, field
from typing import List, Optional, Tuple, Union

from .state import RecordState, decode_state, not_kept, state_bytes

#: The body version this kit reads. A request of another version is
#: answered 501, which the member treats as the endpoint's trouble: it
#: waits and sends the records again, dead-lettering none.
WIRE_VERSION = 1


class BadRequest(ValueError):
    """A body that is not a delivery request: answered 400."""


class UnknownVersion(ValueError):
    """A body of a version this kit does not read: answered 501."""

    def __init__(self, version):
        super().__init__(
            "request body version %r: this endpoint reads version %d; "
            "upgrade keyshare-endpoint, or run a member that sends version %d"
            % (version, WIRE_VERSION, WIRE_VERSION))
        self.version = version


@dataclass
class Record:
    """One Kafka record as the member delivered it.

    ``key`` and ``value`` are the record's bytes (None for a null key or
    value). ``headers`` are (name, value) pairs in the producer's order; a
    name may repeat, a value is bytes or None. A name that is not valid
    UTF-8 is decoded with ``surrogateescape``, so
    ``name.encode("utf-8", "surrogateescape")`` gives its bytes exactly.

    ``range_lo``/``range_hi`` are the hash range ``[lo, hi)`` the member
    holds the record under and ``fence`` that range's fencing token (all
    None when the member sent none). ``attempt`` counts this member's
    requests for the record, from 1. ``deadline`` is the request's
    ``Keyshare-Deadline`` in Unix seconds, or None.

    ``state`` is the key's state before the record, with ``keyshare member
    --state``: bytes, or None when the key has none. ``set_state`` and
    ``delete_state`` change it (see keyshare_endpoint.state).
    """

    topic: str
    partition: int
    offset: int
    timestamp: Optional[int]
    key: Optional[bytes]
    value: Optional[bytes]
    headers: List[Tuple[str, Optional[bytes]]] = field(default_factory=list)
    attempt: int = 1
    hash: int = 0
    range_lo: Optional[int] = None
    range_hi: Optional[int] = None
    fence: Optional[int] = None
    member: str = ""
    deadline: Optional[float] = None
    _state: Optional[RecordState] = field(default=None, repr=False, compare=False)

    @property
    def state_kept(self) -> bool:
        """Whether the member keeps this record's key state (--state)."""
        return self._state is not None

    @property
    def state(self) -> Optional[bytes]:
        """The key's state before this record: bytes, or None for none.

        In a batch, a key's later records see what the function set or
        deleted for the key's records before them. None too when the
        member runs without --state (``state_kept`` tells the two apart).
        """
        return None if self._state is None else self._state.before()

    def set_state(self, value: Union[bytes, bytearray, memoryview]) -> None:
        """Makes value the key's state once the record is done.

        Without --state on the member this raises StateNotKept (the
        request is answered 503, naming --state); for a record with a null
        key, which has no state, ValueError (the record fails).
        """
        self._change("set_state", state_bytes(value))

    def delete_state(self) -> None:
        """Deletes the key's state once the record is done (as set_state)."""
        self._change("delete_state", None)

    def _change(self, what: str, value: Optional[bytes]) -> None:
        if self._state is None:
            raise not_kept("record.%s()" % what)
        if self.key is None:
            raise ValueError("record.%s(): the record at offset %d has a null key, which has no state" % (what, self.offset))
        self._state.changed, self._state.value = True, value

    @property
    def order_key(self):
        """What the record keeps order with: its key in its partition.

        None for a null key, which has no order to keep.
        """
        if self.key is None:
            return None
        return (self.topic, self.partition, self.key)


def _bytes(rec, name, where):
    v = rec.get(name)
    if v is None:
        return None
    if not isinstance(v, str):
        raise BadRequest("%s: %r is not base64 text" % (where + name, v))
    try:
        return base64.b64decode(v, validate=True)
    except (binascii.Error, ValueError) as e:
        raise BadRequest("%s: not base64 (standard alphabet, padded): %s" % (where + name, e)) from None


def _int(rec, name, where, optional=False):
    v = rec.get(name)
    if v is None and optional:
        return None
    if not isinstance(v, int) or isinstance(v, bool):
        raise BadRequest("%s: %r is not an integer" % (where + name, v))
    return v


def _headers(rec, where):
    raw = rec.get("headers")
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise BadRequest("%sheaders: %r is not a list" % (where, raw))
    out = []
    for j, h in enumerate(raw):
        at = "%sheaders[%d]." % (where, j)
        if not isinstance(h, dict) or not isinstance(h.get("key"), str):
            raise BadRequest("%skey: want a header object with a string key, got %r" % (at, h))
        name = h["key"]
        exact = _bytes(h, "key_bytes", at)
        if exact is not None:
            name = exact.decode("utf-8", "surrogateescape")
        out.append((name, _bytes(h, "value", at)))
    return out


def decode_record(rec, member="", deadline=None, where="records[0]."):
    """Decodes one record object of a request body into a Record.

    A record whose state is marked previous comes without it: the
    previous record is in its request, which decode_request reads.
    """
    return _decode_record(rec, member, deadline, where)[0]


def _decode_record(rec, member, deadline, where):
    """The Record of rec, and whether its state is marked previous."""
    if not isinstance(rec, dict):
        raise BadRequest("%s want a record object, got %r" % (where.rstrip("."), rec))
    topic = rec.get("topic")
    if not isinstance(topic, str):
        raise BadRequest("%stopic: %r is not a string" % (where, topic))
    lo = hi = None
    rng = rec.get("range")
    if rng is not None:
        if not isinstance(rng, dict):
            raise BadRequest("%srange: %r is not an object" % (where, rng))
        lo, hi = _int(rng, "lo", where + "range."), _int(rng, "hi", where + "range.")
    state, previous = None, False
    if rec.get("state") is not None:
        try:
            sent, previous = decode_state(rec["state"], where)
        except ValueError as e:
            raise BadRequest(str(e)) from None
        state = RecordState(sent)
    record = Record(
        topic=topic,
        partition=_int(rec, "partition", where),
        offset=_int(rec, "offset", where),
        timestamp=_int(rec, "timestamp", where, optional=True),
        key=_bytes(rec, "key", where),
        value=_bytes(rec, "value", where),
        headers=_headers(rec, where),
        attempt=_int(rec, "attempt", where),
        hash=_int(rec, "hash", where),
        range_lo=lo,
        range_hi=hi,
        fence=_int(rec, "fence", where, optional=True),
        member=member,
        deadline=deadline,
        _state=state,
    )
    return record, previous


def decode_request(body, deadline=None):
    """Decodes a request body (bytes) into (member, [Record]).

    Raises UnknownVersion for another body version and BadRequest for a
    body that is not a delivery request, each naming what is wrong.
    Fields the kit does not know are ignored, as the contract asks.
    """
    try:
        doc = json.loads(body)
    except (ValueError, UnicodeDecodeError) as e:
        raise BadRequest("the body is not JSON: %s" % e) from None
    if not isinstance(doc, dict):
        raise BadRequest("the body is not a JSON object")
    if doc.get("version") != WIRE_VERSION:
        raise UnknownVersion(doc.get("version"))
    member = doc.get("member")
    if not isinstance(member, str):
        raise BadRequest("member: %r is not a string" % (member,))
    recs = doc.get("records")
    if not isinstance(recs, list):
        raise BadRequest("records: %r is not a list" % (recs,))
    records, last = [], {}  # last: by key, the state of its latest record so far
    for i, r in enumerate(recs):
        where = "records[%d]." % i
        record, previous = _decode_record(r, member, deadline, where)
        if previous:
            earlier = last.get(record.key)
            if earlier is None:
                raise BadRequest('%sstate: "previous", but no earlier record of the key in this request carries its state' % where)
            record._state.previous = earlier
        if record._state is not None and record.key is not None:
            last[record.key] = record._state
        records.append(record)
    return member, records
