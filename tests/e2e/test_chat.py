"""The chat in a real browser: streaming, tool cards, the trace one click away, Stop,
approvals, hostile model output, the outbox, small screens and bad input."""

from __future__ import annotations

import re

import pytest

from tests.helpers import wait_for

# Records how the answer being written grows, so a test can tell streaming from a final swap.
STREAM_PROBE = """() => {
  window.__stream = [];
  new MutationObserver(() => {
    const text = document.querySelector("li.answer.pending .stream-text");
    const length = text ? text.textContent.length : 0;
    const seen = window.__stream;
    if (length && length !== seen[seen.length - 1]) { seen.push(length); }
  }).observe(document.getElementById("main"), {subtree: true, childList: true, characterData: true});
}"""


def test_a_member_sees_the_reply_stream_a_tool_card_complete_and_opens_the_trace(login):
    s = login("alice")
    s.open_chat_with("Helper")
    s.page.evaluate(STREAM_PROBE)
    s.send("What time is it in Tokyo?")

    card = s.page.locator("li.answer .tool-card").first
    card.wait_for()
    assert card.locator(".tool-name").inner_text() == "current_time"
    s.page.locator("li.answer .tool-card.state-ok").first.wait_for()
    s.answers("completed").first.wait_for()

    lengths = s.page.evaluate("() => window.__stream")
    assert len(lengths) >= 3 and lengths == sorted(lengths), lengths  # it grew piece by piece
    answer = s.answers("completed").first
    assert "The current time in Asia/Tokyo is" in answer.locator(".md").inner_text()
    done = answer.locator(".tool-card.state-ok")
    assert re.fullmatch(r"\d+ ms|[\d.]+ s", done.locator(".tool-dur").inner_text())
    done.locator("summary").click()  # collapsed by default; opens to show arguments and result
    assert '"timezone": "Asia/Tokyo"' in done.locator(".tool-pre").first.inner_text()
    assert re.search(r"tokens · \$", answer.locator(".turn-usage").inner_text())
    assert int(s.page.locator("#meter").get_attribute("data-tokens")) > 0

    answer.locator("a.trace-link").click()
    s.page.wait_for_url(re.compile(r"/traces/[0-9a-f-]+/$"))
    assert s.page.locator("#steps li.step").count() >= 3
    assert "Completed" in s.page.locator("#trace-header").inner_text()
    assert not s.watch.errors


def test_stop_ends_the_reply_mid_stream_and_the_chat_goes_on(login):
    s = login("alice")
    s.open_chat_with("Slow")
    s.send("Tell me something nice about the sea")
    wait_for(lambda: len(s.streamed()) > 12, what="a few streamed words")
    s.page.locator("li.answer.pending button:has-text('Stop')").click()

    stopped = s.answers("cancelled").first
    stopped.wait_for(timeout=5_000)
    assert "Stopped." in stopped.inner_text() and "Cancelled by alice" in stopped.inner_text()
    assert stopped.locator(".md").inner_text().startswith("You said")  # the words so far are kept
    assert s.page.locator("li.answer.pending").count() == 0

    s.send("/help")
    s.page.locator("li.notice").wait_for()
    assert "/stop — stop the reply" in s.page.locator("li.notice").inner_text()


def test_a_member_approves_one_tool_call_and_denies_another_while_a_viewer_only_watches(login):
    s = login("alice")
    url = s.open_chat_with("Careful")
    s.send("What is 2 + 3?")
    waiting = s.page.locator(".tool-card.state-waiting")
    waiting.wait_for()
    assert re.search(r"\d+ s left", waiting.locator(".countdown").inner_text())
    # conversations are private: alice shares this one so that the viewer may watch it
    s.page.locator("#share-state button:has-text('Share with the team')").click()
    s.page.locator("#share-state .tag-shared").wait_for()

    vera = login("vera")
    vera.page.goto(url)
    vera.page.locator(".tool-card.state-waiting").wait_for()
    assert not vera.page.locator(".tool-card button:has-text('Approve')").is_visible()
    assert vera.page.locator("#composer").count() == 0
    assert vera.page.get_by_text("The conversation's owner or a team admin decides.").is_visible()

    waiting.locator("button:has-text('Approve')").click()
    s.answers("completed").first.wait_for()
    first = s.answers("completed").first
    assert "2 + 3 = 5." in first.inner_text()
    approved = first.locator(".tool-card.state-ok")
    approved.locator("summary").click()
    assert "Approved by alice." in approved.inner_text()
    vera.answers("completed").first.wait_for()  # the viewer saw it live

    s.send("What is 4 * 5?")
    s.page.locator(".tool-card.state-waiting").wait_for()
    s.page.locator(".tool-card.state-waiting button:has-text('Deny')").click()
    s.answers("completed").nth(1).wait_for()
    denied = s.answers("completed").nth(1)
    assert "I did not run calculator: Declined by the conversation's owner" in denied.locator(".md").inner_text()
    card = denied.locator(".tool-card.state-denied")
    assert card.locator(".tool-state").inner_text() == "Denied"
    card.locator("summary").click()
    assert "Denied by alice." in card.inner_text()


