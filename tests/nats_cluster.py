"""The three-node cluster of ``deploy/nats``, on free loopback ports, for tests.

The nodes are the deploy files themselves (``nats-server -c deploy/nats/nX.conf``)
with the flags that win over a file, ``--port``, ``--cluster`` and ``--routes``,
pointing them at free ports (and ``-m``, the monitoring port, which says who
leads the cluster's metadata). They run in a temporary directory, where the
files' relative ``store_dir`` (``.steward/nats/nX``) puts their stores;
nats-server refuses ``--store_dir`` beside a file's ``store_dir``. Server
names, the cluster name, the store layout and JetStream come from the files.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import subprocess
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path

from nats_server import binary, end, wait_listening

from steward.bus import JetStreamEventLog
from steward.bus.jetstream.url import parse_url
from steward.errors import LogWriteError
from steward.kinds import KINDS

DEPLOY = Path(__file__).resolve().parents[1] / "deploy" / "nats"
NODES = ("n1", "n2", "n3")


def free_ports(n: int) -> list[int]:
    """``n`` distinct loopback ports that nothing listens on right now."""
    with contextlib.ExitStack() as stack:
        sockets = [
            stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            for _ in range(n)
        ]
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]


class Node:
    """One cluster node: ``deploy/nats/<name>.conf`` on the given ports, run in
    ``tmp`` (its store is ``tmp/.steward/nats/<name>``)."""

    def __init__(
        self, name: str, tmp: Path, port: int, cluster_port: int, monitor_port: int
    ) -> None:
        self.name = name
        self.config = DEPLOY / f"{name}.conf"
        self.cwd = tmp
        self.log = tmp / f"{name}.log"
        self.errors = tmp / f"{name}.stderr"
        self.port = port
        self.cluster_port = cluster_port
        self.monitor_port = monitor_port
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    @property
    def route(self) -> str:
        return f"nats-route://127.0.0.1:{self.cluster_port}"

    def launch(self, routes: Sequence[str]) -> None:
        """Start the process; `wait_listening` tells when it takes clients."""
        assert self.config.is_file(), f"{self.config} is missing"
        # A bad config is reported on stderr, before the log file is opened.
        with self.errors.open("wb") as errors:
            self.process = subprocess.Popen(
                [
                    binary(),
                    "-c",
                    str(self.config),
                    "--port",
                    str(self.port),
                    "--cluster",
                    f"nats://127.0.0.1:{self.cluster_port}",
                    "--routes",
                    ",".join(routes),
                    "-m",
                    str(self.monitor_port),
                    "--log",
                    str(self.log),
                ],
                cwd=self.cwd,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=errors,
            )

    def wait_listening(self, timeout: float = 10.0) -> None:
        assert self.process is not None, f"{self.name} was not launched"
        failure = wait_listening(self.process, self.port, timeout)
        if failure is not None:
            raise RuntimeError(
                f"nats-server {self.name} {failure}: "
                f"{self.errors.read_text().strip()}; see {self.log}"
            )

    def meta_leader(self) -> str | None:
        """The name of the node leading the cluster's JetStream metadata,
        as this node's monitoring says (``None`` while none is elected)."""
        url = f"http://127.0.0.1:{self.monitor_port}/jsz"
        with urllib.request.urlopen(url, timeout=5) as answer:
            jsz = json.load(answer)
        leader = (jsz.get("meta_cluster") or {}).get("leader")
        return str(leader) if leader else None

    def stop(self, *, kill: bool = False) -> None:
        """End the process (SIGKILL when ``kill``) and wait for it."""
        process, self.process = self.process, None
        if process is not None:
            end(process, kill=kill)


@contextlib.contextmanager
def cluster(tmp: Path) -> Iterator[dict[str, Node]]:
    """The three deploy nodes, started on free ports; all stopped after."""
    ports = free_ports(3 * len(NODES))
    nodes = {
        name: Node(name, tmp, ports[3 * i], ports[3 * i + 1], ports[3 * i + 2])
        for i, name in enumerate(NODES)
    }
    try:
        for node in nodes.values():
            node.launch([other.route for other in nodes.values() if other is not node])
        for node in nodes.values():
            node.wait_listening()
        yield nodes
    finally:
        for node in nodes.values():
            node.stop()


async def open_log(url: str, timeout: float = 30.0) -> JetStreamEventLog:
    """The log at ``url``, once the cluster has elected a leader that can
    create it."""
    servers, options = parse_url(url)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        try:
            return await JetStreamEventLog.open(
                servers,
                reconnect_wait=0.05,
                reconnect_max_wait=0.5,
                **options,
                union=KINDS.union,
            )
        except LogWriteError:
            if loop.time() > deadline:
                raise
        await asyncio.sleep(0.2)
