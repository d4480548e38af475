"""The settings steward runs with: frozen Structs whose defaults come from the specs.

Each field names the spec constant it takes its default from. ``load_settings``
fills them from ``steward.toml`` and ``STEWARD_*`` environment variables.
"""

from __future__ import annotations

import fnmatch
from typing import Annotated, Literal

import msgspec

from steward.actors.run.events import LATEST_REVISION, RunSettings
from steward.actors.session.events import ModelBudget, SessionSettings
from steward.actors.workflow.events import DEFAULT_MAX_STEPS
from steward.errors import ConfigError
from steward.events.protocol import ToolSpec

__all__ = [
    "DEFAULT_SYSTEM_PROMPT",
    "AgentProfile",
    "ConsoleConfig",
    "LogConfig",
    "McpServerConfig",
    "MetricsConfig",
    "OutboundConfig",
    "ModelConfig",
    "OtelConfig",
    "RunConfig",
    "Settings",
    "ToolsConfig",
]

DEFAULT_SYSTEM_PROMPT = (
    "You are Clifford, a very skilled and highly complex AI-Assistant!"
)
"""Clifford's ``DEFAULT_SYSTEM_PROMPT``, its spelling corrected ("Assistent"
until then). A run records its system prompt when it is created
(``RunCreated.settings``, and a session its turns' at open), so runs and
sessions recorded with the old spelling keep it: they replay, verify and go
on with the prompt they began with. It is no event field's default, so no
pinned default (``tests/golden/defaults.json``) changed."""

Positive = Annotated[int, msgspec.Meta(ge=1)]
NonNegative = Annotated[int, msgspec.Meta(ge=0)]
Seconds = Annotated[float, msgspec.Meta(gt=0)]
Port = Annotated[int, msgspec.Meta(ge=0, le=65535)]


