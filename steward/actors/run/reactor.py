"""What a run's committed decisions ask of the host, as effect values (pure).

The run kind's entries in the kind table (`steward.kinds.RUN`) besides
its decider: which recorded events lead to effects, the effects themselves,
what of them is pending until an event answers it, whether a run still
awaits an effect's result, who holds a claim on it, what a model call needs
of the state, and the correlation id of a commit. No I/O, no clock: times
come from the records (or the host stamps them, `stamp`).
"""

from __future__ import annotations

from msgspec.structs import replace

from steward.actors.effects import (
    ArmTimer,
    Create,
    Deliver,
    Effect,
    ModelCall,
    Pending,
    Told,
    Want,
    WantKind,
    cancel_key,
    notify_key,
    spawn_key,
    take_key,
)
from steward.actors.kind import Approval
from steward.actors.prompt import (
    HASH_PREFIX,
    Prompt,
    PromptCache,
    prompt_hash,
    prompt_matches,
)
from steward.actors.run import staged
from steward.actors.run.decider import child_created
from steward.actors.run.events import (
    TERMINAL,
    ApprovalDecided,
    ApprovalRequested,
    BudgetExceeded,
    MessageSent,
    RunCancelled,
    RunCompleted,
    RunCreated,
    RunFailed,
    RunSlept,
    RunTaken,
    SubagentsSpawned,
)
from steward.actors.run.prompt import build_prompt
from steward.actors.run.stages import outcome_text
from steward.actors.run.state import Run, run_id_of, run_stream
from steward.events import Event, Recorded
from steward.events.protocol import (
    CancelRequested,
    ChildFinished,
    LlmRequested,
    WakeDue,
)

__all__ = [
    "BUDGET",
    "ROUTED",
    "TOLD",
    "answer",
    "correlation",
    "detach",
    "effects",
    "model_call",
    "pending",
    "run_id_of",
    "run_stream",
    "same_decisions",
    "tells",
    "waiting",
    "workspace",
]

ROUTED: frozenset[type[Event]] = frozenset(
    {
        RunCreated,
        RunSlept,
        SubagentsSpawned,
        RunCompleted,
        RunFailed,
        RunCancelled,
    }
)
"""The run events `effects` answers with effects (model and tool requests
are calls the host makes for any kind without asking)."""


def effects(rec: Recorded, at: Run, latest: Run) -> list[Effect]:
    """What committed event ``rec`` asks for, given the run's state at it and
    its newest state."""
    match rec.event:
        case RunCreated(queued=True):
            # a host takes a queued run; the decider refuses a second taker
            return [
                Deliver(
                    key=take_key(at.run_id),
                    stream=rec.stream,
                    input=RunTaken(),
                    stamp=True,
                )
            ]
        case RunSlept(timer_id=timer_id, wake_at=wake_at):
            return [ArmTimer(timer_id=timer_id, due=wake_at)]
        case SubagentsSpawned(children=children):
            # A child whose result the parent holds already (a fork copies
            # history, children's results included) is never started again,
            # nor one of a parent that ended (was cancelled, say).
            waiting = () if latest.status in TERMINAL else latest.children
            assert at.created is not None
            return [
                Create(
                    key=spawn_key(spec.run_id),
                    stream=run_stream(spec.run_id),
                    input=child_created(at.created, spec, 0.0),
                    stamp=True,
                )
                for spec in children
                if spec.run_id in waiting
            ]
        case RunCompleted() | RunFailed() | RunCancelled():
            return [*_answer(rec, at), *_cancel_children(rec)]
        case _:
            return []


