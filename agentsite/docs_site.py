"""The documentation site, served by the app at ``/docs/`` (the account menu's "Documentation").

``make docs`` builds ``docs/`` into ``var/site/`` (``site_dir`` in mkdocs.yml, beside the
checkout, whatever ``AGENTSITE_VAR_DIR`` says). When that build is there, ``/docs/<path>`` serves
its files with ``django.views.static.serve``, which never leaves that directory; otherwise every
``/docs/`` address answers a page saying how to build it. The pages are public like the project's
own ``docs/`` folder: nothing in them is a team's.
"""

from __future__ import annotations

from django.conf import settings
from django.core.exceptions import SuspiciousFileOperation
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.utils._os import safe_join
from django.views.decorators.http import require_GET
from django.views.static import serve

SITE_DIR = settings.BASE_DIR / "var" / "site"
# The built pages carry the theme's small inline scripts and styles (colour scheme, search set-up),
# which the site's own policy refuses; they are this project's files, not anyone's input.
POLICY = ("default-src 'self'; script-src 'self' 'unsafe-inline'; style-src 'self' 'unsafe-inline'; "
          "img-src 'self' data:; font-src 'self'; connect-src 'self'; worker-src 'self' blob:; "
          "frame-ancestors 'none'; base-uri 'self'; form-action 'self'; object-src 'none'")


@require_GET
def docs(request: HttpRequest, path: str = "") -> HttpResponse:
    root = SITE_DIR
    if not (root / "index.html").is_file():
        return render(request, "docs_missing.html", status=404)
    try:
        target = safe_join(root, path)
    except SuspiciousFileOperation as exc:
        raise Http404 from exc
    if path and not path.endswith("/") and (root / path).is_dir():
        return HttpResponseRedirect(f"{request.path}/")
    if not path or path.endswith("/") or target == str(root):
        path = f"{path}index.html"
    response = serve(request, path, document_root=root)
    response["Content-Security-Policy"] = POLICY
    return response
