"""The task kind (spec 002): a program of model calls in a small Lisp,
its subtasks its children.

Its package holds all of it: its events, decider and reactor, its read
models, its commands and its definition files; its ``kind`` module
exports `KIND`, its entry in a kind table (`steward.kinds.KINDS`).
"""
