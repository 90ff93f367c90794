"""The chat as a person sees it: send -> first token painted, frames and bytes while streaming.

    python -m bench.chat_latency [--check] [--messages 20] [--first-token 0.3] [--token-delay 0.02]

Starts the whole stack (embedded Redis, daphne, a Celery worker, a file SQLite database) and
drives the system Chromium through Playwright: N messages to a demo agent whose model waits
``--first-token`` seconds before its first token and ``--token-delay`` between tokens.

* time the app adds before the first token is painted: from the click on Send to the first
  animation frame after the first streamed text appeared in the answer (both timestamps taken
  in the page), minus the model's own first-token latency. Target: p50 <= 150 ms.
* frames per second while a turn streams: every websocket frame the page received between the
  turn's first and last text delta. Target: <= 20.
* bytes on the wire: the payload bytes of the delta frames against the bytes of the reply they
  carried. Target: <= 1.5x.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from bench import _measure, _profile

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]
P50_LIMIT_MS = 150.0
FPS_LIMIT = 20.0
BYTES_LIMIT = 1.5

OBSERVE = """() => {
  window.__bench = {};
  const messages = document.getElementById("messages");
  const seen = () => {
    if (window.__bench.first || window.__bench.waiting) { return; }
    const text = document.querySelector("li.answer.pending .stream-text");
    if (text && text.textContent.length) {
      window.__bench.waiting = true;
      requestAnimationFrame(() => { window.__bench.first = performance.now(); });
    }
  };
  if (window.__benchObserver) { window.__benchObserver.disconnect(); }
  window.__benchObserver = new MutationObserver(seen);
  window.__benchObserver.observe(document.body, {subtree: true, childList: true, characterData: true});
  const button = document.querySelector("#composer button[type=submit]");
  button.addEventListener("click", () => { window.__bench.sent = performance.now(); },
                          {capture: true, once: true});
}"""


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    index = min(int(round(q * (len(ordered) - 1))), len(ordered) - 1)
    return ordered[index]


class Frames:
    """Websocket frames the page received: (monotonic time, payload)."""

    def __init__(self) -> None:
        self.frames: list[tuple[float, str]] = []

    def attach(self, websocket: Any) -> None:
        websocket.on("framereceived", lambda payload: self.frames.append(
            (time.monotonic(), payload if isinstance(payload, str) else payload.decode("utf-8", "replace"))))

    def turn(self, start: int) -> dict[str, float] | None:
        frames = self.frames[start:]
        deltas = [i for i, (_, p) in enumerate(frames) if p.startswith("~")]
        if not deltas:
            return None
        first, last = deltas[0], deltas[-1]
        window = frames[first:last + 1]
        seconds = frames[last][0] - frames[first][0]
        delta_payloads = [frames[i][1] for i in deltas]
        reply = "".join(p.split("|", 1)[1] for p in delta_payloads)
        wire = sum(len(p.encode()) for p in delta_payloads)
        return {
            "frames": len(window),
            "seconds": seconds,
            "fps": (len(window) - 1) / seconds if seconds > 0 else 0.0,
            "wire_bytes": wire,
            "reply_bytes": len(reply.encode()),
        }


def run(args: argparse.Namespace) -> dict[str, Any]:
    from playwright.sync_api import sync_playwright

    from agentsite.stack import Stack

    options = {"first_token_latency_s": args.first_token, "token_delay_s": args.token_delay}
    meter = None
    with Stack(worker_threads=4) as stack:
        ids = stack.seed({"agents": [{"name": "Bench", "tools": [], "provider_options": options}]})
        pids = {"web": stack.pid("web"), "worker": stack.pid("worker")}
        with sync_playwright() as playwright, _profile.profiled("chat", pids, args.profile):
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            page = browser.new_page()
            frames = Frames()
            page.on("websocket", frames.attach)
            page.goto(stack.url + "/accounts/login/")
            page.fill("input[name=username]", "alice")
            page.fill("input[name=password]", ids["password"])
            page.click("button[type=submit]")
            page.goto(stack.url + "/chat/")
            page.click("form[action$='/chat/new/'] button[type=submit]")
            page.wait_for_selector("#composer-text")
            page.wait_for_timeout(300)  # the socket opens
            latencies, turns = [], []
            for index in range(args.messages + 1):  # the first one warms caches up
                page.evaluate(OBSERVE)
                start = len(frames.frames)
                page.fill("#composer-text", f"Tell me something about the weather in spring, number {index}")
                page.click("#composer button[type=submit]")
                page.wait_for_selector(f"li.answer[data-status=completed] >> nth={index}", timeout=30_000)
                mark = page.evaluate("() => window.__bench")
                if index == 0:
                    meter = _measure.CpuMeter(pids).start()  # after the warm-up message
                    continue
                latencies.append(mark["first"] - mark["sent"] - args.first_token * 1000)
                turn = frames.turn(start)
                if turn is not None:
                    turns.append(turn)
            cpu = meter.stop() if meter is not None else {}
            browser.close()
    fps = [t["fps"] for t in turns]
    ratio = [t["wire_bytes"] / t["reply_bytes"] for t in turns if t["reply_bytes"]]
    return {
        "messages": args.messages,
        "p50_ms": statistics.median(latencies),
        "p90_ms": _percentile(latencies, 0.9),
        "max_ms": max(latencies),
        "fps_median": statistics.median(fps) if fps else 0.0,
        "fps_max": max(fps) if fps else 0.0,
        "frames_per_turn": statistics.median([t["frames"] for t in turns]) if turns else 0,
        "bytes_ratio_median": statistics.median(ratio) if ratio else 0.0,
        "bytes_ratio_max": max(ratio) if ratio else 0.0,
        "reply_bytes": statistics.median([t["reply_bytes"] for t in turns]) if turns else 0,
        "web_cpu_ms": cpu.get("web", 0.0) / args.messages * 1000,
        "worker_cpu_ms": cpu.get("worker", 0.0) / args.messages * 1000,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true")
    parser.add_argument("--messages", type=int, default=20)
    parser.add_argument("--first-token", type=float, default=0.3, help="model's first-token latency, s")
    parser.add_argument("--token-delay", type=float, default=0.02, help="model's delay per token, s")
    _profile.add_profile_argument(parser)
    args = parser.parse_args(argv)
    _measure.print_machine()
    if not Path(CHROMIUM).exists():
        print(f"{CHROMIUM} is missing (apt-get install -y chromium); benchmark skipped")
        return 0
    sys.path.insert(0, str(ROOT))
    r = run(args)
    print(f"send -> first token painted, minus the model's {args.first_token * 1000:.0f} ms: "
          f"p50 {r['p50_ms']:.1f} ms, p90 {r['p90_ms']:.1f} ms, max {r['max_ms']:.1f} ms "
          f"({r['messages']} messages)")
    print(f"frames while streaming: median {r['fps_median']:.1f}/s, max {r['fps_max']:.1f}/s "
          f"({r['frames_per_turn']:.0f} frames per turn)")
    print(f"delta bytes on the wire / reply bytes: median {r['bytes_ratio_median']:.2f}x, "
          f"max {r['bytes_ratio_max']:.2f}x (reply ~{r['reply_bytes']:.0f} bytes)")
    print(f"CPU per message: web {r['web_cpu_ms']:.1f} ms, worker {r['worker_cpu_ms']:.1f} ms")
    _measure.record("chat", {"web CPU ms per message": r["web_cpu_ms"],
                             "worker CPU ms per message": r["worker_cpu_ms"]})
    ok = (r["p50_ms"] <= P50_LIMIT_MS and r["fps_max"] <= FPS_LIMIT
          and r["bytes_ratio_max"] <= BYTES_LIMIT)
    verdict = "PASS" if ok else "FAIL"
    print(f"verdict: {verdict} (targets: p50 <= {P50_LIMIT_MS:.0f} ms, <= {FPS_LIMIT:.0f} frames/s, "
          f"<= {BYTES_LIMIT}x bytes)")
    return 1 if args.check and not ok else 0


if __name__ == "__main__":
    sys.exit(main())
