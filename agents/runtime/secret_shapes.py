"""Credentials recognised by shape, for ``scrub.scrub_secrets``: what ZeroClaw's two scrubbers
(``scrub_credentials``, ``LeakDetector``) let through.

* private keys: every ``-----BEGIN … PRIVATE KEY-----`` block (RSA, EC, DSA, OpenSSH,
  ENCRYPTED, PGP …); a block without its END line is masked to the end of the text;
* passwords in URLs of any scheme (``postgres://user:pw@host``, ``redis://:pw@host``,
  ``amqps://…``, ``https://user:pw@…``): the password only, the rest stays readable;
* credential headers (``Authorization``, ``Proxy-Authorization``, ``X-Api-Key``, ``Cookie``,
  ``Set-Cookie`` …) as HTTP, curl ``-v``, JSON or YAML lines: the value, the scheme word kept;
  bearer/basic tokens anywhere;
* provider keys by prefix: OpenAI, Anthropic, Google, Groq, OpenRouter, Hugging Face, GitHub,
  GitLab, Slack (tokens and webhook URLs), Stripe, AWS access keys, npm, SendGrid, Google OAuth,
  Twilio API keys (``SK`` and 32 hex digits);
* values after key-like names (``secret``, ``token``, ``password``, ``api_key``,
  ``aws_secret_access_key``, ``client_secret``, ``session``, ``cookie``, Azure's ``AccountKey``
  and ``SharedAccessKey`` of connection strings, ``sig`` of SAS URLs …) in ``key=value``,
  ``key: value``, JSON, YAML and env-file shapes, unless the value is plainly not a secret
  (a number, a boolean, a short word, an already masked value).

Every pattern is linear: character classes that cannot overlap their delimiters, possessive
quantifiers, bounded repeats. Markers name the kind (``[REDACTED_API_KEY]``) and keep no part
of the secret.
"""

from __future__ import annotations

import re

PRIVATE_KEY_MARKER = "[REDACTED_PRIVATE_KEY]"
KEY_MARKER = "[REDACTED_API_KEY]"
SECRET_MARKER = "[REDACTED]"  # noqa: S105 - the marker, not a secret

_PEM_BEGIN = re.compile(r"-----BEGIN [A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----")
_PEM_END = re.compile(r"-----END [A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----")

# scheme://user:password@ — the user part may be empty (redis://:pw@host).
_URL_PASSWORD = re.compile(
    r"(?i)\b([a-z][a-z0-9+.\-]{1,20}://)([^\s:/@?#\[\]]*+):([^\s@/?#]++)@")

_HEADER = re.compile(
    r"""(?im)(?<![A-Za-z0-9_-])((?:proxy-)?authorization|x-api-key|api-key|x-auth-token|"""
    r"""x-access-token|x-goog-api-key|cookie|set-cookie|private-token)"""
    r"""(["']?[ \t]*[:=][ \t]*["']?)([^\r\n"']++)""")
_AUTH_SCHEME = re.compile(r"(?i)^(bearer|basic|token|digest|bot|apikey)\s+")
_BEARER = re.compile(r"(?i)\b(bearer|basic)([ \t]++)([A-Za-z0-9._~+/=\-]{12,}+)")

