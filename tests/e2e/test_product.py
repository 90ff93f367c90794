"""The product around the chat, in a real browser: the home page that starts work, the
conversation sidebar and its phone drawer, the "/" palette, Escape to stop, reloading
mid-answer, ratings, the theme, the inspector's tree and approvals, other teams' 404s, and an
accessibility pass on the main pages."""

from __future__ import annotations

import re
import uuid
from pathlib import Path

import pytest
from playwright.sync_api import TimeoutError as PlaywrightTimeout

from tests.helpers import wait_for

AXE = Path(__file__).resolve().parent / "vendor" / "axe.min.js"  # axe-core, test-only


def test_the_home_page_starts_a_conversation_with_its_first_message(login):
    s = login("alice")
    s.page.goto(s.stack.url + "/")
    assert s.page.locator(".home-agents").get_by_text("Helper", exact=True).is_visible()
    s.page.select_option("#home-agent", s.stack.ids["agents"]["Helper"])
    s.page.fill("#home-text", "What time is it in Tokyo?")
    s.page.press("#home-text", "Enter")
    s.page.wait_for_url(re.compile(r"/chat/[0-9a-f-]+/"))
    s.answers("completed").first.wait_for()
    assert "The current time in Asia/Tokyo is" in s.answers("completed").first.inner_text()
    s.page.goto(s.stack.url + "/")
    assert "What time is it in Tokyo?" in s.page.locator(".home-recent").inner_text()
    assert "Completed" in s.page.locator(".home-traces").inner_text()
    assert not s.watch.errors


# The page's socket connects only when the test releases it: what a slow network or a busy
# server does between a page's render and its subscription.
LATE_SOCKET = """(() => {
  const Real = window.WebSocket;
  const waiting = [];
  window.__releaseSocket = () => { while (waiting.length) { waiting.shift()(); } };
  window.WebSocket = function (url, protocols) {
    const shim = {CONNECTING: 0, OPEN: 1, CLOSING: 2, CLOSED: 3, readyState: 0, binaryType: "blob",
                  listeners: [], real: null, closed: false,
                  addEventListener(type, fn) { this.listeners.push([type, fn]); if (this.real) { this.real.addEventListener(type, fn); } },
                  send(data) { this.real.send(data); },
                  close(code, reason) { this.closed = true; if (this.real) { this.real.close(code, reason); } }};
    waiting.push(() => {
      if (shim.closed) { return; }
      const real = new Real(url, protocols);
      shim.real = real;
      real.binaryType = shim.binaryType;
      shim.listeners.forEach(([type, fn]) => real.addEventListener(type, fn));
      real.onopen = (e) => { shim.readyState = 1; if (shim.onopen) { shim.onopen(e); } };
      real.onclose = (e) => { shim.readyState = 3; if (shim.onclose) { shim.onclose(e); } };
      real.onerror = (e) => { if (shim.onerror) { shim.onerror(e); } };
    });
    return shim;
  };
})();"""


def sent_from_home_with_a_late_socket(login, agent: str, text: str):
    """alice's first message to ``agent``, sent from the home page, on the conversation page
    it leads to, whose socket waits for ``window.__releaseSocket()``."""
    s = login("alice")
    s.page.add_init_script(LATE_SOCKET)
    s.page.goto(s.stack.url + "/")
    s.page.select_option("#home-agent", s.stack.ids["agents"][agent])
    s.page.fill("#home-text", text)
    s.page.press("#home-text", "Enter")
    s.page.wait_for_url(re.compile(r"/chat/[0-9a-f-]+/"))
    return s


def server_page(s) -> str:
    """The page as the server would render it now (what the page itself has not been told)."""
    return s.page.evaluate("() => fetch(location.href, {credentials: 'same-origin'}).then(r => r.text())")


def test_an_answer_that_ended_before_the_page_subscribed_still_appears(login):
    # Sent from the home page, the turn is still running when its conversation page renders,
    # and ends before the page's socket connects: the end was announced to nobody, so the
    # page asks the database on its first connection.
    s = sent_from_home_with_a_late_socket(login, "Slow", "What is 3*9?")
    assert s.page.locator("li.answer.pending").count() == 1  # rendered while it ran
    wait_for(lambda: 'data-status="completed"' in server_page(s), timeout=30,
             what="the turn to end on the server")
    assert s.page.locator("li.answer.pending").count() == 1  # nothing told the page yet
    s.page.evaluate("() => window.__releaseSocket()")
    s.wait_for_socket()
    s.answers("completed").first.wait_for(timeout=10_000)
    assert s.page.locator("li.answer.pending").count() == 0
    assert not s.watch.errors


