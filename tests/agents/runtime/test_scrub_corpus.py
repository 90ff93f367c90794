"""``scrub_secrets`` on the corpus of real-shaped credentials (``secret_corpus``): every one
masked, the clean and the benign-but-random-looking text untouched, hostile input in linear
time."""

from __future__ import annotations

import random
import string

import pytest

from agents.runtime.scrub import scrub_secrets
from tests.agents.runtime.secret_corpus import BENIGN, CLEAN, SECRETS


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


@pytest.mark.parametrize("text", CLEAN + BENIGN)
def test_clean_text_comes_through_untouched(text):
    assert scrub_secrets(text) == text


def _masked(label: str, secret: str, context: str) -> bool:
    scrubbed = scrub_secrets(context.format(s=secret))
    return "[REDACTED" in scrubbed and not any(f in scrubbed for f in _fragments(secret))


def test_precision_and_recall_on_the_whole_corpus():
    """Recall: the secrets masked of all of them; precision: the texts changed that held a
    secret, of all the texts changed (41 secrets, 53 texts without one: 41/41 and 41/41 since
    the high-entropy rule reads words; it had changed 10 of the 53 before)."""
    assert len(BENIGN) >= 40
    caught = sum(_masked(*case) for case in SECRETS)
    changed = [text for text in CLEAN + BENIGN if scrub_secrets(text) != text]
    recall, precision = caught / len(SECRETS), caught / (caught + len(changed))
    assert (recall, precision) == (1.0, 1.0), f"recall {recall:.3f}, precision {precision:.3f}: {changed}"


@pytest.mark.parametrize(("alphabet", "length", "at_least"), [
    (string.ascii_letters + string.digits + "+/", 40, 0.99),  # base64, as most keys come
    (string.ascii_letters + string.digits, 32, 0.85),  # base62
])
def test_random_credentials_without_a_known_shape_are_still_caught_by_their_entropy(alphabet, length, at_least):
    """No name, no prefix: only the high-entropy rule can catch these; the rule reads words
    only in tokens without capitals, so mixed-case random tokens are judged whole as before."""
    rng = random.Random(7)
    tokens = ["".join(rng.choice(alphabet) for _ in range(length)) for _ in range(500)]
    caught = sum(token not in scrub_secrets(f"value: {token}-eco-line end") for token in tokens)
    assert caught / len(tokens) >= at_least


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
    "data:a/b" + ";x" * 50_000 + ";base64",
    "sha512-" * 20_000,
    "abcd" * 50_000,
    "0123456789" * 20_000 + "Zz",
])
def test_hostile_input_is_scrubbed_without_error(hostile):
    """How fast: ``bench.hostile_input``."""
    assert isinstance(scrub_secrets(hostile), str)
