"""Small JSON objects the controller keeps in the control store (its lease, its mirror's
index), sealed with an HMAC-SHA256 under the run's state key: whoever can write the store
can replace them, never forge one that opens."""

from __future__ import annotations

import hashlib
import hmac
import json
from typing import Any

MAC = "mac"


def _mac(key: bytes, body: dict[str, Any]) -> str:
    return hmac.new(key, json.dumps(body, sort_keys=True, separators=(",", ":")).encode(), hashlib.sha256).hexdigest()


def seal(body: dict[str, Any], key: bytes) -> bytes:
    return json.dumps({**body, MAC: _mac(key, body)}, sort_keys=True).encode()


def unseal(data: bytes, key: bytes, fields: set[str], what: str) -> dict[str, Any] | str:
    """The object's fields (exactly ``fields``) when it opens under ``key``, else why not
    (one line, after the object's name: "is not JSON")."""
    try:
        obj = json.loads(data)
    except (ValueError, UnicodeDecodeError):
        return "is not JSON"
    if not isinstance(obj, dict) or not isinstance(obj.get(MAC), str):
        return f"is not {what}"
    mac = obj.pop(MAC)
    if set(obj) != fields:
        return f"has fields other than {what}'s"
    if not hmac.compare_digest(mac, _mac(key, obj)):
        return "does not verify under this run's key (altered, or another key's)"
    return obj
