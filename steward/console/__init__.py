"""The operator console: a web page over the log and the projections.

`steward console` serves it (`steward.cli.console`). `reads` is what the
pages read (lists through each kind's `Listing`, an actor's history from
the log, paged), `app` the Starlette application (routes, the token and
CSRF checks, the templates under ``templates/`` and the one script and
style sheet under ``static/``). It names no actor kind: it asks the kind
table.
"""
