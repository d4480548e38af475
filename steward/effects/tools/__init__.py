"""Tools a run may call: the registry, and the built-in ``files.*`` tools.

``ToolRegistry.with_builtins()`` is the registry a host starts from; add more
with ``registry.register(tool)``, declaring each with ``@tool("name")``.
"""

from steward.effects.tools.base import Tool, ToolContext, ToolFn, tool
from steward.effects.tools.registry import ToolOutcome, ToolRegistry

__all__ = ["Tool", "ToolContext", "ToolFn", "ToolOutcome", "ToolRegistry", "tool"]
