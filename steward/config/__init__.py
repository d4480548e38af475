"""Settings: frozen Structs with defaults from the specs, read from TOML and env.

``load_settings()`` reads ``./steward.toml`` (if present) and ``STEWARD_*``
variables; ``settings.run_settings(profile)`` gives what a run records.
"""

from steward.config.loader import DEFAULT_PATH, ENV_PREFIX, load_settings
from steward.config.settings import (
    DEFAULT_SYSTEM_PROMPT,
    AgentProfile,
    ConsoleConfig,
    LogConfig,
    McpServerConfig,
    MetricsConfig,
    ModelConfig,
    RunConfig,
    Settings,
    ToolsConfig,
)

__all__ = [
    "DEFAULT_PATH",
    "DEFAULT_SYSTEM_PROMPT",
    "ENV_PREFIX",
    "AgentProfile",
    "ConsoleConfig",
    "LogConfig",
    "McpServerConfig",
    "MetricsConfig",
    "ModelConfig",
    "RunConfig",
    "Settings",
    "ToolsConfig",
    "load_settings",
]