def test_an_approval_asked_before_the_page_subscribed_still_shows_its_card(login):
    # The same, with a turn that reaches a tool call needing a person's approval before the
    # page's socket connects: the card shows, and approving it finishes the turn.
    s = sent_from_home_with_a_late_socket(login, "Careful", "What is 2 + 3?")
    wait_for(lambda: "state-waiting" in server_page(s), timeout=30,
             what="the call to wait for an approval on the server")
    s.page.evaluate("() => window.__releaseSocket()")
    s.wait_for_socket()
    waiting = s.page.locator(".tool-card.state-waiting")
    waiting.wait_for(timeout=10_000)
    waiting.locator("button:has-text('Approve')").click()
    s.answers("completed").first.wait_for()
    assert "2 + 3 = 5." in s.answers("completed").first.inner_text()
    assert not s.watch.errors


@pytest.mark.parametrize("agent", ["Corpus", "Careful"])
def test_twenty_turns_sent_from_the_home_page_over_a_slow_network_all_show_their_answer(login, agent):
    # 150 ms added to every request (Chromium's network conditions): the page renders, the turn
    # runs and ends (or, for "Careful", stops at its calculator's approval card), the socket
    # connects, in whatever order the network makes; none may stick.
    s = login("alice")
    cdp = s.page.context.new_cdp_session(s.page)
    cdp.send("Network.enable")
    cdp.send("Network.emulateNetworkConditions", {"offline": False, "latency": 150,
                                                  "downloadThroughput": -1, "uploadThroughput": -1})
    stuck = []
    for n in range(20):
        s.page.goto(s.stack.url + "/")
        s.page.select_option("#home-agent", s.stack.ids["agents"][agent])
        s.page.fill("#home-text", f"What is {n} + 3?")
        s.page.press("#home-text", "Enter")
        s.page.wait_for_url(re.compile(r"/chat/[0-9a-f-]+/"))
        try:
            if agent == "Careful":
                waiting = s.page.locator(".tool-card.state-waiting")
                waiting.wait_for(timeout=15_000)
                waiting.locator("button:has-text('Approve')").click()
            s.answers("completed").first.wait_for(timeout=15_000)
        except PlaywrightTimeout:  # counted; the run goes on to say how many
            stuck.append(n)
    assert stuck == [], f"{len(stuck)} of 20 answers (or approval cards) never appeared: {stuck}"
    assert not s.watch.errors


def test_the_members_page_shows_an_invitation_made_before_it_subscribed(login):
    # The team page's lists are read again when its socket opens: an invitation created in
    # another tab between the render and the subscription still shows.
    s = login("alice")
    s.page.add_init_script(LATE_SOCKET)
    s.page.goto(s.stack.url + "/team/members/")
    before = s.page.locator("#invitation-list li.row").count()
    other = login("alice")
    other.page.goto(other.stack.url + "/team/members/")
    other.page.locator("form[action$='/team/invitations/'] button[type=submit]").click()
    other.page.wait_for_load_state()
    assert s.page.locator("#invitation-list li.row").count() == before  # nothing told it yet
    s.page.evaluate("() => window.__releaseSocket()")
    wait_for(lambda: s.page.locator("#invitation-list li.row").count() == before + 1,
             what="the new invitation on the page")
    assert not s.watch.errors


def started_from_home(s, text: str, agent: str = "Helper") -> None:
    s.page.goto(s.stack.url + "/")
    s.page.select_option("#home-agent", s.stack.ids["agents"][agent])
    s.page.fill("#home-text", text)
    s.page.press("#home-text", "Enter")
    s.page.wait_for_url(re.compile(r"/chat/[0-9a-f-]+/"))
    s.answers("completed").first.wait_for()


