"""The lock's file name, and how to recognise a sync tool's conflict copy of it.

Shared by the lock's codec (``lockfile``) and the no-change rule (``nochange``);
it imports nothing, so the command's quick answer pays nothing for it.
"""

from __future__ import annotations

__all__ = ["LOCK_NAME", "is_sync_copy"]

LOCK_NAME = "provgraph.lock"
"""The portable lock's file name."""


def is_sync_copy(name: str) -> bool:
    """A copy of the lock that a sync tool made when two machines changed it at once:
    ``provgraph.sync-conflict-<when>-<device>.lock`` (Syncthing), ``provgraph (conflicted
    copy ...).lock`` (Dropbox) and the like."""
    return name != LOCK_NAME and name.startswith("provgraph") and name.endswith(".lock") and "conflict" in name
