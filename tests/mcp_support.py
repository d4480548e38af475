"""MCP servers for the tests: the SDK server of ``mcp_server.py`` over
stdio or streamable HTTP, and what it recorded of its calls."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from steward.config.settings import McpServerConfig

SERVER = Path(__file__).parent / "mcp_server.py"


def stdio(state: Path, **table: Any) -> McpServerConfig:
    """A stdio server keeping its notes and calls in ``state``."""
    env = {"MCP_STATE": str(state), **table.pop("env", {})}
    return McpServerConfig(command=sys.executable, args=[str(SERVER)], env=env, **table)


def calls(state: Path) -> list[str]:
    """Each call a server made, in order (``tool argument``)."""
    file = state / "calls.txt"
    return file.read_text().splitlines() if file.exists() else []


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class HttpServer:
    """The test server over streamable HTTP on a loopback port, which the
    test may stop and start again (the same port)."""

    def __init__(
        self, state: Path, *, token: str | None = None, legacy: bool = False
    ) -> None:
        self.state = state
        self._legacy = legacy
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self._token = token
        self._process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        argv = [sys.executable, str(SERVER), "--http", str(self.port)]
        if self._token is not None:
            argv += ["--token", self._token]
        if self._legacy:
            argv.append("--legacy")
        self._process = subprocess.Popen(
            argv,
            env={"MCP_STATE": str(self.state), "PATH": "/usr/bin:/bin"},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                err = (
                    self._process.stderr.read().decode() if self._process.stderr else ""
                )
                raise AssertionError(f"the MCP server exited: {err[-1500:]}")
            with contextlib.suppress(OSError):
                socket.create_connection(("127.0.0.1", self.port), 0.2).close()
                return
            time.sleep(0.05)
        raise AssertionError("the MCP server did not listen within 30 s")

    def stop(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.kill()
            self._process.communicate()
        self._process = None


@contextlib.contextmanager
def http_server(
    state: Path, *, token: str | None = None, legacy: bool = False
) -> Iterator[HttpServer]:
    server = HttpServer(state, token=token, legacy=legacy)
    server.start()
    try:
        yield server
    finally:
        server.stop()