_PREFIXED = re.compile(
    r"(?<![A-Za-z0-9_\-])(?:"
    r"sk-ant-[A-Za-z0-9_\-]{20,}+"                       # Anthropic
    r"|sk-(?:proj|svcacct|admin|or-v1|or)-[A-Za-z0-9_\-]{16,}+"  # OpenAI project/service, OpenRouter
    r"|sk-[A-Za-z0-9]{20,}+"                             # OpenAI (legacy), DeepSeek, others
    r"|AIza[0-9A-Za-z_\-]{35}"                           # Google
    r"|ya29\.[0-9A-Za-z_\-]{20,}+"                       # Google OAuth access token
    r"|gsk_[A-Za-z0-9]{20,}+"                            # Groq
    r"|hf_[A-Za-z0-9]{30,}+"                             # Hugging Face
    r"|gh[pousr]_[A-Za-z0-9]{30,}+|github_pat_[A-Za-z0-9_]{30,}+"  # GitHub
    r"|glpat-[A-Za-z0-9_\-]{20,}+|gl(?:dt|rt|ptt|oas)-[A-Za-z0-9_\-]{20,}+"  # GitLab
    r"|xox[abposr]-[A-Za-z0-9\-]{10,}+|xapp-[A-Za-z0-9\-]{10,}+"  # Slack
    r"|(?:sk|rk|pk)_(?:live|test)_[A-Za-z0-9]{16,}+|whsec_[A-Za-z0-9]{20,}+"  # Stripe
    r"|(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA|ANVA|AIPA)[A-Z0-9]{16}(?![A-Za-z0-9])"  # AWS key ids
    r"|npm_[A-Za-z0-9]{36}"                              # npm
    r"|SG\.[A-Za-z0-9_\-]{16,}+\.[A-Za-z0-9_\-]{16,}+"   # SendGrid
    r"|SK[0-9a-fA-F]{32}(?![A-Za-z0-9])"                  # Twilio API key
    r")")
_SLACK_WEBHOOK = re.compile(r"(?i)(hooks\.slack\.com/(?:services|workflows|triggers)/)[A-Za-z0-9/_\-]++")

_KEY_NAME = (r"(?:[A-Za-z0-9]{1,30}[_.\-])?(?:secret|token|passw(?:or)?d|passphrase|pwd|api[_\-]?key|"
             r"apikey|access[_\-]?key|private[_\-]?key|secret[_\-]?key|client[_\-]?secret|"
             r"auth[_\-]?token|credentials?|session(?:[_\-]?id)?|cookie|signature|sig|"
             r"account[_\-]?key|shared[_\-]?access[_\-]?key)"
             r"(?:[_.\-][A-Za-z0-9]{1,30})?")
_NAMED_VALUE = re.compile(
    rf"""(?i)(?<![A-Za-z0-9])({_KEY_NAME})(["']?[ \t]*(?::|=|=>)[ \t]*["']?)"""
    r"""([^\s"'`,;{}()<>\[\]]{6,}+)""")
_NOT_SECRET = re.compile(
    r"(?i)^(?:true|false|null|none|nil|undefined|required|optional|string|integer|number|"
    r"boolean|yes|no|on|off|enabled|disabled|\*+|x+|\$\{?[A-Za-z_][A-Za-z0-9_]*\}?|"
    r"<[^>]*>|\[redacted[^\]]*\]?)$")
_NUMBER = re.compile(r"^[0-9.,:+\-]+$")


def _pem_blocks(text: str) -> str:
    out: list[str] = []
    pos = 0
    while True:
        begin = _PEM_BEGIN.search(text, pos)
        if begin is None:
            out.append(text[pos:])
            return "".join(out)
        end = _PEM_END.search(text, begin.end())
        out.append(text[pos:begin.start()])
        out.append(PRIVATE_KEY_MARKER)
        if end is None:  # a cut-off block: everything after BEGIN is key material
            return "".join(out)
        pos = end.end()


def _header_value(match: re.Match[str]) -> str:
    value = match.group(3)
    if value.startswith("[REDACTED"):
        return match.group(0)
    scheme = _AUTH_SCHEME.match(value)
    kept = scheme.group(0) if scheme else ""
    return f"{match.group(1)}{match.group(2)}{kept}{SECRET_MARKER}"


def _named_value(match: re.Match[str]) -> str:
    value = match.group(3)
    name = match.group(1).lower()
    if _NOT_SECRET.match(value) or value.startswith("[REDACTED") or "*[REDACTED" in value:
        return match.group(0)
    password_like = any(word in name for word in ("pass", "pwd"))
    if _NUMBER.match(value) and not password_like:
        return match.group(0)  # counts, sizes, timestamps: token_count=12345678
    if not password_like and len(value) < 8:
        return match.group(0)
    if not password_like and value.isalpha() and value.islower() and len(value) < 16:
        return match.group(0)  # a plain word: "token_type": "bearer", session: expired
    return f"{match.group(1)}{match.group(2)}{SECRET_MARKER}"


