"""The workflow kind (spec 001): phases joined by guarded edges, each
phase a run.

Its package holds all of it: its events, decider and reactor, its read
models, its commands and its definition files; its ``kind`` module
exports `KIND`, its entry in a kind table (`steward.kinds.KINDS`).
"""
