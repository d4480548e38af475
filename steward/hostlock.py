"""One host per SQLite log: an exclusive lock on a file beside it.

A process that carries out a SQLite log's model and tool calls (`steward
serve`; a `steward run` or `fork` with no serve beside it, which hosts only
its own run; `steward demo` while it checks) holds an exclusive
``flock`` on ``<log>.host.lock``, which names the holder (pid, command line,
start time) as JSON written once the lock is taken. The operating system
releases the lock when the process ends, however it ends (SIGKILL too), so
recovery after a crash needs no clean-up. A JetStream log needs no such lock:
its workers claim each call in the log (`EffectClaimed`).
"""

from __future__ import annotations

import fcntl
import os
import shlex
import sys
import time
from pathlib import Path

import msgspec

from steward.isotime import iso_time

__all__ = ["HostLock", "Holder"]


class Holder(msgspec.Struct, frozen=True, kw_only=True):
    """The process that holds a log's host lock."""

    pid: int
    command: str
    started: float
    scope: str | None = None
    """The run a `steward run` or `fork` hosts alone (``None``: a `serve`,
    which hosts every run)."""

    def __str__(self) -> str:
        return f"pid {self.pid} ({self.command}, since {iso_time(self.started)})"


class HostLock:
    """The host lock of the SQLite log at ``db``; see the module docstring."""

    def __init__(self, db: Path | str) -> None:
        self.db = Path(db)
        self.path = Path(f"{db}.host.lock")
        self._fd: int | None = None

    def acquire(self, scope: str | None = None) -> bool:
        """Take the lock without waiting; whether this process holds it now.
        ``scope``: the one run this process hosts, if it hosts only that."""
        if self._fd is not None:
            return True
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        me = Holder(
            pid=os.getpid(), command=_command(), started=time.time(), scope=scope
        )
        os.ftruncate(fd, 0)
        os.pwrite(fd, msgspec.json.encode(me), 0)
        self._fd = fd
        return True

    def release(self) -> None:
        """Give the lock up (closing the file releases it)."""
        if self._fd is not None:
            os.ftruncate(self._fd, 0)
            os.close(self._fd)
            self._fd = None

    def holder(self) -> Holder | None:
        """Who holds the lock, as its file says (``None`` if it says nothing
        readable: a holder between taking the lock and writing its name)."""
        for _ in range(20):
            try:
                return msgspec.json.decode(self.path.read_bytes(), type=Holder)
            except (OSError, msgspec.DecodeError, msgspec.ValidationError):
                time.sleep(0.01)
        return None

    def refusal(self) -> str:
        """The sentence refusing a second host, naming the first."""
        holder = self.holder()
        who = str(holder) if holder is not None else "another steward process"
        if holder is not None and holder.scope is not None:
            return (
                f"the log {self.db} is held by {who}, which hosts only its run "
                f"{holder.scope}; start this when it ends"
            )
        return (
            f"the log {self.db} is hosted by {who}; stop that process first, or "
            "hand it work with `steward runs start`"
        )


def _command() -> str:
    """This process's command line, as a person would type it."""
    return shlex.join(["steward", *sys.argv[1:]])
