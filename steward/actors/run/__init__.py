"""The run kind (spec 000): an agent's loop of model and tool calls, with
subagents, sleeps, approvals and staged prompts (spec 004).

Its package holds all of it: its events, decider and reactor, its read
models, its commands and its definition files; its ``kind`` module
exports `KIND`, its entry in a kind table (`steward.kinds.KINDS`).
"""
