"""One line per event, for timelines (``runs show``, ``serve``'s log, the
ingress's progress events)."""

from __future__ import annotations

import msgspec

from steward import events
from steward.actors.run import events as run_events
from steward.isotime import iso_time

__all__ = ["summary"]

_json = msgspec.json.Encoder()


def summary(event: events.Event, width: int = 160) -> str:
    """A one-line description of an event for timelines."""
    match event:
        case run_events.RunCreated():
            text = event.input_text
        case events.LlmRequested():
            text = f"iteration {event.iteration} ({event.priority})"
        case events.LlmResponded():
            calls = ", ".join(c.name for c in event.tool_calls)
            text = event.text + (f" [tools: {calls}]" if calls else "")
        case events.LlmFailed():
            text = f"{event.kind}: {event.message}"
        case events.LlmStreamRecorded():
            end = "complete" if event.complete else "cut off"
            text = f"attempt {event.attempt}: {len(event.events)} stream events, {end}"
        case run_events.BudgetExceeded():
            text = (
                f"{event.kind} budget spent ({event.used:g} of {event.limit:g}); "
                + ("waiting for approval" if event.policy == "pause" else "failing")
            )
        case events.LlmAttemptFailed():
            status = f" (HTTP {event.status})" if event.status else ""
            text = (
                f"attempt {event.attempt}, retry in {event.delay:.1f}s: "
                f"{event.kind}{status}: {event.message}"
            )
        case events.ToolRequested() | run_events.ApprovalRequested():
            attempt = getattr(event, "attempt", 1)
            args = _json.encode(event.args).decode()
            text = f"{event.name} {args}" + (
                f" (attempt {attempt})" if attempt > 1 else ""
            )
        case events.ToolResulted():
            text = ("ok: " + event.output) if event.ok else f"error: {event.error}"
        case run_events.ApprovalDecided():
            text = "approved" if event.approved else f"denied: {event.reason}"
        case run_events.SystemNoteAdded():
            text = f"{event.reason}: {event.content}"
        case run_events.NoteRecorded():
            text = f"{event.category}: {event.content}"
        case run_events.DecisionRecorded():
            text = event.content
        case run_events.OutputUpdated():
            text = f"{event.mode}: {event.text}"
        case run_events.MessageSent():
            text = event.text
        case run_events.SubagentsSpawned():
            text = ", ".join(c.run_id for c in event.children)
        case events.ChildFinished():
            text = f"{event.stream} {event.status}: {event.output}"
        case run_events.RunSlept():
            text = f"until {iso_time(event.wake_at)}" + (
                f" ({event.reason})" if event.reason else ""
            )
        case events.EffectClaimed():
            text = f"{event.request_id} by {event.worker} until {iso_time(event.until)}"
        case events.WakeDue():
            text = event.timer_id
        case run_events.RunResumed():
            text = event.reason
        case run_events.RunCompleted():
            text = f"{event.reason}: {event.output}"
        case run_events.RunFailed() | run_events.RunCancelled():
            text = event.reason
        case _:
            text = _fields(event)
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def _fields(event: events.Event) -> str:
    """An event no case above knows (another kind's): its fields but the
    time, as compact JSON; empty for an event that carries nothing else."""
    fields = msgspec.structs.asdict(event)
    fields.pop("at", None)
    return _json.encode(fields).decode() if fields else ""
