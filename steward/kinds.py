"""steward's actor kinds: the one table that names them.

`KINDS` is the table steward's command line hands every part that serves
actors (the host, the projector, replay, the egress), and whose union its
logs decode into. A kind is a package under `steward.actors` whose
``kind`` module exports ``KIND``, and one line here.
"""

from __future__ import annotations

from steward.actors.kind import Kinds
from steward.actors.run.kind import KIND as RUN
from steward.actors.session.kind import KIND as SESSION
from steward.actors.task.kind import KIND as TASK
from steward.actors.workflow.kind import KIND as WORKFLOW

__all__ = ["KINDS", "RUN", "SESSION", "TASK", "WORKFLOW", "kind_of"]

KINDS = Kinds(RUN, SESSION, WORKFLOW, TASK)
"""steward's actor kinds."""

kind_of = KINDS.of
"""The kind of the actor whose stream is the one given, of steward's kinds."""
