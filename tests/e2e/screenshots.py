"""The documentation's screenshots, taken from the real product in Chromium:
``make docs-screenshots`` (``python -m tests.e2e.screenshots``) starts a throwaway stack as the
browser tests do (``agentsite.stack.Stack``, their agents), plays a few turns and writes
``docs/img/*.png``. Run it again after a change to the pages, and look at the pictures before
committing them."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

from playwright.sync_api import sync_playwright

from tests.e2e.conftest import (
    AGENTS,
    API_KEYS,
    CHROMIUM,
    CHROMIUM_ARGS,
    MCP_SERVERS,
    MCP_STDIO_SERVERS,
)

OUT = Path(__file__).resolve().parents[2] / "docs" / "img"
VIEWPORT = {"width": 1280, "height": 800}


def main() -> int:
    from agentsite.stack import Stack

    OUT.mkdir(parents=True, exist_ok=True)
    stack = Stack(worker_threads=4, extra_env={"MCP_STDIO_SERVERS": json.dumps(MCP_STDIO_SERVERS)}).start()
    try:
        ids = stack.seed({"agents": [{"name": name, **conf} for name, conf in AGENTS.items()],
                          "approval": ["calculator"], "mcp_servers": MCP_SERVERS, "api_keys": API_KEYS})
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            page = browser.new_context(viewport=VIEWPORT, color_scheme="light").new_page()
            page.goto(stack.url + "/accounts/login/")
            page.fill("input[name=username]", "alice")
            page.fill("input[name=password]", ids["password"])
            page.click("button[type=submit]")
            page.wait_for_load_state()

            def chat(agent: str, text: str) -> None:
                page.goto(stack.url + "/")
                page.select_option("#home-agent", ids["agents"][agent])
                page.fill("#home-text", text)
                page.press("#home-text", "Enter")
                page.wait_for_url(re.compile(r"/chat/[0-9a-f-]+/"))

            def shot(name: str) -> None:
                page.wait_for_timeout(400)  # transitions settle
                page.screenshot(path=str(OUT / f"{name}.png"))
                print(f"docs/img/{name}.png")

            chat("Helper", "What time is it in Tokyo? Then tell me about the sea.")
            page.locator("li.answer[data-status=completed]").first.wait_for(timeout=60_000)
            page.locator(".tool-card").first.evaluate("card => { card.open = true; }")
            shot("chat")
            trace = page.locator("li.answer").first.get_attribute("data-trace")

            chat("Careful", "What is 2 + 3?")
            page.locator(".tool-card.state-waiting").wait_for(timeout=30_000)
            shot("approval")
            page.locator(".tool-card.state-waiting button:has-text('Approve')").click()
            page.locator("li.answer[data-status=completed]").first.wait_for(timeout=30_000)

            page.goto(f"{stack.url}/traces/{trace[:8]}-{trace[8:12]}-{trace[12:16]}-{trace[16:20]}-{trace[20:]}/")
            page.locator("#steps > li").first.wait_for()
            shot("inspector")
            for name, path in (("home", "/"), ("traces", "/traces/"), ("costs", "/costs/")):
                page.goto(stack.url + path)
                shot(name)
            browser.close()
    finally:
        stack.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
