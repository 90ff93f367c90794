"""``scrub_shapes`` skips a pattern when the text lacks every word the pattern needs. The skip
must never change the result: checked against running every pattern, on the corpus and on
generated text full of near-misses, and the case folding it relies on is checked against
Python's own case-insensitive matching for every code point."""

from __future__ import annotations

import re
import string
import sys

from hypothesis import given, settings
from hypothesis import strategies as st

from agents.runtime import secret_shapes as shapes
from tests.agents.runtime.secret_corpus import CLEAN, SECRETS


def every_pattern(text: str) -> str:
    """The scrub with no skipping: each pattern run over the whole text, in the same order."""
    if "PRIVATE KEY" in text:
        text = shapes._pem_blocks(text)
    text = shapes._URL_PASSWORD.sub(lambda m: f"{m.group(1)}{m.group(2)}:{shapes.SECRET_MARKER}@", text)
    text = shapes._SLACK_WEBHOOK.sub(lambda m: f"{m.group(1)}{shapes.SECRET_MARKER}", text)
    text = shapes._HEADER.sub(shapes._header_value, text)
    text = shapes._BEARER.sub(lambda m: f"{m.group(1)}{m.group(2)}{shapes.SECRET_MARKER}", text)
    text = shapes._PREFIXED.sub(shapes.KEY_MARKER, text)
    return shapes._NAMED_VALUE.sub(shapes._named_value, text)


def test_the_folds_are_every_character_beyond_ascii_that_matches_an_ascii_letter():
    letter = re.compile(r"(?i)[a-z]")
    found = {chr(cp) for cp in range(128, sys.maxunicode + 1)
             if not 0xD800 <= cp <= 0xDFFF and letter.fullmatch(chr(cp))}
    assert found == set(shapes._FOLDS)
    for char in found:  # and each is folded to the letter it matches
        assert re.fullmatch(f"(?i){char.translate(shapes._FOLD)}", char)


def test_the_corpus_scrubs_the_same_with_and_without_skipping():
    texts = [context.format(s=secret) for _, secret, context in SECRETS] + list(CLEAN)
    for text in texts:
        assert shapes.scrub_shapes(text) == every_pattern(text), text


# Every key name the named-value pattern knows, in each spelling it accepts.
KEY_NAMES = ["secret", "token", "password", "passwd", "passphrase", "pwd", "apikey", "api_key", "api-key",
             "access_key", "access-key", "accesskey", "private_key", "privatekey", "secret_key", "secretkey",
             "client_secret", "clientsecret", "auth_token", "authtoken", "credential", "credentials", "session",
             "session_id", "sessionid", "cookie", "signature", "sig", "db_password", "my.secret.value"]
HEADER_NAMES = ["authorization", "proxy-authorization", "x-api-key", "api-key", "x-auth-token", "x-access-token",
                "x-goog-api-key", "cookie", "set-cookie", "private-token"]


def test_no_word_looked_for_sits_deeper_in_a_key_name_than_the_reach_allows():
    deepest = max(min(name.lower().find(w) for w in shapes._NAMED_WORDS if w in name.lower())
                  for name in KEY_NAMES)
    assert deepest + 31 <= shapes._NAME_REACH


def test_every_key_name_and_header_the_patterns_know_is_looked_for():
    for name in KEY_NAMES:
        for spelled in (name, name.upper(), name.title()):
            text = f"{spelled}=Zq8vLm2pXw9rTt4y"
            assert shapes.scrub_shapes(text) == every_pattern(text) == f"{spelled}={shapes.SECRET_MARKER}", text
    for name in HEADER_NAMES:
        text = f"{name.title()}: Zq8vLm2pXw9rTt4y"
        assert shapes.SECRET_MARKER in shapes.scrub_shapes(text) == every_pattern(text), text
    text = "Authorization: Bearer Zq8vLm2pXw9rTt4yZq8v"
    assert shapes.scrub_shapes(text) == every_pattern(text) != text
    assert shapes.scrub_shapes("hooks.slack.com/services/T000/B000/XXXX") == every_pattern(
        "hooks.slack.com/services/T000/B000/XXXX") != "hooks.slack.com/services/T000/B000/XXXX"


# Pieces that make near-misses: the patterns' words in any case (and spelled with the folding
# characters), separators, schemes, values of every kind.
PIECES = st.sampled_from([
    "secret", "SECRET", "ſecret", "token", "Token", "passwd", "PassWord", "passphrase", "PASSPHRASE", "pwd", "api_key", "api-key", "APIKEY",
    "access_key", "private_key", "client_secret", "credentials", "session_id", "cookie", "Set-Cookie",
    "signature", "sig", "ſig", "\u212aey", "KEY", "authorization", "Authorization", "x-api-key", "X-Auth-Token",
    "x-access-token", "private-token", "bearer", "Basic", "BEARER", "hooks.slack.com/services/", "HOOKS.SLACK.COM/",
    "https://", "postgres://", "redis://:", "user:", "@host", "=", ": ", "=>", "\"", "'", " ", "\t", "\n", "_",
    "-", ".", "{", "}", "[", "]", "[REDACTED]", "abcdef123456", "hunter2hunter2", "sk-abcdefghijklmnopqrstuv",
    "AKIAABCDEFGHIJKLMNOP", "ghp_abcdefghijklmnopqrstuvwxyz0123456789", "1234567890", "true", "bearer",
    "İ", "ı", "\u0130d", "toke\u0131", "s\u0131g", "a" * 24, "a" * 30 + "_", "mypass", "x_", "abc123",
    "private_key", "client-secret", "auth_token", "session_id",
])


@settings(max_examples=1500, deadline=None)
@given(st.lists(PIECES | st.text(alphabet=string.printable, max_size=6), max_size=24).map("".join))
def test_generated_text_scrubs_the_same_with_and_without_skipping(text):
    assert shapes.scrub_shapes(text) == every_pattern(text)


def test_a_name_with_the_longest_prefix_is_found_from_any_word_in_it():
    """A name may start 30 characters and a separator before its key name, and the word looked
    for may sit inside the key name (``private_key``: "key" 8 characters in)."""
    prefix = "a" * 30
    for name in ("private_key", "private-key", "access_key", "client_secret", "auth_token", "api_key",
                 "secret_key", "session_id"):
        text = f"x {prefix}_{name}=Zq8vLm2pXw9rTt4y and more"
        assert shapes.scrub_shapes(text) == every_pattern(text) == (
            f"x {prefix}_{name}={shapes.SECRET_MARKER} and more"), text


def test_a_large_text_with_a_few_key_names_scrubs_the_same():
    filler = '{"role": "user", "blocks": [{"type": "text", "text": "hello world 2026-01-01"}]}, ' * 4000
    text = (filler + '"max_tokens": null, "api_key": "Zq8vLm2pXw9rTt4y", ' + filler
            + "password=hunter2hunter2 " + filler)
    scrubbed = shapes.scrub_shapes(text)
    assert scrubbed == every_pattern(text)
    assert "Zq8vLm2pXw9rTt4y" not in scrubbed and "hunter2hunter2" not in scrubbed


def test_a_match_is_tried_from_the_start_of_its_longest_name():
    """Started later, the same value would be judged by a shorter name: "…pass…_private_key"
    is a password (masked even when short), "private_key" alone is not."""
    text = f"{'mypass' + 'a' * 24}_private_key=abc123"
    assert shapes.scrub_shapes(text) == every_pattern(text) == f"{'mypass' + 'a' * 24}_private_key={shapes.SECRET_MARKER}"
