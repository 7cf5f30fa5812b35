"""What a question about one file answers: ``why`` (``Explanation``) and ``lineage``
(``Relative``, ``FileLineage``).

Part of the vocabulary (``model``), kept in a module of its own because only those
questions make these values: a refresh, which every command makes, never imports it,
and does not pay the ~2 ms that creating three frozen dataclasses costs.  ``provgraph``
and ``api`` still give them by name (``from provgraph import Explanation``), importing this
module when first asked; ``model`` does not, so that the vocabulary imports nothing above it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from .model import Edge, NodeStatus, Problem, StaleEntry

__all__ = ["Explanation", "FileLineage", "Relative"]


@dataclass(frozen=True, slots=True)
class Explanation:
    """Everything ``why`` says about one file."""

    path: str
    status: NodeStatus | None
    """None when the file takes no part in any derivation."""
    sources: tuple[Edge, ...]
    """The file's own declared sources, as they compare now."""
    stale: StaleEntry | None
    stale_sources: tuple[str, ...]
    """Sources of this file that are themselves stale (staleness flowing through)."""
    derived_from_it: tuple[str, ...]
    """Files that declare this file as a source."""
    in_cycles: tuple[tuple[str, ...], ...]
    problems: tuple[Problem, ...] = ()
    """What could not be honoured in this file's declaration (a broken frontmatter,
    a refused entry): why it may declare fewer sources than it says."""


@dataclass(frozen=True, slots=True)
class Relative:
    """A file related to the one asked about, and how."""

    path: str
    status: NodeStatus
    chain: tuple[str, ...]
    """A shortest derivation chain, always written upstream first:
    ``(source, ..., derived)``."""

    @property
    def distance(self) -> int:
        """1 for a direct source or derived file, 2 through one file, and so on."""
        return len(self.chain) - 1


@dataclass(frozen=True, slots=True)
class FileLineage:
    """Everything ``provgraph lineage`` and an agent's lineage tool say about one file.

    The file's own explanation, then what derives from it: what an edit of
    the file will affect, and what to re-check after it.
    """

    explanation: Explanation
    descendants: tuple[Relative, ...]
    """Every file derived from it, directly or through others, nearest first."""
    stale: Mapping[str, StaleEntry]
    """The stale entry of each stale descendant, by path."""
    exists: bool
    """False when the file is not there and nothing names it as a source."""
