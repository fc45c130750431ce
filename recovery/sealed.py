"""Small JSON objects kept in a shared place (the controller's lease, claims and mirror
index in the control store; every object on the control channel), sealed with an
HMAC-SHA256 under a key of the run's: whoever can write the place can replace them,
never forge one that opens.

The MAC covers the object's canonical JSON (sorted keys, no spaces) without the MAC
field, so a reader checks what it decoded, whatever spacing the writer used.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from typing import Any

from recovery.boundedjson import CodecError, decode

MAC = "mac"


def _mac(key: bytes, body: dict[str, Any]) -> str:
    return hmac.new(key, canonical(body), hashlib.sha256).hexdigest()


def canonical(body: dict[str, Any]) -> bytes:
    return json.dumps(body, sort_keys=True, separators=(",", ":")).encode()


def seal(body: dict[str, Any], key: bytes) -> bytes:
    return json.dumps({**body, MAC: _mac(key, body)}, sort_keys=True).encode()


def opened(obj: dict[str, Any], key: bytes) -> dict[str, Any] | str:
    """A decoded object's fields without its MAC when the MAC verifies under ``key``, else
    why not (one line: "is not signed", "does not verify ...")."""
    mac = obj.get(MAC)
    if not isinstance(mac, str):
        return "is not signed with the run's key"
    body = {k: v for k, v in obj.items() if k != MAC}
    try:
        expected = _mac(key, body)
    except (TypeError, ValueError):  # a value JSON cannot write back: not what a writer of ours sealed
        return "does not verify under this run's key (altered, or another key's)"
    if not hmac.compare_digest(mac, expected):
        return "does not verify under this run's key (altered, or another key's)"
    return body


def unseal(data: bytes, key: bytes, fields: set[str], what: str) -> dict[str, Any] | str:
    """The object's fields (exactly ``fields``) when it opens under ``key``, else why not
    (one line, after the object's name: "is not JSON"). Decoded with a bound on size and
    depth, so no bytes can make it raise."""
    try:
        obj = decode(data, strict=False)
    except CodecError:
        return "is not JSON"
    if not isinstance(obj, dict) or not isinstance(obj.get(MAC), str):
        return f"is not {what}"
    if set(obj) - {MAC} != fields:
        return f"has fields other than {what}'s"
    return opened(obj, key)
