"""The EventLog contract (`steward.testing.logs`), run against each of
steward's backends.

The fixtures ``log`` and ``make_log`` (``conftest.py`` here and at the
root) are parametrized over the SQLite and JetStream logs, so every test
of the contract runs once per backend.
"""

from __future__ import annotations

from steward.testing.logs import LogContract


class TestStewardLogs(LogContract):
    """The contract on steward's two logs, opened with `steward.kinds.KINDS`'s
    union."""
