"""Fixtures for the EventLog contract suite: every test runs once per backend.

The backends and their openers are the root ``conftest.py``'s
``open_log_handle`` (and its ``log``), which the host tests share; a backend
joins every suite there, and the tests themselves stay unchanged.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest

from steward.bus import EventLog

LogFactory = Callable[[], Awaitable[EventLog]]


@pytest.fixture
def make_log(open_log_handle: LogFactory) -> LogFactory:
    """Opens handles on one fresh log of the backend, as separate processes would."""
    return open_log_handle
