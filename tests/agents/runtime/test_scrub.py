"""Credential scrubbing (``scrub_credentials``) and leak redaction (``LeakDetector``)."""

from __future__ import annotations

import json
import re
import string

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agents.runtime.scrub import (
    _DB_SCHEMES,
    LeakDetector,
    _db_url_finder,
    _jwt_spans,
    redact_leaks,
    scrub_credentials,
)
from tests.agents.runtime.parsing.test_parse_tool_calls import MIXED, repeat

# --------------------------------------------------------------------------------------------
# scrub_credentials
# --------------------------------------------------------------------------------------------


def test_scrub_keeps_the_key_separator_and_quotes_as_written():
    text = "password='hunter2hunter2' token = abcdefghijkl Bearer: xyzxyzxyzxyz"
    assert scrub_credentials(text) == ("password='hunt*[REDACTED]' token = abcd*[REDACTED] "
                                       "Bearer: xyzx*[REDACTED]")


def test_scrub_leaves_short_values_and_ordinary_text():
    assert scrub_credentials("token=abc1234 and a secret garden") == \
        "token=abc1234 and a secret garden"


def test_scrubbed_env_dump_hides_every_value():
    env = "OPENAI_API_KEY=sk-live-0123456789abcdef\nDB_PASSWORD=correct-horse-battery\nPATH=/usr/bin"
    assert scrub_credentials(env) == ("OPENAI_API_KEY=sk-l*[REDACTED]\n"
                                      "DB_PASSWORD=corr*[REDACTED]\nPATH=/usr/bin")


KEYS = st.sampled_from(["api_key", "apiKey", "API-KEY", "token", "password", "client_secret",
                        "user_key", "credential"])
SECRETS = st.text(alphabet=string.ascii_letters + string.digits, min_size=8, max_size=40)


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(KEYS, SECRETS, min_size=1), st.dictionaries(
    st.sampled_from(["name", "count", "note"]), st.text(max_size=10), max_size=3))
def test_scrubbed_json_stays_json_and_hides_the_secrets(secrets, public):
    document = {**public, **secrets}
    scrubbed = json.loads(scrub_credentials(json.dumps(document)))
    assert scrubbed.keys() == document.keys()
    for key, value in secrets.items():
        assert scrubbed[key] == f"{value[:4]}*[REDACTED]"
    for key, value in public.items():
        assert scrubbed[key] == value


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(MIXED)
def test_scrub_never_raises_and_is_idempotent(text):
    once = scrub_credentials(text)
    assert scrub_credentials(once) == once


# --------------------------------------------------------------------------------------------
# LeakDetector
# --------------------------------------------------------------------------------------------

PEM = "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA0ZPr5JeyVDonXsKhfq\n-----END RSA PRIVATE KEY-----"


@pytest.mark.parametrize(("text", "expected", "kind"), [
    ("stripe sk_test_" + "a1" * 13, "stripe [REDACTED_API_KEY]", "Stripe secret key"),
    ("key sk-ant-" + "b" * 40 + " ok", "key [REDACTED_API_KEY] ok", "Anthropic API key"),
    ("gh ghp_" + "c" * 36, "gh [REDACTED_API_KEY]", "GitHub token"),
    ("id AKIAABCDEFGHIJKLMNOP!", "id [REDACTED_AWS_CREDENTIAL]!", "AWS Access Key ID"),
    ("password=hunter2hunter2 end", "[REDACTED_SECRET] end", "Password in config"),
    (f"a\n{PEM}\nb", "a\n[REDACTED_PRIVATE_KEY]\nb", "RSA private key"),
    ("Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2ln", "Bearer [REDACTED_JWT]", "JWT token"),
    ("use mongodb+srv://app:pw@cluster0.example.net/db now",
     "use [REDACTED_DATABASE_URL] now", "MongoDB connection URL"),
    ("blob aZ9kQ2xV7pL3mN8rT1wY5uB4cD6eF0gH end", "blob [REDACTED_HIGH_ENTROPY_TOKEN] end",
     "High-entropy token"),
])
def test_leak_detector_redacts_each_kind(text, expected, kind):
    result = LeakDetector().scan(text)
    assert result.redacted == expected
    assert kind in result.patterns


def test_clean_text_urls_and_media_markers_are_left_alone():
    text = ("See https://example.com/aZ9kQ2xV7pL3mN8rT1wY5uB4cD6eF0gH and "
            "[IMAGE:/tmp/aZ9kQ2xV7pL3mN8rT1wY5uB4cD6eF0gH.png]; sha 0123456789abcdef0123456789abcdef")
    result = LeakDetector().scan(text)
    assert result.clean
    assert result.redacted == text


def test_low_sensitivity_skips_the_generic_rules():
    assert LeakDetector(0.3).scan("secret=mygenericvalue123456").clean
    assert not LeakDetector(0.7).scan("secret=mygenericvalue123456").clean


def test_private_key_end_line_before_the_begin_line_is_handled():
    # ZeroClaw sliced from BEGIN back to an earlier END and panicked.
    text = "-----END RSA PRIVATE KEY----- stray\n" + PEM
    assert redact_leaks(text) == "-----END RSA PRIVATE KEY----- stray\n[REDACTED_PRIVATE_KEY]"


def test_many_distinct_high_entropy_tokens_are_all_redacted():
    tokens = [f"k{i:03d}Zx9Qw2Er5Ty8Ui1Op4As7Df" for i in range(100)]
    redacted = redact_leaks(" ".join(tokens))
    assert all(token not in redacted for token in tokens)


@settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
@given(MIXED)
def test_leak_detector_never_raises(text):
    assert isinstance(LeakDetector().scan(text).redacted, str)


@pytest.mark.parametrize("text", [
    repeat("eyJ"),
    repeat("eyJa.eyJb."),
    repeat("postgres://a:b"),
    repeat("mysql://"),
    repeat('token="'),
    repeat("password="),
    repeat("sk-" + "a" * 30 + "T3Blbk"),
], ids=["eyJ", "jwt_like", "db_url", "mysql", "token_quote", "password", "openai_like"])
def test_a_megabyte_of_hostile_input_is_scrubbed_without_error(text):
    """How fast: ``bench.hostile_input``."""
    assert isinstance(scrub_credentials(text), str)
    assert isinstance(redact_leaks(text), str)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(["eyJ", ".", "a", "-", " ", "postgres://", "postgresql://",
                                 "mysql://", "mongodb+srv://", "redis://", ":", "@", "\n", "/"]),
                max_size=40).map("".join))
def test_jwt_and_database_url_matchers_equal_the_original_regexes(text):
    # Matched by hand because Python's re would backtrack quadratically on them.
    jwt = re.compile(r"eyJ[a-zA-Z0-9_-]*\.eyJ[a-zA-Z0-9_-]*\.[a-zA-Z0-9_-]*")
    assert _jwt_spans(text) == [m.span() for m in jwt.finditer(text)]
    originals = [r"postgres(ql)?://", r"mysql://", r"mongodb(\+srv)?://", r"redis://"]
    for (scheme, _name), original in zip(_DB_SCHEMES, originals, strict=True):
        pattern = re.compile(original + r"[^:]+:[^@]+@[^\s]+")
        assert _db_url_finder(scheme)(text) == [m.span() for m in pattern.finditer(text)]
