"""`steward console`: the operator console, a web page over the log."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ipaddress
import signal
import socket
from collections.abc import Iterator

import uvicorn

from steward.cli.env import Env, opened
from steward.console.app import Console, create_app
from steward.errors import ConfigError


async def cmd_console(env: Env, args: argparse.Namespace) -> int:
    settings = env.settings.console
    port = settings.port if args.port is None else args.port
    address = args.address or settings.address
    exposed(settings.token, address)  # refused before the log is opened
    async with opened(env, create=False) as (log, projector):
        console = Console(log, projector, env.kinds, token=settings.token)
        server = served(env, console, address, port)
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, server.handle_exit, signum, None)
        await server.serve(sockets=[server.listening])
    return 0


def served(env: Env, console: Console, address: str, port: int) -> _Server:
    """A server of ``console`` listening on ``address``:``port`` (not yet
    serving: ``await server.serve(sockets=[server.listening])``), its
    address printed.

    Raises:
        ConfigError: the address is reachable from other machines and no
            token is set, or it cannot be listened on.
    """
    exposed(console.token, address)
    listening = _bound(address, port)
    server = _Server(
        uvicorn.Config(
            create_app(console), log_level="warning", timeout_graceful_shutdown=2
        )
    )
    server.listening = listening
    host, bound = listening.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    env.out(f"console: http://{shown}:{bound}/")
    return server


def exposed(token: str | None, address: str) -> None:
    """Refuse to serve on ``address`` without ``token`` when other machines
    can reach it.

    Raises:
        ConfigError: that is so.
    """
    if token is None and not _loopback(address):
        raise ConfigError(
            "settings",
            "console.address",
            f"{address} is reachable from other machines, and the console "
            "then needs a token: set [console] token (STEWARD_CONSOLE_TOKEN), "
            "or keep it on 127.0.0.1",
        )


class _Server(uvicorn.Server):
    """uvicorn's server, stopped by the command's own signal handlers: a
    SIGTERM ends the command with status 0, as it does `serve`."""

    listening: socket.socket
    """The socket it serves on."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def _loopback(address: str) -> bool:
    if address == "localhost":
        return True
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False


def _bound(address: str, port: int) -> socket.socket:
    """A socket listening on ``address``:``port``, or one clear error."""
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((address, port))
        sock.listen(128)
    except OSError as e:
        sock.close()
        raise ConfigError(
            "settings",
            "console.port",
            f"cannot serve the console on {address}:{port}: {e.strerror}; "
            "choose another (--port, --address or [console] port, address)",
        ) from None
    return sock