def test_the_home_page_and_the_sidebar_show_what_another_tab_started_without_a_reload(login):
    # The person's lists are read again when the page's socket opens (here held back until a
    # conversation was started in another tab) and whenever a turn of theirs starts or ends.
    s = login("alice")
    s.page.add_init_script(LATE_SOCKET)
    s.page.goto(s.stack.url + "/")
    other = login("alice")
    started_from_home(other, "What is 4 + 4? (tab two)")
    assert "tab two" not in s.page.locator(".home-recent").inner_text()  # nothing told it yet
    s.page.evaluate("() => window.__releaseSocket()")
    wait_for(lambda: "tab two" in s.page.locator(".home-recent").inner_text(),
             what="the conversation started before the socket opened, on the home page")
    started_from_home(other, "What is 5 + 5? (tab three)")
    wait_for(lambda: "tab three" in s.page.locator(".home-recent").inner_text()
             and "tab three" in s.page.locator(".home-traces").inner_text(),
             what="a conversation started while the home page was open")

    s.page.locator(".home-recent a", has_text="tab two").click()  # the conversation page
    s.page.wait_for_url(re.compile(r"/chat/[0-9a-f-]+/"))
    s.page.evaluate("() => window.__releaseSocket()")
    s.wait_for_socket()
    started_from_home(other, "What is 6 + 6? (tab four)")
    sidebar = s.page.locator("#sidebar-list")
    wait_for(lambda: "tab four" in sidebar.inner_text(), what="the new conversation in the sidebar")
    assert sidebar.locator("a[aria-current=page]").inner_text().endswith("(tab two)")
    assert not s.watch.errors and not other.watch.errors


def test_a_budget_crossed_by_a_turn_shows_its_banner_without_a_reload(login):
    # bob's daily budget is $0.01; one answer of the steeply priced "Metered" crosses it: the
    # banner comes with the answer, with amounts written as the meter writes them.
    s = login("bob")
    s.open_chat_with("Metered")
    banner = s.page.locator("#budget-banner .budget-banner")
    assert banner.count() == 0
    s.send("Tell me about budgets, please")
    s.answers("completed").first.wait_for()
    banner.wait_for(timeout=10_000)
    text = banner.inner_text()
    assert "Your daily budget is used up" in text and "of $0.01" in text, text
    assert re.search(r"\$\d+\.\d{2,4} of", text) and not re.search(r"\d\.\d{5,}", text), text
    assert banner.get_by_role("link", name="See costs").is_visible()
    assert not s.watch.errors


def test_a_step_open_in_the_inspector_stays_open_while_its_turn_goes_on(login):
    # The reader opened the model request while it was still writing; its end is patched into
    # the row (status, duration, tokens) and the open panel is read again in place: not
    # replaced, not closed.
    s = login("alice")
    s.open_chat_with("Slow")
    s.send("Say hello to the lighthouse keeper")
    pending = s.page.locator("li.answer.pending")
    pending.wait_for()
    trace = uuid.UUID(pending.get_attribute("data-trace"))
    s.page.goto(f"{s.stack.url}/traces/{trace}/")
    step = s.page.locator("#steps > li.k-llm_request").first
    step.wait_for()
    assert "s-running" in step.get_attribute("class")
    body = s.open_step(step)
    body.evaluate("b => { b.__kept = true; }")
    wait_for(lambda: "s-ok" in (step.get_attribute("class") or ""), timeout=120,
             what="the model request to end, on the open row")
    assert step.locator(":scope > details").evaluate("d => d.open")
    assert body.evaluate("b => b.__kept === true")  # the same panel, not a new one
    assert "running" not in step.locator(".step-dur").inner_text()
    wait_for(lambda: "Output" in body.inner_text() or "Tokens" in body.inner_text(),
             what="the panel read again with the finished request")
    assert not s.watch.errors


# The socket stays open but loses frames (what a hung Redis does to announcements): the first
# frame saying a turn ended never reaches the page.
LOSE_THE_END = """(() => {
  const add = WebSocket.prototype.addEventListener;
  window.__lost = 0;
  WebSocket.prototype.addEventListener = function (type, fn, options) {
    if (type !== "message") { return add.call(this, type, fn, options); }
    return add.call(this, type, function (event) {
      const data = typeof event.data === "string" ? event.data : "";
      if (!window.__lost && data.indexOf('"event": "trace"') >= 0 && data.indexOf('"status": "completed"') >= 0) {
        window.__lost += 1;
        return;
      }
      return fn.call(this, event);
    }, options);
  };
})();"""


