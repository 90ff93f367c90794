"""Browser tests: the system Chromium, driven by Playwright, against a real stack.

They run on their own (``make test-e2e``): the main suite leaves this folder out
(``collect_ignore`` in ``tests/conftest.py``), and this run starts with
``--confcutdir=tests/e2e`` so none of the unit tests' fixtures load. Django's ``live_server``
cannot serve websockets, so the session starts real processes (``agentsite.stack.Stack``:
embedded Redis, daphne, a Celery worker, a file SQLite database); the test process never
touches the database itself.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import wait_for

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]

AGENTS = {
    # streams slowly enough to watch, with a tool that needs no approval
    "Helper": {"tools": ["current_time"], "provider_options": {"first_token_latency_s": 0.2, "token_delay_s": 0.05}},
    # streams very slowly: Stop lands mid-reply
    "Slow": {"tools": [], "provider_options": {"first_token_latency_s": 0.1, "token_delay_s": 0.25}},
    # its calculator needs approval
    "Careful": {"tools": ["calculator"], "provider_options": {"token_delay_s": 0.01}},
    # answers "xss corpus please" with hostile markup, through its tool too
    "Corpus": {"tools": ["current_time"], "provider_options": {"token_delay_s": 0.005}},
    # its only time tool is the operator's MCP time server (stdio), whose calls ask a person
    "Clock": {"tools": [], "provider_options": {"token_delay_s": 0.01}},
    # a model with a (steep) price of the team's own: bob's daily budget is crossed in one turn
    "Metered": {"tools": [], "model": "demo-metered", "provider_options": {"token_delay_s": 0.005}},
    # uses the tools of an MCP server with prompts ("notes", stdio): its "/" commands and starters
    "Writer": {"tools": [], "provider_options": {"token_delay_s": 0.005}},
    # its calculator asks a person, who never answers within its 2 s (API: a denial)
    "Asker": {"tools": ["calculator"], "provider_options": {"token_delay_s": 0.005},
              "fields": {"approval_timeout_s": 2}},
}
# API keys of the stack (tests/e2e/test_openai_client.py): name -> how it is made.
API_KEYS = [
    {"name": "alice-chat", "user": "alice", "scopes": ["chat", "traces:read", "costs:read"]},
    {"name": "alice-read", "user": "alice", "scopes": ["traces:read"]},
    {"name": "alice-revoked", "user": "alice", "state": "revoked"},
    {"name": "alice-expired", "user": "alice", "state": "expired"},
    {"name": "alice-rpm", "user": "alice", "rpm": 5},
    {"name": "alice-tpm", "user": "alice", "tpm": 100},
    {"name": "charlie-chat", "user": "charlie"},
]
# The operator's stdio MCP servers of the stack (``mcp-server-time``), and the team's server
# of it, whose tools "Clock" has.
MCP_STDIO_SERVERS = {"time": {"command": "python",
                              "args": ["-m", "mcp_server_time", "--local-timezone", "UTC"]},
                     "notes": {"command": "python", "args": ["-m", "tests.agents.tools.mcp.servers"]}}
MCP_SERVERS = [{"name": "time", "transport": "stdio", "operator_key": "time",
                "default_policy": "ask", "agents": ["Clock"]},
               {"name": "notes", "transport": "stdio", "operator_key": "notes",
                "default_policy": "allow", "agents": ["Writer"]}]


@pytest.fixture(scope="session")
def stack() -> Iterator[Any]:
    from agentsite.stack import Stack

    running = Stack(worker_threads=8,
                    extra_env={"MCP_STDIO_SERVERS": json.dumps(MCP_STDIO_SERVERS)}).start()
    try:
        spec = {"agents": [{"name": name, **conf} for name, conf in AGENTS.items()],
                "approval": ["calculator"], "mcp_servers": MCP_SERVERS,
                "api_keys": API_KEYS, "team_b_agents": ["Rival"],
                "prices": [{"model": "demo-metered", "input_per_mtok": 1000, "output_per_mtok": 1000}],
                "budgets": [{"user": "bob", "limit_usd": "0.01"}]}
        running.ids = running.seed(spec)
        yield running
    finally:
        running.stop()


@pytest.fixture(scope="session")
def chromium() -> Iterator[Any]:
    """The session's one Chromium (Playwright's sync API runs once per process)."""
    if not Path(CHROMIUM).exists() and not shutil.which("chromium"):
        pytest.skip(f"{CHROMIUM} is not installed (apt-get install -y chromium): browser tests skipped")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield launched
        launched.close()


@pytest.fixture(scope="session")
def browser(stack, chromium) -> Any:
    return chromium


@dataclass
class Watch:
    """What a page did that it must not: dialogs, errors, requests to other hosts."""

    dialogs: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)

    def foreign_requests(self, base: str) -> list[str]:
        return [url for url in self.requests if not url.startswith(base) and not url.startswith("data:")]


@dataclass
class Session:
    page: Any
    watch: Watch
    stack: Any

    def open_chat_with(self, agent: str) -> str:
        self.page.goto(self.stack.url + "/chat/")
        uuid = self.stack.ids["agents"][agent]
        self.page.click(f"form[action$='/chat/new/']:has(input[name=agent][value='{uuid}']) button:has-text('Chat')")
        self.page.wait_for_selector("#composer-text")
        self.wait_for_socket()
        return self.page.url

    def wait_for_socket(self, timeout: float = 10.0) -> None:
        wait_for(lambda: self.page.evaluate("() => !!window.__socketOpen"), timeout=timeout,
                   what="the chat socket to open")

    def send(self, text: str) -> None:
        self.page.fill("#composer-text", text)
        self.page.press("#composer-text", "Enter")

    def streamed(self) -> str:
        """The text of the answer being written, as the page shows it so far."""
        return "".join(self.page.locator("li.answer.pending .stream-text").all_inner_texts())

    def answers(self, status: str) -> Any:
        return self.page.locator(f"li.answer[data-status='{status}']")

    def open_step(self, step: Any, timeout: float = 15.0) -> Any:
        """Open a step of the inspector's timeline (a ``li.step`` locator) and wait for its
        panel to load; returns the panel. A live update can replace the step's row just as it
        is clicked, so that the click lands on the row it replaced: the step is opened again
        while it is still closed."""
        body = step.locator(":scope > details > .step-body")

        def loaded() -> bool:
            if not step.locator(":scope > details").evaluate("d => d.open"):
                step.locator(":scope > details > summary").click()
                return False
            return "Loading…" not in body.inner_text()

        wait_for(loaded, timeout=timeout, interval=0.25, what=f"the panel of step {step.get_attribute('data-step')}")
        return body


# Marks the page's socket state for the tests (an init script runs before the page's own, and
# through the browser's debugging protocol, so the page's CSP does not apply to it).
SOCKET_PROBE = """
document.addEventListener("htmx:wsOpen", () => { window.__socketOpen = true; });
document.addEventListener("htmx:wsClose", () => { window.__socketOpen = false; });
"""


def sign_in(browser: Any, stack: Any, username: str = "alice", *, bypass_csp: bool = False,
            viewport: dict | None = None) -> tuple[Any, Session]:
    """A new browser context signed in as ``username`` on ``stack``, watching its page."""
    context = browser.new_context(bypass_csp=bypass_csp, viewport=viewport or {"width": 1200, "height": 900})
    context.add_init_script(SOCKET_PROBE)
    page = context.new_page()
    page.set_default_timeout(15_000)
    watch = Watch()
    page.on("dialog", lambda dialog: (watch.dialogs.append(dialog.message), dialog.dismiss()))
    page.on("pageerror", lambda error: watch.errors.append(str(error)))
    page.on("request", lambda request: watch.requests.append(request.url))
    page.goto(stack.url + "/accounts/login/")
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", stack.ids["password"])
    page.click("button[type=submit]")
    page.wait_for_url(lambda url: "/accounts/login" not in url)
    return context, Session(page, watch, stack)


@pytest.fixture
def login(stack, browser) -> Iterator[Callable[..., Session]]:
    contexts = []

    def make(username: str = "alice", *, bypass_csp: bool = False, viewport: dict | None = None) -> Session:
        context, session = sign_in(browser, stack, username, bypass_csp=bypass_csp, viewport=viewport)
        contexts.append(context)
        return session

    yield make
    for context in contexts:
        context.close()
