"""provgraph: tell an agent which memory files were derived from files that changed afterwards.

Files declare ``derived_from`` in their frontmatter; provgraph records the
sha256 of each source at derivation and marks every transitive descendant of
a changed source, with the originating change and its date.  It never edits,
regenerates, hides or deletes a memory file.
"""

from __future__ import annotations

__version__ = "0.1.0"

TYPE_CHECKING = False
if TYPE_CHECKING:
    from .api import Memory, NotDerived, RootError, find_root
    from .explanations import Explanation, Relative
    from .model import Cause, Edge, EdgeStatus, NodeStatus, Problem, ProblemKind, Report, StaleEntry
    from .store.state import StateError

__all__ = [
    "Cause",
    "Edge",
    "EdgeStatus",
    "Explanation",
    "Memory",
    "NodeStatus",
    "NotDerived",
    "Problem",
    "ProblemKind",
    "Relative",
    "Report",
    "RootError",
    "StaleEntry",
    "StateError",
    "find_root",
]

_HOMES = {
    "api": ("Memory", "NotDerived", "RootError", "find_root"),
    "explanations": ("Explanation", "Relative"),
    "model": ("Cause", "Edge", "EdgeStatus", "NodeStatus", "Problem", "ProblemKind", "Report", "StaleEntry"),
    "store.state": ("StateError",),
}
_HOME = {name: module for module, names in _HOMES.items() for name in names}


def __getattr__(name: str) -> object:
    """The public names, imported when first used (PEP 562): the command line answers an
    unchanged folder without importing the API, and ``import provgraph`` stays cheap."""
    module = _HOME.get(name)
    if module is None:
        raise AttributeError(f"module 'provgraph' has no attribute {name!r}")
    from importlib import import_module

    value = getattr(import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
