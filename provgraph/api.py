"""The Python API: open a memory root, refresh, stamp, explain.

``Memory`` ties the pipeline together: it takes the lock, loads the state,
scans (or sees that nothing changed and reuses the last result), reconciles
stamps, propagates, saves.  Every method that reads the clock takes ``now=``.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from . import queries
from .files import FileSource, LocalFiles, NotRegular, OutsideRoot
from .lineage import children_of, find_cycles, node_statuses, propagate, to_networkx
from .model import Edge, FileMeta, NodeStatus, Problem, Report, StaleEntry
from .queries import Relative
from .scan import RACY_WINDOW_NS, scan
from .stamps import reconcile
from .state import State, StateStore

if TYPE_CHECKING:
    import networkx as nx

__all__ = ["Explanation", "Memory", "NotDerived", "RootError", "find_root"]

STATE_DIR = ".provgraph"


class RootError(Exception):
    """The memory root does not exist or is not a folder."""

    def __init__(self, root: Path) -> None:
        super().__init__(f"memory root {root} is not a folder")
        self.root = root


class NotDerived(Exception):
    """``stamp`` was asked to record a re-derivation of files that declare no sources."""

    def __init__(self, paths: tuple[str, ...]) -> None:
        names = ", ".join(paths)
        super().__init__(f"not a derived file (no derived_from in its frontmatter): {names}")
        self.paths = paths


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


class Memory:
    """One memory root and provgraph's state for it.

    >>> memory = Memory("~/.agent/Memory")      # doctest: +SKIP
    >>> report = memory.refresh()               # doctest: +SKIP
    >>> [entry.path for entry in report.stale]  # doctest: +SKIP
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        state: str | os.PathLike[str] | None = None,
        files: FileSource | None = None,
        warn: Callable[[str], None] | None = None,
    ) -> None:
        self.root = Path(os.path.abspath(Path(root).expanduser()))
        if files is None:
            if not self.root.is_dir():
                raise RootError(self.root)
            files = LocalFiles(self.root)
        self.files = files
        self.state_path = Path(state) if state is not None else self.root / STATE_DIR / "state.json"
        self._store = StateStore(self.state_path, warn)

    def refresh(self, *, now: datetime | None = None) -> Report:
        """Scan the folder, update the stamps, and report what is stale."""
        return self._transaction(_clock(now), frozenset())

    def stamp(self, paths: Iterable[str], *, now: datetime | None = None) -> Report:
        """Record that each derived file in ``paths`` was just re-derived from its sources.

        Paths are root-relative.  Raises ``NotDerived`` (and stamps nothing)
        when one of them declares no sources.
        """
        wanted = frozenset(paths)
        return self._transaction(_clock(now), wanted)

    def explain(self, path: str, report: Report | None = None) -> Explanation:
        """What ``why`` prints: the file's sources, its causes and what derives from it."""
        report = report or self.refresh()
        statuses = node_statuses(report.edges, report.stale)
        sources = tuple(edge for edge in report.edges if edge.derived == path)
        return Explanation(
            path=path,
            status=statuses.get(path),
            sources=sources,
            stale=report.entry(path),
            stale_sources=tuple(edge.source for edge in sources if statuses.get(edge.source) is NodeStatus.STALE),
            derived_from_it=tuple(children_of(report.edges).get(path, ())),
            in_cycles=tuple(cycle for cycle in report.cycles if path in cycle),
        )

    def sources_of(self, path: str, *, transitive: bool = False, report: Report | None = None) -> tuple[Relative, ...]:
        """What ``path`` is derived from (every ancestor when ``transitive``), with chains."""
        return queries.sources_of(report or self.refresh(), path, transitive=transitive)

    def derived_from(self, path: str, *, transitive: bool = False, report: Report | None = None) -> tuple[Relative, ...]:
        """What is derived from ``path`` (every descendant when ``transitive``), with chains."""
        return queries.derived_from(report or self.refresh(), path, transitive=transitive)

    def stale_after_editing(self, source: str, *, report: Report | None = None) -> tuple[StaleEntry, ...]:
        """The stale files downstream of ``source``: what to re-check after editing it."""
        return queries.stale_after_editing(report or self.refresh(), source)

    def graph(self, report: Report | None = None) -> nx.DiGraph:
        """The lineage as a networkx DiGraph (see ``lineage.to_networkx``)."""
        report = report or self.refresh()
        return to_networkx(report.edges, report.stale, report.cycles)

    def _transaction(self, now: datetime, restamp: frozenset[str]) -> Report:
        with self._store.locked():
            state = self._store.load()
            started_ns = time.time_ns()
            listing, walk_problems = self.files.walk()
            walk_problems = sorted(set(walk_problems), key=lambda p: (p.path, p.kind.value, p.detail))
            if not restamp and self._unchanged(state, listing, tuple(walk_problems)):
                assert state.report is not None
                return replace(state.report, root=str(self.root), scanned_at=now)
            snapshot = scan(
                self.files, state.seen, state.scan_started_ns - RACY_WINDOW_NS, walked=(listing, walk_problems)
            )
            not_derived = tuple(sorted(path for path in restamp if path not in snapshot.declarations))
            if not_derived:
                raise NotDerived(not_derived)
            derivations, edges = reconcile(state.derivations, snapshot, now.timestamp(), restamp)
            report = Report(
                root=str(self.root),
                scanned_at=now,
                files=len(snapshot.files),
                edges=edges,
                stale=propagate(edges),
                cycles=find_cycles(edges),
                problems=snapshot.problems,
            )
            self._store.save(State(derivations, dict(snapshot.seen), started_ns, report, tuple(walk_problems)))
            return report

    def _unchanged(self, state: State, listing: dict[str, FileMeta], walk_problems: tuple[Problem, ...]) -> bool:
        """True when no file that the last result depends on can have changed.

        Every memory file and every source outside the listing must show the
        very metadata recorded when it was last read, and none may have been
        modified so close to that scan that equal metadata proves nothing.
        """
        report = state.report
        if report is None or not self.files.trusts_stat:
            return False
        if report.files != len(listing) or walk_problems != state.walk_problems:
            return False
        limit = state.scan_started_ns - RACY_WINDOW_NS
        seen = state.seen
        for path, meta in listing.items():
            old = seen.get(path)
            if old is None or old.meta != meta or meta.mtime_ns >= limit or meta.ctime_ns >= limit:
                return False
        for source in {edge.source for edge in report.edges} - listing.keys():
            try:
                meta = self.files.stat(source)
            except (OSError, OutsideRoot, NotRegular):
                return False
            old = seen.get(source)
            if (old.meta if old else None) != meta or (meta is not None and max(meta.mtime_ns, meta.ctime_ns) >= limit):
                return False
        return True


def _clock(now: datetime | None) -> datetime:
    if now is None:
        return datetime.now().astimezone()
    if now.tzinfo is None or now.utcoffset() is None:
        raise ValueError("now must be an aware datetime (with a time zone)")
    return now


def find_root(path: str | os.PathLike[str]) -> Path | None:
    """The nearest folder at or above ``path`` that holds ``.provgraph/`` or ``MEMORY.md``."""
    current = Path(path).absolute()
    if not current.is_dir():
        current = current.parent
    for folder in (current, *current.parents):
        if (folder / STATE_DIR).is_dir() or (folder / "MEMORY.md").is_file():
            return folder
    return None
