"""The keys of a run: one per generation for checkpoints, and one pair for fences.

The first round gave every attempt the run's key, so a zombie (an attempt superseded
but still running, on a cluster nobody can reach) could sign checkpoints and fences as
its successor. Two changes close that:

- **Generation keys, a backward hash chain.** From the run's secret the controller
  derives ``K_top``; the key of generation ``g`` is ``K_g = SHA256^(TOP - g)(K_top)``,
  so ``K_g = SHA256(K_{g+1})``. Attempt ``g`` gets ``K_g`` alone: it can derive the key
  of every earlier generation (to check the checkpoints it restores) and of none later
  (SHA-256 does not run backwards), so it cannot sign a checkpoint as its successor.
  The controller holds the secret and checks any generation's.
- **Fences signed by the controller alone (Ed25519).** A fence must be checkable by the
  attempts it stops, yet a shared (HMAC) key that checks a fence can also forge one, and
  a forged high fence would make the live attempt fence itself. So the controller signs
  fences with a private key derived from the secret and never sent anywhere; attempts
  get the public half.

What an attempt receives is ``AttemptKeys``: its generation, its chain key and the
fence public key, as one hex string in its driver's environment. Nothing here is
written to a store, a log or a file.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass, field

# Generations a run can have. An attempt, an in-place restart and a resume each take
# one; deriving the last costs TOP hashes (about 30 ms).
TOP = 1 << 16
_CHAIN_LABEL = b"orchestrator generation chain v1\0"
_FENCE_LABEL = b"orchestrator fence key v1\0"
_CHANNEL_LABEL = b"orchestrator control channel v1\0"
_WIRE_VERSION = b"k2"


class KeysError(ValueError):
    """Key material that cannot be used; the message never carries a key."""


# Keys met on the way down a chain, every ANCHOR hashes, per chain: a later derivation
# starts from the nearest one above it instead of the top (a controller checks manifests
# of many generations; each would otherwise cost up to TOP hashes).
ANCHOR = 512
_anchors: dict[bytes, dict[int, bytes]] = {}


def _hash_down(key: bytes, times: int) -> bytes:
    """``key`` hashed ``times`` times."""
    marks = _anchors.setdefault(key, {0: key})
    start = max(t for t in marks if t <= times)
    out = marks[start]
    for t in range(start + 1, times + 1):
        out = hashlib.sha256(out).digest()
        if t % ANCHOR == 0 and len(marks) <= TOP // ANCHOR + 1:
            marks[t] = out
    if len(_anchors) > 64:  # bounded: one chain per run a process checks
        _anchors.pop(next(iter(_anchors)))
    return out


def chain_top(secret: bytes, run_id: str) -> bytes:
    return hmac.new(secret, _CHAIN_LABEL + run_id.encode(), hashlib.sha256).digest()


def fence_seed(secret: bytes, run_id: str) -> bytes:
    return hmac.new(secret, _FENCE_LABEL + run_id.encode(), hashlib.sha256).digest()


def fence_public_of(seed: bytes) -> bytes:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

    return Ed25519PrivateKey.from_private_bytes(seed).public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)


@dataclass(frozen=True)
class AttemptKeys:
    """What signs and checks a run's checkpoints and fences up to ``generation``.

    ``chain``: ``K_generation``. ``fence_public``: checks fences. ``fence_seed``: signs
    them, the controller's alone (None in an attempt)."""

    generation: int
    chain: bytes = field(repr=False)
    fence_public: bytes
    fence_seed: bytes | None = field(default=None, repr=False)

    def generation_key(self, generation: int) -> bytes | None:
        """``K_generation``; None for a generation these keys cannot reach (a later one)."""
        if not 1 <= generation <= self.generation:
            return None
        return _hash_down(self.chain, self.generation - generation)

    def channel_key(self, generation: int) -> bytes | None:
        """What seals generation ``generation``'s objects on the control channel (derived
        from ``K_generation``, never equal to it); None for a generation beyond reach."""
        key = self.generation_key(generation)
        return None if key is None else hmac.new(key, _CHANNEL_LABEL, hashlib.sha256).digest()

    def for_attempt(self, generation: int) -> AttemptKeys:
        """The keys an attempt of ``generation`` gets: no fence signing, no later generation."""
        key = self.generation_key(generation)
        if key is None:
            raise KeysError(f"generation {generation} is beyond what these keys reach ({self.generation})")
        return AttemptKeys(generation, key, self.fence_public)

    def sign_fence(self, payload: bytes) -> str:
        if self.fence_seed is None:
            raise KeysError("only the controller signs fences")
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

        return Ed25519PrivateKey.from_private_bytes(self.fence_seed).sign(payload).hex()

    def fence_verifies(self, payload: bytes, signature: str) -> bool:
        from cryptography.exceptions import InvalidSignature
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

        try:
            raw = bytes.fromhex(signature)
        except ValueError:
            return False
        if len(raw) != 64:
            return False
        try:
            Ed25519PublicKey.from_public_bytes(self.fence_public).verify(raw, payload)
        except InvalidSignature:
            return False
        return True

    def to_wire(self) -> str:
        """Hex for an attempt's environment (never the fence seed)."""
        if not 1 <= self.generation <= TOP:
            raise KeysError(f"generation {self.generation} is outside 1..{TOP}")
        return (_WIRE_VERSION + self.generation.to_bytes(4, "big") + self.chain + self.fence_public).hex()

    @staticmethod
    def from_wire(text: str) -> AttemptKeys:
        try:
            raw = bytes.fromhex(text.strip())
        except ValueError:
            raise KeysError("not hex") from None
        if len(raw) != 2 + 4 + 32 + 32 or not raw.startswith(_WIRE_VERSION):
            raise KeysError(f"{len(raw)} bytes, not the keys of an attempt")
        generation = int.from_bytes(raw[2:6], "big")
        if not 1 <= generation <= TOP:
            raise KeysError(f"generation {generation} is outside 1..{TOP}")
        return AttemptKeys(generation, raw[6:38], raw[38:70])


def controller_keys(secret: bytes, run_id: str) -> AttemptKeys:
    """Every generation's key and the fence signing key: the controller's, from the run's secret."""
    seed = fence_seed(secret, run_id)
    return AttemptKeys(TOP, chain_top(secret, run_id), fence_public_of(seed), seed)
