"""The actor host: the imperative shell around the pure deciders.

The host owns every piece of I/O and names no actor kind: a stream's kind
(from the first part of its name, in the `Kinds` table the host serves) gives its
decider and says what its committed decisions ask for. For an input the host
loads (or takes from its cache) the actor's state, asks the kind to decide,
and appends ``[input, *decisions]`` as one commit at the expected version; on
a conflict it reloads and retries. Routing is driven from the log, not from
memory: a dispatcher follows the log and starts what each committed record
asks for (a model or tool call, a timer, an input of another stream), and on
start routes again what is pending, so a crash delays work and never loses it.
Effects are at-least-once; their recording is exactly-once because ``decide``
refuses a result whose request is no longer pending.

A queued run (``RunCreated.queued``: `steward runs start`) waits, pending,
until a host that sees it, live or in the pending projection, records
`RunTaken`; the decider refuses a second host's. A host scoped to one run
(`steward run`) carries out that run and its subagents only.

The package, a module a job:

- `steward.host.core`: `Host`, which puts the pieces together and starts,
  settles, drains and stops them;
- `steward.host.mailbox`: the streams' mailboxes and the decide-and-commit loop;
- `steward.host.states`: the state cache and the versions known committed;
- `steward.host.dispatch`: the dispatcher that follows the log and routes each
  record's effects, and the timers;
- `steward.host.calls`: model and tool calls, and recording their answers;
- `steward.host.claims`: a worker's claims on its calls when hosts share a log;
- `steward.host.pending`: what the streams a worker holds wait for, kept in
  memory (a worker of a shared log builds no projections).

On a shared (JetStream) log a host may be a member of the log's workers
(`steward.bus.jetstream.members`): it carries out the effects of the
partitions it holds only, and a worker follows only those.
"""

from steward.host.core import Host

__all__ = ["Host"]
