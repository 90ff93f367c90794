"""Secrets at rest (provider API keys, HTTP tool header values): Fernet from ``cryptography``.

Keys come from ``FIELD_ENCRYPTION_KEY`` (one or more Fernet keys, comma-separated: the first
encrypts, all decrypt, so keys can be rotated). Without it, a key is derived from ``SECRET_KEY``
with HKDF — convenient for development, but then changing ``SECRET_KEY`` makes stored secrets
unreadable; set ``FIELD_ENCRYPTION_KEY`` in production.

Decrypted values are for the outgoing request only: never render, log or trace them.
"""

from __future__ import annotations

import base64
from functools import lru_cache

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from django.conf import settings


class SecretUnreadable(Exception):
    """A stored secret cannot be decrypted with the configured keys."""

    def __init__(self) -> None:
        super().__init__(
            "A stored secret could not be decrypted: the encryption key changed since it was saved. "
            "Enter the secret again in the admin (or restore the previous FIELD_ENCRYPTION_KEY)."
        )


def _derived_key(secret_key: str) -> bytes:
    hkdf = HKDF(algorithm=hashes.SHA256(), length=32, salt=b"agentsite.field-encryption", info=b"fernet")
    return base64.urlsafe_b64encode(hkdf.derive(secret_key.encode()))


@lru_cache(maxsize=4)
def _fernet(keys: str, secret_key: str) -> MultiFernet:
    raw = [k.strip() for k in keys.split(",") if k.strip()] if keys else []
    fernets = [Fernet(k.encode()) for k in raw] or [Fernet(_derived_key(secret_key))]
    return MultiFernet(fernets)


def _current() -> MultiFernet:
    return _fernet(getattr(settings, "FIELD_ENCRYPTION_KEY", "") or "", settings.SECRET_KEY)


def encrypt(value: str) -> str:
    """A token for ``value``; the empty string stays empty (no secret stored)."""
    if not value:
        return ""
    return _current().encrypt(value.encode()).decode()


def decrypt(token: str) -> str:
    if not token:
        return ""
    try:
        return _current().decrypt(token.encode()).decode()
    except (InvalidToken, ValueError) as exc:
        raise SecretUnreadable() from exc
