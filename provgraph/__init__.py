"""provgraph: tell an agent which memory files were derived from files that changed afterwards.

Files declare ``derived_from`` in their frontmatter; provgraph records the
sha256 of each source at derivation and marks every transitive descendant of
a changed source, with the originating change and its date.  It never edits,
regenerates, hides or deletes a memory file.
"""

from __future__ import annotations

__version__ = "0.2.0"
"""Defined before the imports below: the cache is keyed by it (``store.cache``)."""

from .api import Memory, NotDerived, OptionsDiffer, RootError, find_root  # noqa: E402
from .model import Cause, Edge, EdgeStatus, Explanation, NodeStatus, Problem, ProblemKind, Relative, Report, StaleEntry  # noqa: E402
from .store.lock import NewerLock  # noqa: E402
from .store.state import StateError  # noqa: E402

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