# The characters beyond ASCII that a case-insensitive pattern matches to an ASCII letter (İ, ı,
# ſ and the Kelvin sign; a test checks every code point), so that the words a pattern needs can
# be looked for in a lowered copy of the text first.
_FOLDS = "\u0130\u0131\u017f\u212a"
_FOLD = str.maketrans({"\u0130": "i", "\u0131": "i", "\u017f": "s", "\u212a": "k"})
# A pattern can only match where one of its words is: a text without them skips it. (Looking
# for words in the lowered text is a fraction of the patterns' own scan, which dominates the
# scrubbing of a large payload: a megabyte took half a second.)
_HEADER_WORDS = ("authorization", "api-key", "auth-token", "access-token", "cookie", "private-token")
_BEARER_WORDS = ("bearer", "basic")
_NAMED_WORDS = ("secret", "token", "passw", "passphrase", "pwd", "key", "credential", "session",
                "cookie", "sig")
# Whether any of the words is in a text: one search instead of a test per word.
_HEADER_WORDS_RE, _BEARER_WORDS_RE, _NAMED_WORDS_RE = (
    re.compile("|".join(map(re.escape, words))) for words in (_HEADER_WORDS, _BEARER_WORDS, _NAMED_WORDS))


def _lowered(text: str) -> str:
    if not text.isascii() and any(c in text for c in _FOLDS):
        text = text.translate(_FOLD)
    return text.lower()


def scrub_shapes(text: str) -> str:
    """``text`` with every credential of the kinds above replaced by a marker."""
    if "PRIVATE KEY" in text:
        text = _pem_blocks(text)
    if "://" in text:
        text = _URL_PASSWORD.sub(lambda m: f"{m.group(1)}{m.group(2)}:{SECRET_MARKER}@", text)
    lowered = _lowered(text)
    if "hooks.slack.com/" in lowered:
        text = _SLACK_WEBHOOK.sub(lambda m: f"{m.group(1)}{SECRET_MARKER}", text)
    if _HEADER_WORDS_RE.search(lowered):
        text = _HEADER.sub(_header_value, text)
    if _BEARER_WORDS_RE.search(lowered):
        text = _BEARER.sub(lambda m: f"{m.group(1)}{m.group(2)}{SECRET_MARKER}", text)
    text = _PREFIXED.sub(KEY_MARKER, text)
    if _NAMED_WORDS_RE.search(lowered):
        text = _named_values(text)
    return text


# A named value starts at most this many characters before a word of ``_NAMED_WORDS`` in its
# name: the name's optional ``prefix_`` part (1-30 letters or digits and a separator), then the
# key name up to the word, at most 8 characters into it ("key" in "private_key").
_NAME_REACH = 31 + 8


def _named_values(text: str) -> str:
    """``_NAMED_VALUE.sub(_named_value, text)``, trying the pattern only where a match can start:
    within ``_NAME_REACH`` before a key word, and not right after a letter or digit (the
    pattern's look-behind). A large text with a few key words (a model request says
    ``max_tokens``) is then not scanned position by position."""
    lowered = _lowered(text)  # the same length as ``text`` (İ, the one letter whose lower case
    # is longer, is folded first)
    found: list[int] = []
    for word in _NAMED_WORDS:
        at = lowered.find(word)
        while at != -1:
            found.append(at)
            at = lowered.find(word, at + 1)
    # Each position is looked at once, however densely the key words come ('token="' repeated
    # for a megabyte looked at every position 40 times: a second).
    starts: list[int] = []
    reached = 0
    for at in sorted(found):
        starts.extend(p for p in range(max(at - _NAME_REACH, reached), at + 1)
                      if p == 0 or not (text[p - 1].isascii() and text[p - 1].isalnum()))
        reached = max(reached, at + 1)
    out: list[str] = []
    done = 0
    for p in starts:
        if p < done:
            continue
        match = _NAMED_VALUE.match(text, p)
        if match is not None:
            out.append(text[done:match.start()])
            out.append(_named_value(match))
            done = match.end()
    out.append(text[done:])
    return "".join(out)