def pending(rec: Recorded) -> Pending:
    """What a run's recorded event asks of a host that a crash must not
    lose, and answers: the rows the runs projection keeps
    (`steward.actors.run.projection`, ``keeps_pending``) but for the model and
    tool calls, which the projector keeps for every kind.

    A queued run wants a host to take it (``take``); its creation answers
    its creator's ``spawn:`` want, its children's creations are wanted
    (``spawn``) until each is created or its result is in; a sleep wants its
    timer, answered by its `WakeDue`; an approval or a paused budget wants a
    person's `ApprovalDecided` (``approval``: the pending projection lists
    it, but a host routes nothing for it, `Projector.pending_sources`). The
    run's end drops everything it still wanted, answers a cancel delivered
    to it and wants its result delivered (``notify:``) and, when cancelled,
    a cancel delivered to each child still running; those are answered by
    other streams (the result by the ``reply_to`` stream's `ChildFinished`,
    a cancel by the child's end).

    Two things differ from the projection's rows, which read more than the
    record. The result is wanted at every end, while the projection wants
    it of a run with a parent or a ``reply_to`` only (it reads the ``runs``
    table): for a run nobody waits on the want is void, a host that routes
    its end finding no delivery to make (`effects` gives none). And a
    `RunResumed` answers nothing, where the projection drops the stream's
    timer rows: it names no timer, and needs not, since the one resume that
    ends a sleep is decided on that sleep's own `WakeDue`, which answers its
    timer (every other resume ends a wait with no timer armed). Not ``ended``
    either, which would drop the model and tool calls still in flight (an
    approval decided while another call runs)."""
    run_id = run_id_of(rec.stream)
    match rec.event:
        case RunCreated(queued=queued):
            take = (Want(key=take_key(run_id), kind=WantKind.TAKE),) if queued else ()
            return Pending(wants=take, answers=(spawn_key(run_id),))
        case RunTaken():
            return Pending(answers=(take_key(run_id),))
        case (
            ApprovalRequested(request_id=rid)
            | BudgetExceeded(request_id=rid, policy="pause")
        ):
            return Pending(wants=(Want(key=rid, kind=WantKind.APPROVAL),))
        case ApprovalDecided(request_id=rid):
            return Pending(answers=(rid,))
        case SubagentsSpawned(children=children):
            spawns = (
                Want(key=spawn_key(c.run_id), kind=WantKind.SPAWN) for c in children
            )
            return Pending(wants=tuple(spawns))
        case ChildFinished(stream=child):
            # a finished child needs no creating (a fork copies its result)
            child_id = run_id_of(child)
            return Pending(answers=(notify_key(child_id), spawn_key(child_id)))
        case RunSlept(timer_id=timer_id, wake_at=wake_at):
            return Pending(
                wants=(Want(key=timer_id, kind=WantKind.TIMER, due_at=wake_at),)
            )
        case WakeDue(timer_id=timer_id):
            return Pending(answers=(timer_id,))
        case RunCompleted() | RunFailed() | RunCancelled():
            running = rec.event.children if isinstance(rec.event, RunCancelled) else ()
            wants = (
                Want(key=notify_key(run_id), kind=WantKind.DELIVER),
                *(
                    Want(key=cancel_key(child), kind=WantKind.DELIVER)
                    for child in running
                ),
            )
            return Pending(wants=wants, answers=(cancel_key(run_id),), ended=True)
        case _:
            return Pending()


def workspace(state: Run) -> str | None:
    """The directory the run's tools work in, when its creator named one."""
    return None if state.created is None else state.created.workspace


def _answer(rec: Recorded, state: Run) -> list[Effect]:
    """A finished run's result, to the stream its creator asked answers at."""
    created = state.created
    reply_to = None if created is None else created.reply_to
    if reply_to is None and state.parent_run_id is not None:
        reply_to = run_stream(state.parent_run_id)  # a run recorded before reply_to
    if reply_to is None:
        return []
    finished = ChildFinished(
        stream=rec.stream,
        status=state.status,
        output=state.output or (state.reason or ""),
        metadata=state.metadata,
        outcome="" if state.outcome is None else outcome_text(state.outcome),
        at=rec.at,
    )
    return [Deliver(key=notify_key(state.run_id), stream=reply_to, input=finished)]


def _cancel_children(rec: Recorded) -> list[Effect]:
    if not isinstance(rec.event, RunCancelled):
        return []
    cancel = CancelRequested(reason="parent run was cancelled", at=rec.at)
    return [
        Deliver(key=cancel_key(child), stream=run_stream(child), input=cancel)
        for child in rec.event.children
    ]