class _Section(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Base of every settings table: frozen, keyword-only, strict about keys."""


class RunConfig(_Section, frozen=True, kw_only=True):
    """``[run]``: the limits and prompt of the run loop."""

    max_iterations: Positive = 20
    """Model calls a run may make before it fails (Clifford ``runMaxIterations``)."""

    transcript_limit: Positive = 50
    """Transcript entries shown to the model (Clifford ``runTranscriptLimit``)."""

    transcript_token_limit: Positive = 1200
    """Token budget of the transcript block (Clifford ``runTranscriptTokenLimit``)."""

    max_json_retries: NonNegative = 1
    """Corrections asked for after an invalid JSON action (Clifford
    ``runMaxJsonRetries``)."""

    max_tool_retries: NonNegative = 1
    """Retries of a failed tool call (Clifford ``runMaxToolRetries``)."""

    max_turns_per_context: Positive = 60
    """Turns before a conversation is compacted (Clifford ``maxTurnsPerContext``)."""

    memory_writer_max_messages: Positive = 40
    """Messages the memory writer reads (Clifford ``memoryWriterMaxMessages``)."""

    max_tool_call_rounds: Positive = 10
    """Native tool-calling rounds per model turn (Klaw ``maxToolCallRounds``)."""

    planning_gate: bool = True
    """Ask for requirements and a plan note before the first tool call (Clifford
    planning gate)."""

    subagent_conversation_limit: Positive = 40
    """Conversation messages a subagent sees (Clifford run processor, limit 40)."""

    token_budget: Positive | None = None
    """Tokens (input + output) one run may use; none means unlimited."""

    cost_budget_usd: Annotated[float, msgspec.Meta(gt=0)] | None = None
    """US dollars one run may spend on model calls (at the models' prices)."""

    budget_policy: Literal["fail", "pause"] = "fail"
    """When a run's budget is spent before a model call: ``fail`` the run, or
    ``pause`` it until ``steward runs approve`` (lifts the budget) or ``deny``."""

    system_prompt: str = DEFAULT_SYSTEM_PROMPT
    """The system prompt of a profile that sets none (Clifford
    ``DEFAULT_SYSTEM_PROMPT``)."""


class LogConfig(_Section, frozen=True, kw_only=True):
    """``[log]``: where the event log lives."""

    url: str = ".steward/steward.db"
    """The SQLite file, as a path or ``sqlite:///path`` (relative to the working
    directory)."""

    synchronous: Literal["NORMAL", "FULL", "OFF"] = "NORMAL"
    """SQLite ``PRAGMA synchronous``; ``NORMAL`` with WAL survives a process crash,
    ``FULL`` also a power loss."""

    claim_seconds: Seconds = 300.0
    """On a shared (``nats://``) log, how long a worker's claim on a model or
    tool call lasts; the worker renews it while the call runs, and a call
    whose worker died is retaken after this. At least the longest call a
    worker may make (see `Settings.check_claims`)."""

    lease_seconds: Seconds = 10.0
    """On a shared (``nats://``) log, how long a worker's hold on its
    partitions lasts without a heartbeat (one every quarter of it): a worker
    that dies hands its share over after this, one that joins is given its
    share within about two heartbeats (docs/jetstream.md)."""

    projections: str | None = None
    """The SQLite file of the projections when the log is on JetStream
    (``nats://...``); default ``.steward/projections.db``. An embedded log keeps
    its projections in its own file."""


class ToolsConfig(_Section, frozen=True, kw_only=True):
    """``[tools]``: the sandbox the built-in tools work in."""

    workspace: str = "."
    """Directory the ``files.*`` tools are confined to."""

    output_limit: Positive = 16384
    """Characters of a tool's output kept; the rest is cut and marked truncated."""

    timeout: Seconds = 30.0
    """Seconds a tool call may take before it fails as timed out."""

    require_approval: list[str] = []
    """Tools whose every call waits for a person's ``steward runs approve`` (or
    ``deny``) before it runs, e.g. ``["files.write"]``; each must be a built-in
    tool (a tool registered in code declares ``requires_approval`` itself)."""


class McpServerConfig(_Section, frozen=True, kw_only=True):
    """``[mcp.<name>]``: a Model Context Protocol server whose tools runs,
    sessions, phases and tasks may call as ``<name>.<tool>``.

    Give ``command`` (a server started as a subprocess, spoken to over its
    stdin and stdout) or ``url`` (streamable HTTP), not both. ``${VAR}`` in
    ``env`` and ``headers`` is read from the environment when the server is
    started, so a secret stays out of the file and out of every event.
    """

    command: str | None = None
    """The program that starts a stdio server, e.g. ``"python"``."""
    args: list[str] = []
    """Its arguments, e.g. ``["examples/mcp/notes_server.py"]``."""
    env: dict[str, str] = {}
    """Variables added to the server's environment (``${VAR}`` expanded)."""
    url: str | None = None
    """A streamable HTTP server's endpoint, e.g. ``http://127.0.0.1:8000/mcp``."""
    headers: dict[str, str] = {}
    """HTTP headers sent with each request (``${VAR}`` expanded), e.g.
    ``{ Authorization = "Bearer ${NOTES_TOKEN}" }``."""
    tools: list[str] | None = None
    """The server's tools offered, by their own names; ``None`` offers all."""
    deny: list[str] = []
    """The server's tools never offered or called, by their own names."""
    require_approval: bool | list[str] = False
    """``true``: every call waits for ``steward runs approve``; a list: those
    tools' calls do."""
    timeout: Seconds | None = None
    """Seconds a call may take; unset takes ``[tools] timeout``."""
    idempotent: bool = False
    """Whether a call may be made again when the host died during it: ``true``
    retries it on the next host; ``false`` records it as failed with its
    outcome unknown, for the model to decide."""

    def __post_init__(self) -> None:
        if (self.command is None) == (self.url is None):
            raise ValueError("give command (a stdio server) or url (HTTP), one of them")
        if self.command is not None and self.headers:
            raise ValueError("headers are for an HTTP server (url); this one is stdio")
        if self.url is not None and (self.args or self.env):
            raise ValueError("args and env are for a stdio server (command)")


class OtelConfig(_Section, frozen=True, kw_only=True):
    """``[otel]``: OpenTelemetry traces of the hosts (``pip install
    'steward[otel]'``)."""

    exporter: Literal["none", "console", "otlp"] | None = None
    """Where spans go: ``otlp`` (with ``opentelemetry-exporter-otlp-proto-http``
    installed), ``console`` (standard output), ``none``; unset reads
    ``OTEL_TRACES_EXPORTER`` (none when that is unset too)."""
    endpoint: str | None = None
    """The OTLP endpoint; unset reads ``OTEL_EXPORTER_OTLP_ENDPOINT``."""


class MetricsConfig(_Section, frozen=True, kw_only=True):
    """``[metrics]``: the Prometheus endpoint of ``steward serve`` and ``worker``."""

    port: Port | None = None
    """TCP port serving ``/metrics``; ``None`` (the default) serves none, ``0``
    takes any free port."""

    address: str = "127.0.0.1"
    """Address the endpoint listens on; the default keeps it to this machine,
    ``0.0.0.0`` serves every interface (for a Prometheus on another host)."""


class OutboundConfig(_Section, frozen=True, kw_only=True):
    """``[outbound]``: the JetStream stream that keeps what steward tells
    services (``steward.outbound.<channel>``), on a ``nats://`` log."""

    max_age_seconds: Seconds = 7 * 24 * 3600.0
    """How long an outbound message is kept for a service's durable
    consumer to read (default 7 days)."""

    duplicate_window_seconds: Seconds = 600.0
    """How long JetStream remembers an outbound message's id
    (``Nats-Msg-Id``, its event's id), so that one published again after a
    crash or a takeover is stored once (default 10 minutes)."""

    stream: str = "STEWARD_OUTBOUND"
    """The stream's name; it is made on start when missing (an existing one
    is used as it is, so an operator may change its limits)."""


class ConsoleConfig(_Section, frozen=True, kw_only=True):
    """``[console]``: the web page of ``steward console``."""

    port: Port = 8080
    """TCP port the console listens on; ``0`` takes any free port."""

    address: str = "127.0.0.1"
    """Address the console listens on; the default keeps it to this
    machine. Any other needs a ``token``."""

    token: str | None = None
    """A secret every page and action must give (``?token=`` once, then a
    cookie; or an ``Authorization: Bearer`` header); set it from the
    environment, ``STEWARD_CONSOLE_TOKEN``. ``None``: no token is asked."""

    serve: bool = False
    """Whether ``steward serve`` serves the console too (on ``port`` and
    ``address``), over its own log, projections and host."""


class ModelConfig(_Section, frozen=True, kw_only=True):
    """``[models.<name>]``: one model and the provider that serves it."""

    provider: str = "scripted"
    """Provider that serves the model: ``scripted``, ``anthropic`` or ``openai``
    (also for OpenAI-compatible servers such as vLLM and Ollama)."""

    model: str = ""
    """The provider's model id; empty means the provider's own name (``anthropic``
    and ``openai`` need one)."""

    script: str | None = None
    """Path of a scripted-model script (YAML or JSON), for ``provider =
    "scripted"``."""

    base_url: str | None = None
    """Endpoint of an OpenAI-compatible or proxied API; ``None`` uses the
    provider's default."""

    timeout: Seconds = 60.0
    """Seconds one model call may take."""

    max_retries: NonNegative = 2
    """Retries of a retryable provider failure (rate limit, transport, timeout)."""

    temperature: Annotated[float, msgspec.Meta(ge=0)] | None = None
    """Sampling temperature; ``None`` uses the provider's default."""

    max_tokens: Positive | None = None
    """Cap on tokens in one reply; ``None`` uses the provider's default (4096 for
    ``anthropic``, which requires one)."""

    api_key_env: str | None = None
    """Environment variable holding the API key; ``None`` uses the provider's own
    (``ANTHROPIC_API_KEY``, ``OPENAI_API_KEY``)."""

    api_key: str | None = None
    """The API key itself, used instead of ``api_key_env``; prefer the variable so
    the key stays out of files. Never shown in ``repr``, events or logs."""

    context_budget: Positive | None = None
    """Tokens the model's context window holds; ``None`` when unknown."""

    input_price_per_mtok: Annotated[float, msgspec.Meta(ge=0)] = 0.0
    """US dollars per million input (prompt) tokens; 0 counts them as free."""

    output_price_per_mtok: Annotated[float, msgspec.Meta(ge=0)] = 0.0
    """US dollars per million output (reply) tokens; 0 counts them as free."""

    stream: bool = True
    """Stream the reply (server-sent events); ``false`` asks for one JSON reply,
    for servers that cannot stream."""

    record_stream: bool = False
    """Record every normalized stream event of each attempt (sequence-numbered)
    in the log, as `LlmStreamRecorded`; the reply is recorded once either way."""

    requests_per_minute: Positive | None = None
    """Calls per minute this model may take; more wait (they never fail for it)."""

    tokens_per_minute: Positive | None = None
    """Prompt tokens (estimated as characters / 4) per minute; more wait."""

    echo_reasoning: bool | None = None
    """Send the reasoning a reply carried back with it in the next requests
    of its tool loop (never across user messages), as some APIs refuse a
    tool loop's turn without it: DeepSeek's ``reasoning_content``,
    Anthropic's thinking blocks. ``None``: the provider's default, on for
    ``anthropic``, off for ``openai`` (set it for DeepSeek's API)."""

    def __repr__(self) -> str:
        # The key must never reach a log line, a traceback or an error message.
        parts = []
        for name in self.__struct_fields__:
            value = getattr(self, name)
            shown = "'***'" if name == "api_key" and value is not None else repr(value)
            parts.append(f"{name}={shown}")
        return f"ModelConfig({', '.join(parts)})"


class AgentProfile(_Section, frozen=True, kw_only=True):
    """``[agents.<name>]``: how runs started with this profile behave."""

    model: str = "default"
    """Name of the ``[models.<name>]`` table the profile talks to."""

    protocol: Literal["json", "native"] = "json"
    """``json``: the model answers with one JSON action (Clifford); ``native``: it
    calls tools through the provider's tool calling (Klaw)."""

    system_prompt: str | None = None
    """The profile's system prompt; ``None`` uses ``run.system_prompt``."""

    tools: list[str] | None = None
    """Names of the tools the profile may call; ``None`` allows every tool."""

    max_tool_call_rounds: Positive | None = None
    """Overrides ``run.max_tool_call_rounds`` for this profile."""

    policy: Literal["default", "staged"] = "default"
    """``staged``: runs go through the stages of spec 004 (warmup, act, tool
    follow-up, micro step, delivery check, QA review), each owning its tools
    and prompts; needs ``protocol = "native"``."""

    mode: Literal["agent", "chat"] = "agent"
    """A staged run's mode (``steward run --mode`` sets it per run)."""

    reasoning: bool = False
    """Whether a staged run reasons (``steward run --reasoning on|off``)."""

    qa: bool = True
    """Whether a staged run ends with its advisory QA review."""

    prompts: str | None = None
    """A directory of a staged run's prompts of your own (Markdown, as
    `steward prompts list` names them); a prompt it lacks is the shipped one."""

    mcp: list[str] = []
    """The ``[mcp.<name>]`` servers whose tools (``NAME.tool``) the profile's
    runs are offered, beside the built-in tools its ``tools`` list keeps."""


def _default_models() -> dict[str, ModelConfig]:
    return {"default": ModelConfig()}


class SessionConfig(_Section, frozen=True, kw_only=True):
    """``[session]``: chat sessions (Klaw's engine loop, spec 003)."""

    debounce_ms: NonNegative = 1500
    """Quiet time after a chat's last message before its buffered messages
    start a turn (Klaw ``processing.debounceMs``)."""
    profile: str = "default"
    """The agent profile a session's turns run with; its model is the
    session's first."""
    default_budget_tokens: Positive = 8000
    """The context budget of a model with no ``context_budget``."""
    sliding_window: Positive = 20
    """The newest messages of a segment a turn's context shows, at most."""
    subagent_window: Positive = 5
    """The same for a subagent's context (Klaw ``subagentWindow``)."""
    max_message_chars: Positive = 32_768
    """The longest message a session takes; a longer one is answered with
    the limit and starts no turn."""
    max_turns_per_context: Positive = 60
    """Turns in a session's window before its older half is compacted and
    handed to the memory writer (Clifford ``maxTurnsPerContext``)."""
    memory_writer_max_messages: Positive = 40
    """The newest compacted messages the memory writer reads (Clifford
    ``memoryWriterMaxMessages``)."""
    cross_channel_limit: NonNegative = 12
    """Messages from the sender's other chats a turn's context shows
    (Clifford ``CROSS_CHANNEL_MESSAGE_LIMIT``); 0 shows none."""
    subagent_model: str | None = None
    """The ``[models]`` name a session's subagents and schedules use when
    they name none (Klaw ``routing.tasks.subagent``); unset: the session's
    model."""
    direct_chats: list[str] = msgspec.field(default_factory=list)
    """Sessions (ids or shell patterns, as ``cli:quick`` or ``telegram:*``)
    whose turns are one model call without tools (Clifford's direct chat)
    instead of a run; fixed when a session opens."""


def _default_agents() -> dict[str, AgentProfile]:
    return {"default": AgentProfile()}


class WorkflowConfig(_Section, frozen=True, kw_only=True):
    """``[workflow]``: workflow runs (Alphred, spec 001)."""

    branch_template: str = "steward/{tree-key}/{run-id}"
    """A worktree branch's name when neither ``--branch`` nor the file's
    ``[git] branch_template`` gives one (Alphred's ``ALPHRED_BRANCH_TEMPLATE``
    is ``STEWARD_WORKFLOW_BRANCH_TEMPLATE``); tokens: ``{tree-key}``,
    ``{run-id}``, ``{node-key}``, ``{issue-id}``, ``{timestamp}``,
    ``{short-hash}``, ``{date}``."""
    worktrees: str = ".steward/worktrees"
    """The directory worktrees are made in, one per workflow run."""
    max_steps: Positive = DEFAULT_MAX_STEPS
    """Phase executions (retries included) a workflow run may start, at most,
    when its file's ``[workflow] max_steps`` gives none; the run fails at the
    bound, so a loop with no way out ends (Alphred's ``executeRun``
    ``maxSteps``)."""


class TaskConfig(_Section, frozen=True, kw_only=True):
    """``[task]``: task programs (spec 002)."""

    templates: str = "templates"
    """The directory of atomic template files (TOML or YAML) a program may
    call, when ``steward task run`` is given no ``--templates``; none is
    fine (a program may define its own with ``defatom``)."""
    model: str | None = None
    """The ``[models.<name>]`` table of calls whose template names none
    (``default`` when unset)."""
    max_depth: Positive = 5
    """Subtasks nest this deep at most (a request may ask for less)."""
    max_turns: Positive = 8
    """Model calls one atomic call may make, unless its template says."""
    max_tokens: Positive | None = None
    """Tokens (in and out) one atomic call may use, unless its template says."""
    max_calls: Positive = 1000
    """Calls (atomic and tool) one program may make."""
    scorer: str | None = None
    """``module:function``, a template scorer of your own for subtask
    requests: ``(Template, SubtaskRequest) -> float``, the highest wins
    (`steward.actors.task.templates.score` when unset). It must be pure, and
    stay the same for a task's life: `replay --verify` re-decides with it."""
    mcp: list[str] = []
    """The ``[mcp.<name>]`` servers whose tools a program's templates may
    name (``NAME.tool``)."""


class Settings(_Section, frozen=True, kw_only=True):
    """Everything configurable, as read from ``steward.toml`` and ``STEWARD_*``."""

    run: RunConfig = msgspec.field(default_factory=RunConfig)
    """``[run]``: limits and prompt of the run loop."""

    log: LogConfig = msgspec.field(default_factory=LogConfig)
    """``[log]``: where the event log lives."""

    tools: ToolsConfig = msgspec.field(default_factory=ToolsConfig)
    """``[tools]``: the tool sandbox."""

    metrics: MetricsConfig = msgspec.field(default_factory=MetricsConfig)
    """``[metrics]``: the Prometheus endpoint."""

    console: ConsoleConfig = msgspec.field(default_factory=ConsoleConfig)
    """``[console]``: the web page of ``steward console``."""

    outbound: OutboundConfig = msgspec.field(default_factory=OutboundConfig)
    """``[outbound]``: the stream that keeps outbound messages for services."""

    otel: OtelConfig = msgspec.field(default_factory=OtelConfig)
    """``[otel]``: OpenTelemetry traces."""

    models: dict[str, ModelConfig] = msgspec.field(default_factory=_default_models)
    """``[models.<name>]``: the models profiles may use; ``default`` is the
    scripted model unless configured."""

    agents: dict[str, AgentProfile] = msgspec.field(default_factory=_default_agents)
    """``[agents.<name>]``: run profiles; ``default`` is used when none is named."""

    channels: dict[str, str] = msgspec.field(default_factory=dict)
    """``[channels]``: channel name → agent profile; with a ``nats://`` log,
    ``steward serve`` gives each message on ``steward.inbound.<channel>`` to
    its chat's session, opened with that profile (unknown channels are
    refused)."""

    llm_max_concurrency: Positive = 2
    """Model calls in flight at once per process (Klaw ``maxConcurrentLlm``)."""

    session: SessionConfig = msgspec.field(default_factory=SessionConfig)
    """``[session]``: chat sessions, their debounce and context windows."""

    workflow: WorkflowConfig = msgspec.field(default_factory=WorkflowConfig)
    """``[workflow]``: workflow runs' worktree branches and directory."""

    task: TaskConfig = msgspec.field(default_factory=TaskConfig)
    """``[task]``: task programs' templates, model and limits."""

    mcp: dict[str, McpServerConfig] = msgspec.field(default_factory=dict)
    """``[mcp.<name>]``: Model Context Protocol servers whose tools profiles
    (``[agents.<name>] mcp``) and task programs (``[task] mcp``) may use."""

    def profile(self, name: str = "default") -> AgentProfile:
        """The ``[agents.<name>]`` profile; a ``ConfigError`` lists the known ones."""
        try:
            return self.agents[name]
        except KeyError:
            known = ", ".join(sorted(self.agents)) or "none"
            raise ConfigError(
                "settings",
                f"agents.{name}",
                f"no such agent profile; known profiles: {known}",
            ) from None

    def model_for(self, profile: str = "default") -> ModelConfig:
        """The ``[models.<name>]`` table the profile ``profile`` talks to."""
        agent = self.profile(profile)
        try:
            return self.models[agent.model]
        except KeyError:
            known = ", ".join(sorted(self.models)) or "none"
            raise ConfigError(
                "settings",
                f"agents.{profile}.model",
                f"names model {agent.model!r}, which has no [models.{agent.model}] "
                f"table; known models: {known}",
            ) from None

    def check_claims(self) -> None:
        """Refuse a ``[log] claim_seconds`` shorter than the longest call a
        worker may make: a model's ``timeout × (max_retries + 1)`` or
        ``[tools] timeout`` (a claim renewed while its call runs still must
        not lapse while its worker is alive but cannot write)."""
        seconds = self.log.claim_seconds
        for name, model in sorted(self.models.items()):
            longest = model.timeout * (model.max_retries + 1)
            if seconds < longest:
                raise ConfigError(
                    "settings",
                    "log.claim_seconds",
                    f"{seconds:g} is below models.{name}.timeout × (max_retries + "
                    f"1) = {model.timeout:g} × {model.max_retries + 1} = "
                    f"{longest:g}: a claim could lapse while its call still runs; "
                    "raise [log] claim_seconds or lower the model's timeout or "
                    "max_retries",
                )
        if seconds < self.tools.timeout:
            raise ConfigError(
                "settings",
                "log.claim_seconds",
                f"{seconds:g} is below tools.timeout = {self.tools.timeout:g}: a "
                "claim could lapse while its tool call still runs; raise [log] "
                "claim_seconds or lower [tools] timeout",
            )

    def session_settings(
        self,
        tools: tuple[ToolSpec, ...] = (),
        profile: str | None = None,
        session_id: str = "",
    ) -> SessionSettings:
        """The ``SessionSettings`` session ``session_id`` records when it
        opens: ``[session]``, the configured models and the run settings of
        agent ``profile`` (default ``[session] profile``; a channel's sessions
        use the channel's)."""
        config = self.session
        profile = profile or config.profile
        agent = self.profile(profile)
        if config.subagent_model is not None and config.subagent_model not in (
            self.models
        ):
            known = ", ".join(sorted(self.models)) or "none"
            raise ConfigError(
                "settings",
                "session.subagent_model",
                f"names model {config.subagent_model!r}, which has no "
                f"[models.{config.subagent_model}] table; known models: {known}",
            )
        return SessionSettings(
            debounce_seconds=config.debounce_ms / 1000,
            model=agent.model,
            models=tuple(
                ModelBudget(
                    name=name,
                    model=model.model or model.provider,
                    context_budget=model.context_budget,
                )
                for name, model in sorted(self.models.items())
            ),
            default_budget_tokens=config.default_budget_tokens,
            sliding_window=config.sliding_window,
            subagent_window=config.subagent_window,
            run=self.run_settings(profile, tools),
            profile=profile,
            max_message_chars=config.max_message_chars,
            max_turns_per_context=config.max_turns_per_context,
            memory_writer_max_messages=config.memory_writer_max_messages,
            cross_channel_limit=config.cross_channel_limit,
            subagent_model=config.subagent_model,
            direct=any(fnmatch.fnmatchcase(session_id, p) for p in config.direct_chats),
        )

    def servers(self, names: list[str], key: str) -> list[str]:
        """``names``, each a ``[mcp.<name>]`` server.

        Raises:
            ConfigError: one is not configured (named by ``key``).
        """
        for n, name in enumerate(names):
            if name not in self.mcp:
                known = ", ".join(sorted(self.mcp)) or "none"
                raise ConfigError(
                    "settings",
                    f"{key}[{n}]",
                    f"no [mcp.{name}] server is configured; known servers: {known}",
                )
        return names

    def serves(self, tool: str) -> bool:
        """Whether ``tool`` is an ``[mcp.<name>]`` server's (``NAME.tool``)."""
        server, dot, _ = tool.partition(".")
        return bool(dot) and server in self.mcp

    def run_settings(
        self, profile: str = "default", tools: tuple[ToolSpec, ...] = ()
    ) -> RunSettings:
        """The ``RunSettings`` a run started with ``profile`` records.

        ``tools`` are the specs the host offers: the profile keeps the
        built-in ones its ``tools`` list names (all without a list) and those
        of the ``[mcp]`` servers its ``mcp`` list names; those in ``[tools]
        require_approval`` ask for approval.
        """
        agent = self.profile(profile)
        model = self.model_for(profile)
        servers = frozenset(self.servers(agent.mcp, f"agents.{profile}.mcp"))
        tools = tuple(
            t
            for t in tools
            if (
                t.name.partition(".")[0] in servers
                if self.serves(t.name)
                else agent.tools is None or t.name in agent.tools
            )
        )
        if self.tools.require_approval:
            approve = frozenset(self.tools.require_approval)
            tools = tuple(
                msgspec.structs.replace(t, requires_approval=True)
                if t.name in approve
                else t
                for t in tools
            )
        run = self.run
        if agent.policy == "staged" and agent.protocol != "native":
            raise ConfigError(
                "settings",
                f"agents.{profile}.policy",
                'a staged profile calls tools natively: set protocol = "native"',
            )
        return RunSettings(
            policy=agent.policy,
            mode=agent.mode,
            reasoning=agent.reasoning,
            qa=agent.qa,
            project_root=self.tools.workspace if agent.policy == "staged" else "",
            model=model.model or model.provider,
            system_prompt=(
                run.system_prompt
                if agent.system_prompt is None
                else agent.system_prompt
            ),
            protocol=agent.protocol,
            tools=tools,
            temperature=model.temperature,
            max_tokens=model.max_tokens,
            max_iterations=run.max_iterations,
            transcript_limit=run.transcript_limit,
            transcript_token_limit=run.transcript_token_limit,
            max_json_retries=run.max_json_retries,
            max_tool_retries=run.max_tool_retries,
            max_tool_call_rounds=(
                run.max_tool_call_rounds
                if agent.max_tool_call_rounds is None
                else agent.max_tool_call_rounds
            ),
            planning_gate=run.planning_gate,
            subagent_conversation_limit=run.subagent_conversation_limit,
            token_budget=run.token_budget,
            cost_budget_usd=run.cost_budget_usd,
            budget_policy=run.budget_policy,
            profiles=tuple(sorted(self.agents)),
            revision=LATEST_REVISION,
        )
