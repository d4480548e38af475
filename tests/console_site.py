"""A log holding runs worth looking at, and `steward console` serving it in
a process of its own (importable as ``console_site``)."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import os
import re
import selectors
import signal
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from steward import cli

XSS = "<script>alert(1)</script><img src=x onerror=alert(2)>"
"""A model's reply that a page must show as text, never run."""

_NOTES = [
    {"json": {"type": "note", "category": "requirements", "content": "r"}},
    {"json": {"type": "note", "category": "plan", "content": "p"}},
]


@dataclass(frozen=True)
class Site:
    """The runs of `make_log`, by what each shows."""

    root: str
    """A run that read a missing file (a failed tool call), asked a
    subagent, and finished with `XSS`."""
    child: str
    long: str
    """A run of over a hundred events (two pages of history)."""
    queued: tuple[str, ...]
    """Runs queued with no serve to take them: pending, cancellable."""


def steward(tmp: Path, *argv: str) -> str:
    """``steward --db tmp/log.db ARGV`` in this process (on a thread of its
    own where this one runs an event loop, as Playwright's does); what it
    printed."""
    raw = io.BytesIO()  # `events export` writes bytes to stdout's buffer
    out = io.TextIOWrapper(raw, encoding="utf-8")
    argv = ("--db", str(tmp / "log.db"), *argv)
    with contextlib.redirect_stdout(out), _cwd(tmp):
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            code = cli.main(argv)
        else:
            with ThreadPoolExecutor(1) as thread:
                code = thread.submit(cli.main, argv).result()
    out.flush()
    said = raw.getvalue().decode()
    assert code == 0, f"steward {' '.join(argv)} exited {code}:\n{said}"
    return said


@contextlib.contextmanager
def _cwd(path: Path) -> Iterator[None]:
    before = Path.cwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(before)


def make_log(tmp: Path, queued: int = 2) -> Site:
    """Record the runs a `Site` names in ``tmp/log.db``."""
    (tmp / "steward.toml").write_text("[run]\nmax_iterations = 100\n")
    root_script = {
        "replies": [
            *_NOTES,
            {
                "json": {
                    "type": "tool_call",
                    "name": "files.read",
                    "args": {"path": "x"},
                }
            },
            {"json": {"type": "spawn_subagent", "subagent": {"task": "Say hello."}}},
            {"json": {"type": "finish", "output": XSS}},
        ],
        "subagent_replies": [
            *_NOTES,
            {"json": {"type": "send_message", "message": "hello from the subagent"}},
        ],
    }
    (tmp / "root.json").write_text(json.dumps(root_script))
    steward(tmp, "--script", "root.json", "run", "show me <b>it</b>", "-q")
    long_script = {
        "replies": [
            *_NOTES,
            *[{"json": {"type": "tool_call", "name": "files.list", "args": {}}}] * 40,
            {"json": {"type": "finish", "output": "long done"}},
        ]
    }
    (tmp / "long.json").write_text(json.dumps(long_script))
    steward(tmp, "--script", "long.json", "run", "a long one", "-q")
    waiting = tuple(
        steward(tmp, "runs", "start", f"queued {n}", "--wait", "0").strip()
        for n in range(queued)
    )
    listing = steward(tmp, "runs", "list", "-o", "json")
    runs = {r["input"]: r["id"] for r in map(json.loads, listing.splitlines())}
    return Site(
        root=runs["show me <b>it</b>"],
        child=runs["Say hello."],
        long=runs["a long one"],
        queued=waiting,
    )


class Served:
    """`steward console --port 0` running on a log, in a process of its own
    (or, with ``command``, another that serves the console: ``serve`` with
    ``[console] serve = true`` and ``port = 0``)."""

    def __init__(
        self,
        cwd: Path,
        *argv: str,
        command: tuple[str, ...] = ("console", "--port", "0"),
        **env: str,
    ) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "steward", *argv, *command],
            cwd=cwd,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={**os.environ, "PYTHONUNBUFFERED": "1", **env},
            bufsize=0,  # a line read takes no more: the selector sees the next
        )
        self.url = self._url(timeout=30)

    def _url(self, timeout: float) -> str:
        """The URL in the ``console:`` line the process prints (after the
        lines a serve prints before it)."""
        assert self.process.stdout is not None
        said = []
        for _ in range(10):
            with selectors.DefaultSelector() as selector:
                selector.register(self.process.stdout, selectors.EVENT_READ)
                if not selector.select(timeout):
                    err = self.stop()
                    raise AssertionError(
                        f"the console printed no URL in {timeout}s: {said}\n{err}"
                    )
            line = self.process.stdout.readline().decode()
            said.append(line)
            found = re.fullmatch(r"console: (http://\S+)/\n", line)
            if found is not None:
                return found[1]
            if not line:
                break
        err = self.stop()
        raise AssertionError(f"the console said {said!r}:\n{err}")

    def __enter__(self) -> Served:
        return self

    def __exit__(self, *exc: object) -> None:
        """Stop it: it must end with status 0 and no traceback."""
        err = self.stop()
        assert self.process.returncode == 0 and "Traceback" not in err, err

    def stop(self) -> str:
        """SIGTERM it and wait for it to end; its standard error."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            _, err = self.process.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            _, err = self.process.communicate()
        return err.decode()


ARGS = {"path": "notes.md", "content": "<script>alert(3)</script> hi"}
"""What the runs of `approving` ask to write: markup a page must show as
text."""


def approving(tmp: Path) -> Served:
    """`steward serve` serving the console, on ``tmp/log.db``, whose runs
    (started with ``--script s.json``) ask a person before their
    `files.write` (of `ARGS`), then finish."""
    replies = [
        *(json.dumps(r["json"]) for r in _NOTES),
        json.dumps({"type": "files.write", **ARGS}),
        json.dumps({"type": "finish", "output": "over"}),
    ]
    (tmp / "s.json").write_text(
        json.dumps({"per_run": True, "replies": [{"text": r} for r in replies]})
    )
    (tmp / "steward.toml").write_text(
        '[tools]\nrequire_approval = ["files.write"]\n'
        "[console]\nserve = true\nport = 0\n"
    )
    db = str(tmp / "log.db")
    return Served(tmp, "--db", db, "--script", "s.json", command=("serve",))


def csrf(page: str) -> str:
    """The CSRF value a console page carries for its forms."""
    found = re.search(r'name="csrf" value="([^"]+)"', page)
    assert found is not None, "the page carries no CSRF value"
    return found[1]