def model_call(
    state: Run,
    request: LlmRequested,
    cache: PromptCache | None = None,
    prompt: Prompt | None = None,
) -> ModelCall:
    """What model call ``request`` of the run at ``state`` sends: ``prompt``
    if given (the one the decider hashed), else the one built from ``state``."""
    created = state.created
    settings = state.settings
    labels = {}
    if settings.policy == "staged":  # spec 004 §9.1: what each request says
        stage = staged.stage_policy(settings, state.stage)
        labels = {
            "conversation": (created.context_id if created else None) or state.run_id,
            "run": state.run_id,
            "mode": settings.mode,
            "stage": state.stage,
            "tools": str(len(stage.tools)),
            "reasoning": "on" if settings.reasoning else "off",
        }
    return ModelCall(
        prompt=prompt or build_prompt(state),
        profile=None if created is None else created.profile,
        table=settings.model_table,
        labels=labels,
    )


def same_decisions(
    recorded: tuple[Event, ...], decided: tuple[Event, ...], after: Run
) -> bool:
    """A run's recorded decisions with each prompt hash of the first form
    (written before part hashes) that matches its prompt given in the current
    form: equal to ``decided``, the run verifies."""
    rehashed = []
    for event in recorded:
        if isinstance(event, LlmRequested) and not event.prompt_hash.startswith(
            HASH_PREFIX
        ):
            prompt = build_prompt(after)
            if prompt_matches(prompt, event.prompt_hash):
                event = replace(event, prompt_hash=prompt_hash(prompt))
        rehashed.append(event)
    return tuple(rehashed) == decided


def correlation(state: Run, input: Event) -> str | None:
    """The correlation id of a run's commits: the root run of its tree."""
    if isinstance(input, RunCreated):
        return input.root_run_id or input.run_id
    created = state.created
    if created is None:
        return None
    return created.root_run_id or created.run_id


def detach(event: Event, origin: str) -> Event:
    """A forked run's first input: a run of its own, with no parent to answer
    and the root of its own tree."""
    if isinstance(event, RunCreated):
        return replace(event, parent_run_id=None, root_run_id=None, reply_to=None)
    return event


TOLD: frozenset[type[Event]] = frozenset(
    {MessageSent, RunCompleted, RunFailed, RunCancelled}
)
"""The run events `tells` may tell a channel of."""


def tells(event: Event, state: Run) -> Told | None:
    """What a run tells the user on its channel: its messages and its end,
    for a top-level run started on a channel (a run answering a parent or
    a session, through ``reply_to``, speaks to them, not to the user)."""
    match event:
        case MessageSent(text=text):
            told = "message"
        case RunCompleted(output=text):
            told = "completed"
        case RunFailed(reason=text):
            told = "failed"
        case RunCancelled(reason=text):
            told = "cancelled"
        case _:
            return None
    created = state.created
    if created is None or created.channel_id is None:
        return None
    if created.parent_run_id is not None or created.reply_to is not None:
        return None
    message = {
        "run_id": state.run_id,
        "channel": created.channel_id,
        "type": told,
        "text": text,
    }
    return Told(channel=created.channel_id, message=message)


def show(stream: str, count: int, state: Run) -> list[str]:
    """What `steward replay` prints of a run's state."""
    lines = [
        f"run {run_id_of(stream)}: {count} events, status {state.status}",
        f"iterations {state.iteration}, tool calls {state.tool_calls}, "
        f"tokens in {state.input_tokens} out {state.output_tokens}",
    ]
    if state.output:
        lines.append(f"output: {state.output}")
    if state.reason:
        lines.append(f"reason: {state.reason}")
    return lines


BUDGET = "budget"
"""What a run that spent its budget (``pause``) waits on a person for: the
`Approval` of its `BudgetExceeded` request."""


def waiting(state: Run) -> list[Approval]:
    """The calls a run waits on a person for, oldest first: each tool call
    that needs approval, then its spent budget (the run's `Surface.waiting`,
    and what `steward runs approve|deny` answer)."""
    found = [Approval(a.request_id, a.name, a.args) for a in state.approvals]
    if state.budget_hold is not None:
        found.append(Approval(state.budget_hold, BUDGET, {}))
    return found


def answer(request_id: str, approved: bool, reason: str, at: float) -> ApprovalDecided:
    """A person's answer to what a run waits on (its `Surface.answer`)."""
    return ApprovalDecided(
        request_id=request_id, approved=approved, reason=reason, at=at
    )


def forked(stream: str, fork: str, at: int, state: Run) -> list[str]:
    """What `steward fork` prints of a run's fork (which it carries out)."""
    return [f"forked {run_id_of(stream)} at version {at} as {run_id_of(fork)}"]
