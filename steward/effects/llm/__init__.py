"""Model providers: the normalized stream contract, the registry, the scripted model.

``make_provider(name, config)`` builds a registered provider; ``collect`` drains
its stream into one ``ResultEvent`` and enforces the contract.
"""

from steward.effects.llm.base import (
    AssistantDelta,
    Provider,
    RequestInfo,
    ResultEvent,
    StreamEvent,
    SystemEvent,
    ToolResultEvent,
    ToolUseEvent,
    UsageEvent,
    collect,
)
from steward.effects.llm.registry import (
    PROVIDERS,
    ModelRouter,
    ProviderFactory,
    UnknownProviderError,
    make_provider,
)
from steward.effects.llm.scripted import (
    Reply,
    ReplyError,
    ReplyFn,
    Script,
    ScriptedProvider,
    estimate_usage,
    load_script,
)

__all__ = [
    "PROVIDERS",
    "AssistantDelta",
    "ModelRouter",
    "Provider",
    "ProviderFactory",
    "Reply",
    "ReplyError",
    "ReplyFn",
    "RequestInfo",
    "ResultEvent",
    "Script",
    "ScriptedProvider",
    "StreamEvent",
    "SystemEvent",
    "ToolResultEvent",
    "ToolUseEvent",
    "UnknownProviderError",
    "UsageEvent",
    "collect",
    "estimate_usage",
    "load_script",
    "make_provider",
]