def test_an_answer_whose_last_frame_was_lost_still_appears(login):
    # Nothing follows the lost frame to reveal the gap: a pending answer that hears nothing for
    # a while reads the branch again.
    s = login("alice")
    s.page.add_init_script(LOSE_THE_END)
    s.open_chat_with("Helper")
    s.send("What time is it in Tokyo?")
    s.answers("completed").first.wait_for(timeout=45_000)
    assert s.page.evaluate("() => window.__lost") == 1
    assert s.page.locator("li.answer.pending").count() == 0
    assert not s.watch.errors


# The first step frame the page needs: one newer than the event number its answer was rendered
# at. A quick turn's step can be announced before the send's answer is rendered and arrive after
# it: losing that one loses nothing (the answer already shows it), and no gap follows.
LOSE_A_STEP = LOSE_THE_END.replace(
    """data.indexOf('"event": "trace"') >= 0 && data.indexOf('"status": "completed"') >= 0""",
    """data.indexOf('"event": "step"') >= 0 && (function (p) {
        var answer = document.getElementById("answer-" + p.trace);
        return !!answer && p.seq > parseInt(answer.getAttribute("data-event-seq") || "0", 10);
      })(JSON.parse(data))""")
assert LOSE_A_STEP != LOSE_THE_END


def test_a_frame_lost_mid_turn_is_noticed_by_the_next_one(login):
    s = login("alice")
    s.page.add_init_script(LOSE_A_STEP)
    s.open_chat_with("Helper")
    rereads = []
    s.page.on("request", lambda r: rereads.append(r.url) if "part=messages" in r.url else None)
    s.send("What time is it in Tokyo?")
    s.answers("completed").first.wait_for()
    assert s.page.evaluate("() => window.__lost") == 1
    # by the next frame's number, at once (not the quiet page's check, 20 s on)
    wait_for(lambda: len(rereads) >= 1, timeout=5, what="the branch read again after the gap")
    assert not s.watch.errors


def test_a_re_read_older_than_the_frames_never_puts_back_what_they_replaced(login):
    # The page's first re-read (a turn was waiting when it rendered) is answered with the branch
    # as it was; before that answer lands, the reader approves and the socket brings the end of
    # the turn. The late answer must not put the waiting card back.
    s = login("alice")
    s.open_chat_with("Careful")
    s.send("What is 2 + 3?")
    s.page.locator(".tool-card.state-waiting").wait_for()
    held = []

    def hold(route):
        held.append((route, route.fetch()))  # the branch as it is now: still waiting

    s.page.route(re.compile(r"part=messages"), hold)
    s.page.reload()
    s.wait_for_socket()
    for _ in range(100):  # route handlers run while Playwright has the thread
        if held:
            break
        s.page.wait_for_timeout(100)
    assert held, "the page did not re-read the branch"
    s.page.locator(".tool-card.state-waiting button:has-text('Approve')").click()
    s.answers("completed").first.wait_for()
    route, stale = held[0]
    route.fulfill(response=stale)
    s.page.wait_for_timeout(1000)
    assert s.answers("completed").count() == 1 and s.page.locator(".tool-card.state-waiting").count() == 0
    assert "2 + 3 = 5." in s.answers("completed").first.inner_text()
    s.page.unroute(re.compile(r"part=messages"))
    assert not s.watch.errors


def test_a_turn_whose_frames_all_arrive_reads_nothing_again(login):
    # Gap detection has no false alarms: every event number of a turn with a tool call reaches
    # the page in order, so the branch is not read again.
    s = login("alice")
    s.open_chat_with("Helper")
    rereads = []
    s.page.on("request", lambda r: rereads.append(r.url) if "part=messages" in r.url else None)
    s.send("What time is it in Tokyo?")
    s.answers("completed").first.wait_for()
    s.page.wait_for_timeout(1000)
    assert rereads == []
    assert not s.watch.errors


def test_a_conversation_page_shows_a_turn_sent_from_another_tab_before_it_subscribed(login):
    # Rendered with nothing in flight; another tab sends into the same conversation and its
    # turn ends before this page's socket connects: the first open still asks what happened.
    s = login("alice")
    s.page.add_init_script(LATE_SOCKET)
    other = login("alice")
    url = other.open_chat_with("Helper")
    s.page.goto(url)
    assert s.page.locator("li.answer").count() == 0
    other.send("What time is it? (from the other tab)")
    other.answers("completed").first.wait_for()
    s.page.evaluate("() => window.__releaseSocket()")
    s.answers("completed").first.wait_for(timeout=10_000)
    assert "(from the other tab)" in s.page.locator("#messages").inner_text()
    assert not s.watch.errors and not other.watch.errors


