"""The API keys page in a real browser: a key made through the form is shown once, copies with
its button (no inline script: the page's CSP is on), and afterwards only its prefix is listed;
revoking asks first. Both states of the page pass an accessibility check."""

from __future__ import annotations

import re
from pathlib import Path

from tests.helpers import wait_for

AXE = Path(__file__).resolve().parent / "vendor" / "axe.min.js"  # axe-core, test-only


def create_key(s, name: str) -> str:
    s.page.goto(s.stack.url + "/team/api-keys/")
    s.page.fill("#id_name", name)
    s.page.check("input[name=scopes][value='costs:read']")
    s.page.click("button:has-text('Create key')")
    s.page.locator("#new-key-secret").wait_for()
    return s.page.input_value("#new-key-secret")


def test_a_key_is_shown_once_copied_and_then_listed_by_its_prefix(login):
    s = login("bob")
    s.page.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=s.stack.url)
    secret = create_key(s, "e2e report")
    assert re.fullmatch(r"ask_[0-9a-f]{8}_[A-Za-z0-9_-]{20,}", secret), secret
    assert "it will not be shown again" in s.page.locator(".new-key").inner_text()
    assert secret in s.page.locator("#snippet-curl").inner_text()
    assert f'base_url="{s.stack.url}/v1"' in s.page.locator("#snippet-python").inner_text()
    s.page.bring_to_front()  # the clipboard answers the focused page only
    s.page.click("button[data-copy='#new-key-secret']")
    wait_for(lambda: s.page.evaluate("() => navigator.clipboard.readText()") == secret, what="the key to be copied")
    prefix = secret[: len("ask_") + 8]
    row = s.page.locator("tr.key-row", has_text="e2e report")
    assert f"{prefix}…" in row.inner_text() and "Active" in row.inner_text()

    s.page.reload()  # the form answered with a redirect: a reload neither resubmits nor shows it
    assert secret not in s.page.content() and not s.watch.dialogs
    row = s.page.locator("tr.key-row", has_text="e2e report")
    assert f"{prefix}…" in row.inner_text() and "costs:read" in row.inner_text()
    # Revoke asks first (the session's dialogs are dismissed: the key stays active)
    row.locator("button:has-text('Revoke')").click()
    wait_for(lambda: s.watch.dialogs, what="the confirmation")
    assert "e2e report" in s.watch.dialogs[-1] and prefix in s.watch.dialogs[-1]
    assert "Active" in s.page.locator("tr.key-row", has_text="e2e report").inner_text()
    assert not s.watch.errors and not s.watch.foreign_requests(s.stack.url)


def test_the_keys_page_has_no_serious_accessibility_violations(login):
    s = login("alice", bypass_csp=True)  # to inject axe-core; the pages are the same
    create_key(s, "a11y check")
    for state in ("show-once", "list"):
        if state == "list":
            s.page.goto(s.stack.url + "/team/api-keys/")
        s.page.add_script_tag(content=AXE.read_text())
        found = s.page.evaluate("""async () => {
            const r = await axe.run(document, {resultTypes: ["violations"]});
            return r.violations.filter(v => ["serious", "critical"].includes(v.impact))
                               .map(v => v.id + ": " + v.nodes.slice(0, 3).map(n => n.target.join(" ")).join(" | "));
        }""")
        assert found == [], (state, found)


def test_the_api_reference_renders_every_operation_under_the_csp(login):
    s = login("alice")
    console: list[str] = []
    s.page.on("console", lambda m: console.append(m.text) if m.type == "error" else None)
    s.page.goto(s.stack.url + "/api/v1/docs")
    s.page.locator(".opblock").first.wait_for()
    operations = s.page.locator(".opblock-summary-path").all_inner_texts()
    assert {"/v1/chat/completions", "/v1/models", "/api/v1/traces/{trace_id}"} <= set(operations)
    assert len(operations) >= 16
    assert not s.page.locator("text=Unable to render this definition").count()
    assert not console and not s.watch.errors and not s.watch.foreign_requests(s.stack.url)


def test_a_key_for_an_application_of_many_end_users_on_a_phone(login):
    """At phone width: the key requires an end user and gives each one a limit of its own; a
    call without an end user is then refused naming the field."""
    import httpx

    s = login("bob", viewport={"width": 390, "height": 844})
    s.page.goto(s.stack.url + "/team/api-keys/")
    s.page.fill("#id_name", "support widget")
    s.page.check("input[name=scopes][value='chat']")
    s.page.check("#id_require_end_user")
    s.page.fill("#id_end_user_rpm_limit", "20")
    assert s.page.evaluate("() => document.documentElement.scrollWidth <= window.innerWidth")
    s.page.click("button:has-text('Create key')")
    s.page.locator("#new-key-secret").wait_for()
    secret = s.page.input_value("#new-key-secret")

    refused = httpx.post(f"{s.stack.url}/v1/chat/completions", timeout=30,
                         headers={"Authorization": f"Bearer {secret}"},
                         json={"model": "helper", "messages": [{"role": "user", "content": "hi"}]})
    assert refused.status_code == 400 and refused.json()["error"]["code"] == "end_user_required"
    assert not s.watch.errors
