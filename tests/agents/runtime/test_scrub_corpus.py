"""``scrub_secrets`` on the corpus of real-shaped credentials (``secret_corpus``): every one
masked, the clean text untouched, hostile input in linear time."""

from __future__ import annotations

import pytest

from agents.runtime.scrub import scrub_secrets
from tests.agents.runtime.secret_corpus import CLEAN, SECRETS


def test_the_corpus_is_large_enough_and_its_secrets_distinct():
    assert len(SECRETS) >= 30
    assert len({label for label, _, _ in SECRETS}) == len(SECRETS)


def _fragments(secret: str) -> list[str]:
    # No run of 8 characters of a secret may survive (a prefix long enough to matter).
    body = secret.replace("\n", "")
    return [body[i:i + 8] for i in range(0, max(len(body) - 8, 0) + 1, 4)]


@pytest.mark.parametrize(("label", "secret", "context"), SECRETS, ids=[s[0] for s in SECRETS])
def test_every_secret_in_the_corpus_is_masked(label, secret, context):
    text = context.format(s=secret)
    scrubbed = scrub_secrets(text)
    assert "[REDACTED" in scrubbed
    leaked = [f for f in _fragments(secret) if f in scrubbed]
    assert not leaked, f"{label}: {scrubbed!r}"


@pytest.mark.parametrize("text", CLEAN)
def test_clean_text_comes_through_untouched(text):
    assert scrub_secrets(text) == text


def test_the_url_keeps_everything_but_its_password():
    assert scrub_secrets("postgres://app:s3cr3t-P4ss@db.internal:5432/prod") == \
        "postgres://app:[REDACTED]@db.internal:5432/prod"


def test_a_header_keeps_its_scheme_word():
    assert scrub_secrets("Authorization: Basic dXNlcjpwYXNzd29yZDEyMw==") == "Authorization: Basic [REDACTED]"


@pytest.mark.parametrize("hostile", [
    "a" * 100_000,
    "password=" * 12_000,
    "postgres://" + "a:" * 50_000,
    "-----BEGIN PRIVATE KEY-----" * 4_000,
    "Authorization: " + "Bearer " * 15_000,
    "x" * 50_000 + "@" + ":" * 50_000,
    "sk-" * 33_000,
    "eyJ." * 25_000,
])
def test_hostile_input_is_scrubbed_without_error(hostile):
    """How fast: ``bench.hostile_input``."""
    assert isinstance(scrub_secrets(hostile), str)