def test_reloading_mid_answer_keeps_the_text_so_far_and_goes_on(login):
    s = login("alice")
    s.open_chat_with("Slow")
    s.send("Tell me something nice about the sea, at length please")
    wait_for(lambda: len(s.streamed()) > 60, timeout=20, what="a good part of the answer")
    before = s.streamed()
    s.page.reload()
    assert len(s.streamed()) >= len(before)  # it never shrinks (the worker saves it only now and then)
    s.wait_for_socket()
    # the page comes back with the text so far (saved by the worker every couple of seconds)
    # and the live frames continue it without a gap or a repeat
    wait_for(lambda: len(s.streamed()) > len(before) + 10, timeout=15, what="the answer to go on")
    after = s.streamed()
    assert after.startswith(before[:40]), (before, after)
    s.page.locator("li.answer.pending button:has-text('Stop')").click()
    final = s.answers("cancelled").first
    final.wait_for()
    assert final.locator(".md").inner_text().startswith(after[:40])


def test_escape_stops_and_the_palette_runs_a_command(login):
    s = login("alice")
    s.open_chat_with("Slow")
    s.send("Tell me a long story")
    wait_for(lambda: len(s.streamed()) > 8, what="a few words")
    s.page.locator("body").press("Escape")
    s.answers("cancelled").first.wait_for(timeout=5_000)
    s.page.fill("#composer-text", "/he")
    s.page.dispatch_event("#composer-text", "input")
    palette = s.page.locator("#command-palette")
    palette.wait_for()
    assert palette.locator("[role=option]:visible").count() == 1
    s.page.press("#composer-text", "Enter")
    s.page.locator("li.notice").wait_for()
    assert "/stop — stop the reply" in s.page.locator("li.notice").inner_text()


def test_a_starter_the_sidebar_ratings_and_the_theme(login):
    s = login("alice")
    url = s.open_chat_with("Helper")
    s.send("What time is it?")
    s.answers("completed").first.wait_for()
    sidebar = s.page.locator("#chat-sidebar")
    assert sidebar.is_visible() and sidebar.locator("a[aria-current=page]").inner_text() == "What time is it?"
    s.page.fill("#sidebar-search", "nothing like this")
    wait_for(lambda: "No conversation matches" in sidebar.inner_text(), what="the search to narrow the list")
    answer = s.answers("completed").first
    answer.locator("button[aria-label='Bad answer']").click()
    wait_for(lambda: answer.locator("button[aria-label='Bad answer']").get_attribute("aria-pressed") == "true",
             what="the rating to stick")
    answer.locator(".feedback-comment textarea").fill("It should say the timezone")
    answer.locator(".feedback-comment button:has-text('Save comment')").click()
    wait_for(lambda: "Your comment" in answer.inner_text(), what="the comment to be saved")
    answer.locator("a.trace-link").click()
    s.page.wait_for_url(re.compile(r"/traces/"))
    assert "It should say the timezone" in s.page.locator(".ratings").inner_text()
    s.page.locator("summary.menu-button").click()
    s.page.click("[data-theme-choice=dark]")
    assert s.page.evaluate("() => document.documentElement.dataset.theme") == "dark"
    s.page.goto(url)
    assert s.page.evaluate("() => document.documentElement.dataset.theme") == "dark"  # kept
    background = s.page.evaluate("() => getComputedStyle(document.body).backgroundColor")
    assert background == "rgb(17, 19, 23)", background
    assert not s.watch.errors


def test_on_a_phone_the_sidebar_is_a_drawer_and_the_traces_keep_status_and_cost(login):
    s = login("alice", viewport={"width": 390, "height": 844})
    s.open_chat_with("Helper")
    sidebar = s.page.locator("#chat-sidebar")
    assert not sidebar.is_visible()
    s.page.click("button.sidebar-open")
    wait_for(sidebar.is_visible, what="the drawer to open")
    # the page under the drawer keeps its layout (the body is not restyled)
    assert s.page.evaluate("() => getComputedStyle(document.body).display") == "block"
    s.page.keyboard.press("Escape")
    wait_for(lambda: not sidebar.is_visible(), what="the drawer to close")
    s.send("What time is it?")
    s.answers("completed").first.wait_for()
    s.page.goto(s.stack.url + "/traces/")
    row = s.page.locator("table.list tbody tr").first
    assert row.locator(".pill").is_visible() and row.locator("td.num").last.is_visible()
    assert s.page.evaluate("() => document.documentElement.scrollWidth") <= 390


