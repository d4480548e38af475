"""The effect handlers: what touches the world for the actors, and is not
an actor (DESIGN §1). The host starts them for the effects a committed step
asks for (`steward.actors.effects`) and feeds their results back as inputs.

- `llm`: model providers (Anthropic, OpenAI and compatible, the scripted
  model), their limits and retries, and the model call as an effect;
- `tools`: the tool registry, the built-in tools, MCP servers' tools, and
  the tool call as an effect;
- `timers`: wake-ups at a time, for any kind's timers.
"""
