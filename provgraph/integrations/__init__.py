"""Hooks for agent frameworks: each module appends provgraph's block where the framework builds its prompt."""
