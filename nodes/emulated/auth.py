"""The run's secret and the proofs of it that brokers and clients carry in their HELLOs.

**Threat model.** The adversary is a process that can reach a broker over the emulated
network (a process on any Mininet host, or one left over from an earlier run or
algorithm) and send it arbitrary bytes, but does not know this run's secret. It cannot
read the run folder, where each process's config file (mode 0600) holds the secret: on
a Mininet machine every host shares the file system and runs as root, so this is the
lab's assumption, not something the code enforces. The secret is drawn afresh for every
set of broker processes (:class:`experiments.runs.brokers.BrokerRun`), so a process of an
earlier run, or of the previous algorithm on the same addresses, is a stranger too.

Out of scope: an attacker on the path that rewrites frames after the handshake (frames
carry no MAC; TCP is trusted once the connection is proven); secrecy of the traffic;
a process that knows the secret (a legitimate client): it is not trusted with other
names, but kept in bounds by the broker's admission rules (:mod:`nodes.emulated.admission`).

**Proof.** The dialling side's HELLO carries a fresh random ``nonce`` and ``proof`` =
HMAC-SHA256(secret, [sender, role, receiver, nonce]); the accepting broker's answer
carries the proof of the same form with itself as sender, over the dialler's nonce, so
each side knows the other holds the secret. The secret itself never travels: HELLOs
end up in the run's packet captures, and an HMAC reveals nothing about its key. The
receiver's name in the proof binds it to one node, and that node refuses a nonce it has
already accepted (:class:`NonceLog`), so a HELLO copied off the wire cannot be replayed
there either. The secret never goes into a log, a status file, the manifest or a summary;
config objects keep it out of their ``repr``.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
from typing import Any

SECRET_BYTES = 32
MIN_SECRET_BYTES = 16  # 128 bits: no brute force within a run
NONCE_BYTES = 16


def new_secret() -> str:
    """A fresh random secret for one run's brokers and clients (hex, as configs hold it)."""
    return secrets.token_hex(SECRET_BYTES)


def parse_secret(value: Any, where: str) -> bytes:
    """A config's ``secret``: at least :data:`MIN_SECRET_BYTES` bytes as hex digits. The
    message of the ``ValueError`` never quotes the value."""
    try:
        key = bytes.fromhex(value) if isinstance(value, str) else b""
    except ValueError:
        key = b""
    if len(key) < MIN_SECRET_BYTES:
        raise ValueError(f"{where}: secret must be at least {MIN_SECRET_BYTES} bytes as "
                         "hex digits (see nodes.emulated.auth.new_secret)")
    return key


def new_nonce() -> str:
    """A fresh nonce for one HELLO (hex)."""
    return secrets.token_hex(NONCE_BYTES)


def prove(secret: bytes, sender: str, role: str, receiver: str, nonce: str) -> str:
    """The proof that ``sender`` (in ``role``) knows ``secret``, for ``receiver`` and the
    connection's ``nonce`` (hex). A JSON list keeps the fields apart unambiguously."""
    text = json.dumps([sender, role, receiver, nonce], ensure_ascii=True)
    return hmac.new(secret, text.encode(), hashlib.sha256).hexdigest()


def is_proof(secret: bytes, proof: Any, sender: str, role: str, receiver: str,
             nonce: str) -> bool:
    """Whether ``proof`` (a HELLO field, any JSON value) is the right one; the
    comparison takes the same time whatever the proof's bytes."""
    return isinstance(proof, str) and hmac.compare_digest(
        proof.encode(), prove(secret, sender, role, receiver, nonce).encode())


def is_nonce(value: Any) -> bool:
    """Whether a HELLO's ``nonce`` has the form :func:`new_nonce` gives."""
    return (isinstance(value, str) and len(value) == 2 * NONCE_BYTES
            and all(c in "0123456789abcdef" for c in value))


class NonceLog:
    """The nonces of the HELLOs a broker has accepted, to refuse a replayed one. Only
    proven HELLOs are added, so only holders of the secret make it grow (by 32 bytes
    per connection); it is kept for the broker's lifetime."""

    def __init__(self) -> None:
        self._seen: set[str] = set()

    def first_use(self, nonce: str) -> bool:
        """Record ``nonce``; whether it was new."""
        if nonce in self._seen:
            return False
        self._seen.add(nonce)
        return True