def test_an_approval_is_given_from_the_inspectors_tree_page(login):
    s = login("alice")
    s.open_chat_with("Careful")
    s.send("What is 6 * 7?")
    s.page.locator(".tool-card.state-waiting").wait_for()
    trace = s.page.locator("li.answer.pending a.trace-link").get_attribute("href")
    s.page.goto(s.stack.url + trace)
    s.page.locator(".tree .k-approval").wait_for()
    s.page.locator(".step-approval button:has-text('Approve')").click()
    s.page.locator("#trace-header[data-status=completed]").wait_for()
    assert "6 × 7 = 42" in s.page.locator(".final-answer").inner_text()
    wait_for(lambda: s.page.locator(".tree .k-tool_call").count() == 1, what="the tree to refresh")


def test_another_teams_pages_are_404(login):
    s = login("alice")
    s.open_chat_with("Helper")
    s.send("What time is it?")
    s.answers("completed").first.wait_for()
    conversation = s.page.url
    trace = s.stack.url + s.answers("completed").first.locator("a.trace-link").get_attribute("href")
    charlie = login("charlie")
    for url in (conversation, trace, trace + "tree/"):
        assert charlie.page.goto(url).status == 404, url


@pytest.mark.parametrize("path", ["/", "/chat/", "/traces/", "/costs/", "/memory/", "conversation", "inspector"])
def test_the_main_pages_have_no_serious_accessibility_violations(login, path):
    s = login("alice", bypass_csp=True)  # to inject axe-core; the pages are the same
    if path in ("conversation", "inspector"):
        s.open_chat_with("Helper")
        s.send("What time is it?")
        s.answers("completed").first.wait_for()
        if path == "inspector":
            s.page.goto(s.stack.url + s.answers("completed").first.locator("a.trace-link").get_attribute("href"))
            s.page.locator(".tree-row").first.wait_for()
    else:
        s.page.goto(s.stack.url + path)
    s.page.add_script_tag(content=AXE.read_text())
    found = s.page.evaluate("""async () => {
        const r = await axe.run(document, {resultTypes: ["violations"]});
        return r.violations.filter(v => ["serious", "critical"].includes(v.impact))
                           .map(v => v.id + ": " + v.nodes.slice(0, 3).map(n => n.target.join(" ")).join(" | "));
    }""")
    assert found == [], found


def test_markdown_is_laid_out_while_it_streams(login):
    s = login("alice")
    s.open_chat_with("Helper")
    s.send("Tell me a story about a dragon")
    heading = s.page.locator("li.answer.pending .stream-text h2")
    heading.wait_for(timeout=15_000)  # a heading while the answer is still being written
    assert heading.inner_text() == "The lighthouse keeper's log"
    assert "## " not in "".join(s.page.locator("li.answer.pending .stream-text").all_inner_texts())
    s.page.locator("li.answer.pending button:has-text('Stop')").click()
    s.answers("cancelled").first.wait_for()
    assert s.answers("cancelled").first.locator(".md h2").inner_text() == "The lighthouse keeper's log"
    assert not s.watch.errors


# a 1×1 PNG
TINY_PNG = bytes.fromhex("89504e470d0a1a0a0000000d4948445200000001000000010806000000"
                         "1f15c4890000000d49444154789c6360000002000154a24f5d0000000049454e44ae426082")


def test_an_image_is_attached_shown_and_sent(login):
    s = login("alice")
    s.open_chat_with("Helper")
    s.page.set_input_files("#attach-input", files=[{"name": "dot.png", "mimeType": "image/png", "buffer": TINY_PNG}])
    s.page.locator("#attachment-tray img").wait_for()
    s.send("What is in this picture?")
    s.answers("completed").first.wait_for()
    assert s.answers("completed").first.locator(".md").inner_text().startswith("I received 1 image (image/png).")
    thumb = s.page.locator("#messages li.role-user .bubble img")
    assert thumb.count() == 1 and s.page.evaluate("(img) => img.naturalWidth", thumb.element_handle()) == 1
    assert s.page.locator("#attachment-tray li").count() == 0
    s.page.set_input_files("#attach-input", files=[{"name": "x.png", "mimeType": "image/png", "buffer": b"not an image"}])
    wait_for(lambda: "Attach a PNG, JPEG, GIF or WebP image." in s.page.locator("#composer-error").inner_text(),
             what="the refusal")
    assert not s.watch.errors


