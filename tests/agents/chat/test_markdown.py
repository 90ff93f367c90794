"""Chat messages rendered as sanitised markdown: what model and tool output may and may not do."""

from __future__ import annotations

from html.parser import HTMLParser
from pathlib import Path

import pytest

from agents.chat.markdown import highlight_css, render_markdown, sanitize_html
from agents.runtime.providers.demo import XSS_CORPUS

CORPUS = [
    "<script>alert(1)</script>",
    "<img src=x onerror=alert(1)>",
    "[click](javascript:alert(1))",
    "[click](JaVaScRiPt:alert(1))",
    "[click](java&#x09;script:alert(1))",
    "[click](vbscript:msgbox(1))",
    "[click](data:text/html;base64,PHNjcmlwdD4=)",
    '<a href="javascript:alert(1)">x</a>',
    '<svg onload="alert(1)"><script>alert(1)</script></svg>',
    "![pixel](https://tracker.example/p.gif)",
    '![x" onerror="alert(1)](https://h.example/a.png)',
    '<iframe src="https://evil.example"></iframe>',
    "<style>body{display:none}</style>",
    '<div style="position:fixed">x</div>',
    "<!-- comment --><b onclick=alert(1)>b</b>",
    "```html\n<script>alert(1)</script>\n```",
    '[a](https://ok.example "title\\" onmouseover=\\"alert(1)")',
    "<math><mtext><table><mglyph><style><img src=x onerror=alert(1)>",
    XSS_CORPUS,
]


class _Elements(HTMLParser):
    """The elements of an HTML fragment, as the browser's parser sees them."""

    def __init__(self) -> None:
        super().__init__()
        self.found: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag, attrs):
        self.found.append((tag, dict(attrs)))


def elements(html: str) -> list[tuple[str, dict[str, str | None]]]:
    parser = _Elements()
    parser.feed(html)
    return parser.found


@pytest.mark.parametrize("text", CORPUS)
def test_hostile_markdown_renders_inert(text):
    html = str(render_markdown(text))
    for tag, attrs in elements(html):
        assert tag in {"p", "a", "pre", "code", "span", "br", "strong", "em"}, html
        assert not any(name.startswith("on") or name in ("style", "src") for name in attrs), html
        if "href" in attrs:
            assert attrs["href"].startswith(("https:", "http:", "mailto:")), html


def test_html_the_model_writes_is_shown_as_text():
    html = str(render_markdown("<b>bold?</b> & <i>x</i>"))
    assert html == "<p>&lt;b&gt;bold?&lt;/b&gt; &amp; &lt;i&gt;x&lt;/i&gt;</p>\n"


def test_images_become_links_that_load_nothing():
    html = str(render_markdown("![a cat](https://cats.example/c.png) and ![local](/static/x.png)"))
    assert "<img" not in html
    assert '<a class="image-link" href="https://cats.example/c.png"' in html
    assert "image: a cat (cats.example)" in html
    assert "[image: local]" in html


def test_links_open_safely_and_only_to_web_or_mail_targets():
    html = str(render_markdown("[docs](https://docs.example/a?b=1&c=2) [mail](mailto:a@b.example) [rel](/admin/)"))
    assert 'href="https://docs.example/a?b=1&amp;c=2"' in html
    assert 'rel="nofollow noopener noreferrer"' in html and 'target="_blank"' in html
    assert 'href="mailto:a@b.example"' in html
    assert 'href="/admin/"' not in html and ">rel</a>" in html


def test_code_is_highlighted_with_classes_only():
    html = str(render_markdown("```python\ndef f():\n    return '<x>'\n```"))
    assert '<pre class="highlight"><code class="code language-python">' in html
    assert '<span class="k">def</span>' in html
    assert "&lt;x&gt;" in html and "style=" not in html


def test_unknown_languages_and_odd_fence_labels_are_plain_code():
    html = str(render_markdown('```no-such-lang" onclick="x\nplain <b>\n```'))
    assert "plain &lt;b&gt;" in html and "onclick" not in html
    assert 'class="code language-no-such-lang"' in html


def test_tables_strikethrough_and_line_breaks():
    html = str(render_markdown("| a | b |\n|--:|:-:|\n| 1 | 2 |\n\n~~old~~ new\nline two"))
    assert '<th class="align-right">a</th>' in html and '<td class="align-center">2</td>' in html
    assert "<s>old</s>" in html and "new<br>" in html


def test_the_sanitiser_drops_what_markdown_would_never_produce():
    dirty = '<p onclick="x">hi<script>alert(1)</script><img src=x><a href="javascript:x" class="btn">l</a></p>'
    clean = sanitize_html(dirty)
    assert clean == '<p>hi<a class="btn" target="_blank" rel="nofollow noopener noreferrer">l</a></p>'


def test_rendering_is_cached_by_content(monkeypatch):
    from agents.chat import markdown

    calls = []
    real = markdown._render
    monkeypatch.setattr(markdown, "_render", lambda text: calls.append(text) or real(text))
    first = render_markdown("cache **me** once")
    assert render_markdown("cache **me** once") == first == "<p>cache <strong>me</strong> once</p>\n"
    assert calls == ["cache **me** once"]
    assert render_markdown("") == "" and render_markdown("   ") == ""


def test_the_shipped_highlight_stylesheet_is_the_generated_one():
    shipped = Path(__file__).resolve().parents[3] / "static" / "css" / "pygments.css"
    css = shipped.read_text()
    assert css == highlight_css(), "regenerate static/css/pygments.css from highlight_css()"
    # dark code colours follow the page: the system's dark unless light was picked, or a picked dark
    assert ':root:not([data-theme="light"]) .md .highlight .k {' in css
    assert ':root[data-theme="dark"] .md .highlight .k {' in css
