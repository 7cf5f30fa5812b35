"""provgraph: tell an agent which memory files were derived from files that changed afterwards.

Files declare ``derived_from`` in their frontmatter; provgraph records the
sha256 of each source at derivation and marks every transitive descendant of
a changed source, with the originating change and its date.  It never edits,
regenerates, hides or deletes a memory file.
"""

from __future__ import annotations

from .api import Memory, NotDerived, OptionsDiffer, RootError, find_root
from .model import (
    VERSION,
    Cause,
    Edge,
    EdgeStatus,
    Explanation,
    NodeStatus,
    Problem,
    ProblemKind,
    Relative,
    Report,
    StaleEntry,
)
from .store.lock import NewerLock
from .store.state import StateError

__version__ = VERSION

__all__ = [
    "Cause",
    "Edge",
    "EdgeStatus",
    "Explanation",
    "Memory",
    "NewerLock",
    "NodeStatus",
    "NotDerived",
    "OptionsDiffer",
    "Problem",
    "ProblemKind",
    "Relative",
    "Report",
    "RootError",
    "StaleEntry",
    "StateError",
    "find_root",
]