@pytest.mark.parametrize("bypass_csp", [False, True], ids=["with-csp", "sanitiser-alone"])
def test_hostile_model_and_tool_output_runs_nothing_and_loads_nothing(login, bypass_csp):
    s = login("alice", bypass_csp=bypass_csp)
    s.open_chat_with("Corpus")
    s.send("xss corpus please")
    answer = s.answers("completed").first
    answer.wait_for()

    def inert() -> None:
        text = s.page.locator("#messages").inner_text()
        assert "<script>window.__pwned = 'script tag'</script>" in text  # shown, as text
        assert "<img src=x onerror=" in text and "<svg onload=" in text
        assert s.page.evaluate("() => window.__pwned") is None
        assert s.page.locator("#messages img, #messages svg:not(.icon-thumb), #messages .bubble svg, #messages iframe, #messages script, #messages style").count() == 0
        hrefs = s.page.eval_on_selector_all("#messages a[href]", "links => links.map(a => a.getAttribute('href'))")
        assert all(h.startswith(("http://127.0.0.1", "https://", "http://remote.invalid/", "/")) for h in hrefs), hrefs
        assert not any(h.lower().startswith(("javascript:", "data:")) for h in hrefs)
        links = s.page.locator("#messages a.image-link").all_inner_texts()
        assert links and set(links) == {"image: remote pixel (remote.invalid)"}
        card = s.page.locator("#messages .tool-card").first
        card.locator("summary").click()
        assert "window.__pwned" in card.locator(".tool-pre").first.inner_text()
        assert s.page.locator("body").is_visible()  # the <style> did not hide the page
        assert not s.watch.dialogs, s.watch.dialogs
        assert not s.watch.foreign_requests(s.stack.url), s.watch.foreign_requests(s.stack.url)

    inert()  # as it arrived live
    s.page.reload()
    s.page.locator("li.answer[data-status='completed']").first.wait_for()
    inert()  # as the server renders it


def test_a_message_typed_while_the_socket_is_down_is_kept_and_sent_on_reconnect(login, stack):
    s = login("alice")
    s.open_chat_with("Helper")
    stack.stop_web()
    try:
        wait_for(lambda: s.page.evaluate("() => window.__socketOpen === false"), what="the socket to drop")
        s.send("hello after the outage")
        note = s.page.locator("#outbox li")
        note.wait_for()
        assert "will send when back online" in note.inner_text()
        stored = s.page.evaluate("() => JSON.stringify(localStorage)")
        assert "hello after the outage" in stored
    finally:
        stack.start_web()
    s.wait_for_socket(timeout=30)
    s.answers("completed").first.wait_for(timeout=20_000)
    assert s.page.locator("#outbox li").count() == 0
    assert s.page.locator("li.role-user .bubble").all_inner_texts() == ["hello after the outage"]
    assert "hello after the outage" not in s.page.evaluate("() => JSON.stringify(localStorage)")


def test_enter_sends_shift_enter_breaks_the_line_and_bad_input_is_refused(login):
    s = login("alice")
    s.open_chat_with("Helper")
    box = s.page.locator("#composer-text")
    box.press("Enter")
    assert s.page.locator("#composer-error").inner_text() == "Write a message before sending it."
    box.fill("x" * 32_001)
    box.press("Enter")
    assert "the limit is 32,000" in s.page.locator("#composer-error").inner_text()
    assert s.page.locator("li.role-user").count() == 0

    box.fill("")
    box.type("line one")
    box.press("Shift+Enter")
    box.type("line two")
    box.press("Enter")
    # the conversation's copy (the outbox shows its own until the server has it)
    sent = s.page.locator("#messages li.role-user .bubble")
    sent.wait_for()
    assert sent.inner_text() == "line one\nline two"
    assert box.input_value() == "" and box.evaluate("el => el === document.activeElement")
    s.answers("completed").first.wait_for()


def test_the_chat_fits_a_phone(login):
    s = login("alice", viewport={"width": 390, "height": 844})
    s.open_chat_with("Helper")
    s.send("What time is it?")
    s.answers("completed").first.wait_for()
    assert s.page.evaluate("() => document.documentElement.scrollWidth") <= 390
    assert s.page.locator("#composer button[type=submit]").is_visible()
    box = s.page.locator("#composer").bounding_box()
    assert box["x"] >= 0 and box["x"] + box["width"] <= 390
