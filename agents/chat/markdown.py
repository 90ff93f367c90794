"""Chat messages as safe HTML: markdown (raw HTML off), code highlighted on the server, then an
allowlist sanitiser.

Model and tool output is untrusted. The pipeline is

1. ``markdown-it-py`` (CommonMark + tables + strikethrough) with ``html=False``: any HTML the
   model writes is shown as text, never parsed;
2. fenced code highlighted by Pygments into ``<span class>`` tokens (no inline styles; the
   stylesheet is ``static/css/pygments.css``, light and dark);
3. images are never loaded: each becomes a link "image: <alt> (<host>)" the reader may open
   (or plain text when it is not an http(s) image);
4. ``nh3`` keeps only the tags and attributes chat text needs; links keep http, https and mailto
   targets only, open in a new tab and get ``rel="nofollow noopener noreferrer"``.

The CSP (no inline script or style, images from this origin only) is the second line.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any
from urllib.parse import urlsplit

import nh3
from django.core.cache import cache
from django.utils.safestring import SafeString, mark_safe
from markdown_it import MarkdownIt
from markdown_it.common.utils import escapeHtml
from pygments import highlight as pygments_highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import get_lexer_by_name
from pygments.util import ClassNotFound

# Bump when the output changes, so cached renderings of the old shape are not reused.
RENDER_VERSION = 1
CACHE_TTL_S = 24 * 3600
# Larger texts are rendered every time (the cache is for the many small messages of a page).
CACHE_MAX_CHARS = 200_000
LINK_REL = "nofollow noopener noreferrer"

ALLOWED_TAGS = {
    "p", "br", "hr", "h1", "h2", "h3", "h4", "h5", "h6", "strong", "em", "del", "s", "code",
    "pre", "blockquote", "ul", "ol", "li", "a", "table", "thead", "tbody", "tr", "th", "td",
    "span",
}
ALLOWED_ATTRIBUTES = {
    "a": {"href", "title", "class"},
    "span": {"class"},
    "code": {"class"},
    "pre": {"class"},
    "th": {"class"},
    "td": {"class"},
    "ol": {"start"},
}
URL_SCHEMES = {"http", "https", "mailto"}
_LANGUAGE = re.compile(r"[^a-z0-9_+#.-]")

_formatter = HtmlFormatter(nowrap=True)


def _only_absolute_links(tag: str, attribute: str, value: str) -> str | None:
    # Relative links would point into this site from text nobody here wrote: drop them, and
    # anything else that is not an http(s) or mailto URL.
    if tag == "a" and attribute == "href":
        try:
            scheme = urlsplit(value).scheme.lower()
        except ValueError:
            return None
        return value if scheme in URL_SCHEMES else None
    return value


_cleaner = nh3.Cleaner(
    tags=ALLOWED_TAGS,
    clean_content_tags={"script", "style"},
    attributes=ALLOWED_ATTRIBUTES,
    url_schemes=URL_SCHEMES,
    link_rel=LINK_REL,
    set_tag_attribute_values={"a": {"target": "_blank"}},
    attribute_filter=_only_absolute_links,
    strip_comments=True,
)


def _highlight(code: str, lang: str, attrs: str) -> str:
    name = (lang or "").strip().lower()
    try:
        lexer = get_lexer_by_name(name) if name else None
    except ClassNotFound:
        lexer = None
    label = _LANGUAGE.sub("", name)[:40]
    language = f' language-{label}' if label else ""
    body = pygments_highlight(code, lexer, _formatter) if lexer is not None else escapeHtml(code)
    return f'<pre class="highlight"><code class="code{language}">{body}</code></pre>\n'


def _image(renderer: Any, tokens: list[Any], idx: int, options: Any, env: Any) -> str:
    token = tokens[idx]
    src = str(token.attrGet("src") or "")
    alt = "".join(child.content for child in token.children or []) or "image"
    parts = urlsplit(src)
    if parts.scheme in ("http", "https") and parts.hostname:
        host = parts.hostname
        return (f'<a class="image-link" href="{escapeHtml(src)}">image: {escapeHtml(alt)} '
                f'({escapeHtml(host)})</a>')
    return f"[image: {escapeHtml(alt)}]"


def _aligned_cell(renderer: Any, tokens: list[Any], idx: int, options: Any, env: Any) -> str:
    # Tables align cells with an inline style, which the CSP refuses: use a class instead.
    token = tokens[idx]
    style = str(token.attrGet("style") or "")
    if style.startswith("text-align:"):
        token.attrs.pop("style", None)
        token.attrSet("class", "align-" + style.split(":", 1)[1].strip())
    return renderer.renderToken(tokens, idx, options, env)


def _parser() -> MarkdownIt:
    md = MarkdownIt("commonmark", {"html": False, "linkify": False, "typographer": False,
                                   "breaks": True, "highlight": _highlight})
    md.enable(["table", "strikethrough"])
    md.add_render_rule("image", _image)
    md.add_render_rule("th_open", _aligned_cell)
    md.add_render_rule("td_open", _aligned_cell)
    return md


_md = _parser()


def sanitize_html(html: str) -> str:
    """``html`` reduced to the allowlist (the last step of ``render_markdown``)."""
    return _cleaner.clean(html)


def _render(text: str) -> str:
    return sanitize_html(_md.render(text))


def render_markdown(text: str) -> SafeString:
    """``text`` (untrusted markdown) as sanitised HTML, cached by its content."""
    text = text or ""
    if not text.strip():
        return mark_safe("")  # noqa: S308 - empty
    if len(text) > CACHE_MAX_CHARS:
        return mark_safe(_render(text))  # noqa: S308 - sanitised by nh3 above
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
    key = f"md:{RENDER_VERSION}:{digest}"
    html = cache.get(key)
    if html is None:
        html = _render(text)
        cache.set(key, html, CACHE_TTL_S)
    return mark_safe(html)  # noqa: S308 - sanitised by nh3 above


def streaming_policy() -> dict[str, Any]:
    """What the chat's streaming renderer (static/js/stream-md.js) may produce: the same tags,
    attributes and link schemes as the sanitiser here, so the streamed answer and the final one
    are laid out alike."""
    return {"tags": sorted(ALLOWED_TAGS),
            "attributes": sorted({a for names in ALLOWED_ATTRIBUTES.values() for a in names}),
            "schemes": sorted(URL_SCHEMES), "rel": LINK_REL}


def highlight_css() -> str:
    """``static/css/pygments.css``: Pygments' 'default' style, and 'github-dark' where the page is
    dark (the system's choice unless the person picked light, or their pick of dark). A test
    checks the shipped file is this."""
    light = HtmlFormatter(style="default").get_style_defs(".md .highlight")
    dark = HtmlFormatter(style="github-dark")

    def rules(prefix: str) -> list[str]:
        # only the token rules: the styles' page background and line numbers are the site's own
        return [line for line in dark.get_style_defs(prefix).splitlines()
                if line.startswith(prefix + " .") and not line.startswith(prefix + " .linenos")]

    light_rules = [line for line in light.splitlines() if line.startswith(".md .highlight .")
                   and not line.startswith(".md .highlight .linenos")]
    return "\n".join([
        "/* Code highlighting for chat messages (Pygments token classes). Generated by",
        "   agents.chat.markdown.highlight_css(): edit that, not this file. */",
        *light_rules,
        '@media (prefers-color-scheme: dark) {',
        *("  " + line for line in rules(':root:not([data-theme="light"]) .md .highlight')),
        "}",
        *rules(':root[data-theme="dark"] .md .highlight'),
        "",
    ])
