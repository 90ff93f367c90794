"""The documentation from the app: the account menu links to ``/docs/``, which serves the site
``make docs`` built (``var/site/``) and nothing outside it, or, before it is built, a page that
says how to build it."""

from __future__ import annotations

import pytest
from django.test import Client

from agentsite import docs_site

pytestmark = pytest.mark.django_db


@pytest.fixture
def built(tmp_path, monkeypatch):
    """A built site, as MkDocs lays it out: a folder per page with its index.html."""
    site = tmp_path / "site"
    (site / "api").mkdir(parents=True)
    (site / "assets").mkdir()
    (site / "index.html").write_text("<h1>agentsite docs</h1>")
    (site / "api" / "index.html").write_text("<h1>The API</h1>")
    (site / "assets" / "site.css").write_text("body { color: black }")
    (tmp_path / "secret.txt").write_text("not for the web")
    monkeypatch.setattr(docs_site, "SITE_DIR", site)
    return site


@pytest.fixture
def unbuilt(tmp_path, monkeypatch):
    monkeypatch.setattr(docs_site, "SITE_DIR", tmp_path / "site")


def test_the_account_menu_links_to_the_documentation(alice, client_for):
    page = client_for(alice).get("/").content.decode()

    assert '<a role="menuitem" href="/docs/">Documentation</a>' in page


def test_the_built_site_is_served_page_by_page(built):
    client = Client()

    home = client.get("/docs/")
    assert home.status_code == 200 and b"".join(home.streaming_content) == b"<h1>agentsite docs</h1>"
    assert home["Content-Type"].startswith("text/html")
    assert "script-src 'self' 'unsafe-inline'" in home["Content-Security-Policy"]
    assert b"".join(client.get("/docs/api/").streaming_content) == b"<h1>The API</h1>"
    assert client.get("/docs/assets/site.css")["Content-Type"].startswith("text/css")
    assert client.get("/docs/api").headers["Location"] == "/docs/api/"


def test_nothing_outside_the_built_site_is_served(built):
    client = Client()

    assert client.get("/docs/nothing-here/").status_code == 404
    assert client.get("/docs/../secret.txt").status_code == 404
    assert client.get("/docs/%2e%2e/secret.txt").status_code == 404
    assert client.get("/docs/..%2fsecret.txt").status_code == 404


def test_before_make_docs_the_link_says_how_to_build_it(unbuilt, alice, client_for):
    for client in (Client(), client_for(alice)):
        for address in ("/docs/", "/docs/api/"):
            response = client.get(address)
            assert response.status_code == 404
            assert b"make docs" in response.content and b"var/site/" in response.content
