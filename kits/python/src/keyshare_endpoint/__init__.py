"""Write a keyshare delivery endpoint in Python (docs/delivery.md).

    from keyshare_endpoint import endpoint, Failed

    @endpoint
    def handle(record):
        if record.value is None:
            raise Failed("a record without a value")  # retried, then dead-lettered
        print(record.topic, record.partition, record.offset, record.key, record.value)

    handle.serve(port=8080)  # keyshare member ... --deliver http://127.0.0.1:8080/

The server is the standard library only. keyshare_endpoint.postgres (the
[postgres] extra, psycopg 3) applies each record effectively once into
PostgreSQL, fenced against a member that lost its range.
"""
from .endpoint import DEADLINE_HEADER, DEFAULT_CONCURRENCY, Endpoint, Response, batch_endpoint, endpoint
from .outcome import DeadlinePassed, Failed, Fenced, Outcome, Retry
from .record import WIRE_VERSION, BadRequest, Record, UnknownVersion, decode_record, decode_request
from .server import make_server
from .state import StateNotKept

__all__ = [
    "endpoint", "batch_endpoint", "Endpoint", "Response", "Record",
    "Failed", "Fenced", "Retry", "Outcome", "DeadlinePassed",
    "decode_request", "decode_record", "BadRequest", "UnknownVersion", "WIRE_VERSION",
    "DEADLINE_HEADER", "DEFAULT_CONCURRENCY", "make_server", "StateNotKept",
]
