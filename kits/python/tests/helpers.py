"""Request bodies as a keyshare member sends them (docs/delivery.md).

The tests import the checkout's package (../src) before an installed one.
"""
import base64
import json
import logging
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src"))
logging.getLogger("keyshare_endpoint").setLevel(logging.ERROR)  # the tests fail records on purpose


def b64(b):
    return None if b is None else base64.b64encode(b).decode()


def wire_record(offset, key=b"k", value=b"v", partition=0, fence=7, lo=0, hi=1 << 32, headers=(), attempt=1):
    return {
        "topic": "orders", "partition": partition, "offset": offset, "timestamp": 1767323045123,
        "key": b64(key), "value": b64(value),
        "headers": [{"key": k, "value": b64(v)} for k, v in headers],
        "attempt": attempt, "hash": 12345,
        "range": None if fence is None else {"lo": lo, "hi": hi},
        "fence": fence,
    }


def body(*records, version=1, member="m1"):
    return json.dumps({"version": version, "member": member, "records": list(records)}).encode()


class Headers(dict):
    """A header mapping with case-insensitive get, as http.server's."""

    def get(self, name, default=None):
        for k, v in self.items():
            if k.lower() == name.lower():
                return v
        return default
