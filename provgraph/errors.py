"""The errors provgraph raises for its user, in one family.

A caller (the command line, an integration) catches ``ProvgraphError`` and
shows its message as one line; anything else that escapes is a bug and keeps
its traceback, instead of passing for a user error.
"""

from __future__ import annotations

__all__ = ["PathRefused", "ProvgraphError"]


class ProvgraphError(Exception):
    """An error the user can act on; its message is one sentence that says what is wrong."""


class PathRefused(ProvgraphError):
    """A path provgraph will not read as a file (not regular, outside the root, its own state)."""
