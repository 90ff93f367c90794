"""Fork and replay in a real browser: a turn with tools forked at its second model request onto
another model, and the new trace read in the inspector."""

from __future__ import annotations

import re


def test_a_trace_forked_at_its_second_model_request_runs_on_another_model(login):
    s = login("alice")
    s.open_chat_with("Helper")
    s.send("call the current_time tool 2 times")
    s.answers("completed").first.wait_for(timeout=20_000)
    s.answers("completed").first.locator("a.trace-link").click()
    s.page.wait_for_url(re.compile(r"/traces/[0-9a-f-]+/$"))
    parent_url = s.page.url

    # the second model request of the timeline: open it, then "Fork from here"
    second = s.page.locator("#steps li.step.k-llm_request").nth(1)
    seq = second.get_attribute("data-step")
    panel = s.open_step(second)
    assert panel.locator("a:has-text('Fork from here')").count() == 1, panel.inner_text()[:1000]
    panel.locator("a:has-text('Fork from here')").click()
    s.page.wait_for_url(re.compile(rf"/fork/{seq}/$"))
    s.page.select_option("#f-provider", label="Demo for Corpus")
    s.page.fill("#f-model", "demo-large")
    s.page.click("button:has-text('Fork and run')")

    s.page.wait_for_url(lambda url: url != parent_url and re.search(r"/traces/[0-9a-f-]+/$", url))
    header = s.page.locator("#trace-header")
    assert f"at step {seq}" in header.locator(".fork-origin").inner_text()
    s.page.locator("#trace-header[data-status='completed']").wait_for(timeout=20_000)
    s.page.reload()
    text = s.page.locator("#trace-header").inner_text()
    assert "demo-large" in text and "Demo for Corpus" in text
    assert "Called current_time 2 times." in text
    # the later call came from the record
    assert s.page.locator("#steps li.step.k-tool_call").count() == 1
    s.page.locator(".fork-origin a", has_text="trace").click()
    s.page.wait_for_url(re.compile(r"/traces/[0-9a-f-]+/#step-\d+$"))
    assert "Forks:" in s.page.locator(".fork-list").inner_text()
    assert not s.watch.errors
