"""What the console's browser tests share: Debian's Chromium (or the test
module skipped, saying how to get it), launched through Playwright, and a
tab of the console that fails its test if a page opened a dialog (a script
from the log ran) or the console's own script failed."""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser, Page, Playwright

WAIT = 15_000
"""Milliseconds a test waits for what it expects to appear."""


def chromium() -> str:
    """The Chromium to drive; skips the calling test module when there is
    none (call it at a module's top)."""
    found = os.environ.get("STEWARD_CHROMIUM") or shutil.which("chromium")
    if found is None:
        pytest.skip(
            "no chromium on PATH: the browser tests need Debian's (apt-get install "
            "chromium; .ci/run installs it), or STEWARD_CHROMIUM naming one",
            allow_module_level=True,
        )
    return found


def launch(playwright: Playwright) -> Browser:
    return playwright.chromium.launch(executable_path=chromium(), args=["--no-sandbox"])


@contextlib.contextmanager
def tab(browser: Browser, url: str) -> Iterator[Page]:
    """A page of the console at ``url``; it must open no dialog (no script
    from the log ran) and the console's script must not fail."""
    context = browser.new_context(base_url=url, viewport={"width": 1280, "height": 900})
    opened = context.new_page()
    dialogs: list[str] = []
    opened.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    errors: list[str] = []
    opened.on("pageerror", lambda e: errors.append(str(e)))
    try:
        yield opened
    finally:
        context.close()
    assert dialogs == [], f"a page opened dialogs (a script ran): {dialogs}"
    assert errors == [], f"the console's script failed: {errors}"