@pytest.mark.parametrize("viewport", [{"width": 1400, "height": 900}, {"width": 390, "height": 844}])
def test_the_traces_filters_the_costs_page_and_the_admin_at_desktop_and_phone_width(login, viewport):
    s = login("alice", viewport=viewport)
    s.open_chat_with("Helper")
    s.send("What time is it?")
    s.answers("completed").first.wait_for()
    s.page.goto(s.stack.url + "/traces/")
    s.page.select_option("#f-status", "cancelled")
    wait_for(lambda: "What time is it?" not in s.page.locator("#results").inner_text(), what="the filter to apply")
    s.page.select_option("#f-status", "completed")
    wait_for(lambda: "What time is it?" in s.page.locator("#results").inner_text(), what="the filter to apply")
    assert "status=completed" in s.page.url
    s.page.goto(s.stack.url + "/costs/")
    assert s.page.locator("#cost-total").is_visible()
    width = viewport["width"]
    for path in ("/traces/", "/costs/", "/"):
        s.page.goto(s.stack.url + path)
        assert s.page.evaluate("() => document.documentElement.scrollWidth") <= width, path
    s.page.goto(s.stack.url + "/admin/agents/routingrule/add/")
    assert s.page.locator("#id_route_provider").is_visible() and s.page.locator("#id_route_model").is_visible()
    s.page.goto(s.stack.url + "/admin/agentsite/auditevent/")
    assert s.page.locator("#result_list, .paginator").first.is_visible()
    viewer = login("vera", viewport=viewport)
    response = viewer.page.goto(viewer.stack.url + "/admin/")
    assert response.status == 403 and "your role does not include it" in viewer.page.inner_text("main")
    assert viewer.page.locator("input[name=password]").count() == 0


# Every visible button's label on one line (no "Cha/t"), and nothing wider than the window.
LAYOUT_PROBE = """() => {
  const broken = [];
  for (const el of document.querySelectorAll('.btn, button')) {
    const box = el.getBoundingClientRect();
    if (!box.width || !el.innerText.trim() || el.closest('[hidden], .visually-hidden')) { continue; }
    const range = document.createRange();
    range.selectNodeContents(el);
    const tops = new Set(Array.from(range.getClientRects()).filter(r => r.width > 0).map(r => Math.round(r.bottom)));
    if (tops.size > 1) { broken.push(el.innerText.trim()); }
  }
  return {width: document.documentElement.scrollWidth, broken: broken};
}"""


@pytest.mark.parametrize("width", [390, 1400])
def test_the_main_pages_fit_the_window_and_no_button_label_breaks(login, width):
    s = login("alice", viewport={"width": width, "height": 844})
    s.open_chat_with("Helper")
    s.send("What time is it?")
    s.answers("completed").first.wait_for()
    trace = s.answers("completed").first.locator("a.trace-link").get_attribute("href")
    for path in ("/", "/chat/", "/traces/", trace, "/costs/", "/team/api-keys/", "/team/members/"):
        s.page.goto(s.stack.url + path)
        s.page.wait_for_load_state()
        seen = s.page.evaluate(LAYOUT_PROBE)
        assert seen["width"] <= width, (path, seen)
        assert seen["broken"] == [], (path, seen)


def test_an_agents_applies_column_follows_the_policy_chosen_before_saving(login):
    s = login("alice")
    s.page.goto(s.stack.url + "/admin/agents/agent/")
    s.page.get_by_role("link", name="Helper", exact=True).click()
    s.page.wait_for_url(re.compile(r"/admin/agents/agent/\d+/change/"))
    row = s.page.locator("table.tool-policies tr", has=s.page.locator("label", has_text=re.compile(r"^current_time$")))
    applies = row.locator(".tool-policy-effective")
    assert "team default" in applies.inner_text()
    row.locator("select").select_option("deny")
    assert applies.inner_text() == "Deny (this agent)"
    row.locator("select").select_option("")
    assert "(team default)" in applies.inner_text()
    assert not s.watch.errors
