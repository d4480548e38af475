"""``python -m steward`` is the ``steward`` command."""

from steward.cli import main

raise SystemExit(main())
