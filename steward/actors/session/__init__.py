"""The session kind (spec 003): a chat with its memory, turns, schedules
and subagents.

Its package holds all of it: its events, decider and reactor, its read
models, its commands and its definition files; its ``kind`` module
exports `KIND`, its entry in a kind table (`steward.kinds.KINDS`).
"""
