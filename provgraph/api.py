"""The Python API: open a memory root, refresh, stamp, explain.

``Memory`` ties the pipeline together: it takes the lock, loads the state,
scans (or sees that nothing changed and reuses the last result), reconciles
stamps, propagates, saves.  Every method that reads the clock takes ``now=``.
"""

from __future__ import annotations

import os
from _thread import _local as thread_local  # what threading.local is, without importing threading (~1 ms a run)
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from datetime import datetime
from operator import attrgetter

import orjson

from . import nochange, queries
from .clock import current, wall_ns
from .codec import Corrupt, RowsAsSeen
from .errors import ProvgraphError, log_warning
from .files import RACY_WINDOW_NS, FileSource, LocalFiles, NotRegular, OutsideRoot
from .lineage import children_of, find_cycles, propagate, to_networkx
from .model import (
    Cause,
    Edge,
    EdgeStatus,
    Explanation,
    FileLineage,
    FileMeta,
    Problem,
    Relative,
    Report,
    SourceState,
    StaleEntry,
    broken_edges,
)
from .state import LOCK_NAME, STATE_DIR, State, StateError, StateStore, memory_files, memory_files_read
from .statefolder import LockBusy

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path
    from typing import Any

    import networkx as nx

    from . import incremental
    from .scan import Rescan, Seen


__all__ = ["DEFAULT_SOURCES_HEADING", "Explanation", "Memory", "NotDerived", "RootError", "find_root"]

DEFAULT_SOURCES_HEADING = "## Sources"
"""The heading whose links declare sources when the setting is asked for without one
(the command line's ``--sources-heading`` alone)."""
READ_WAIT = 2.0
"""Seconds a refresh waits for another process's exclusive lock before it answers from
a scan it does not save: a provgraph suspended while holding the lock (Ctrl-Z) must not
hang every agent start."""
WRITE_WAIT = 10.0
"""Seconds a stamp waits for the lock before it reports it held, as one error line."""


class RootError(ProvgraphError):
    """The memory root does not exist or is not a folder."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        from pathlib import Path  # only on an error: a refresh that goes well never makes a Path

        super().__init__(f"memory root {root} is not a folder")
        self.root = Path(root)


class NotDerived(ProvgraphError):
    """``stamp`` was asked to record a re-derivation of files that declare no sources."""

    def __init__(self, paths: tuple[str, ...]) -> None:
        from .render import safe_name  # the message reaches a terminal: names escaped like every other line

        names = ", ".join(map(safe_name, paths))
        super().__init__(f"not a derived file (no derived_from in its frontmatter): {names}")
        self.paths = paths


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
        progress: Callable[[int, int], None] | None = None,
        sources_heading: str | None = None,
        also_known_as: Iterable[str] = (),
        trust_cache: bool = True,
    ) -> None:
        """``progress(done, total)`` hears how far a scan that reads files has got
        (the no-change path reads none and never calls it).

        ``sources_heading`` (``"## Sources"``) makes the links under that heading
        of a memory file declare its sources; off by default.  ``also_known_as``
        are other absolute paths of this folder (where a sandboxed agent sees
        it): an entry starting with one of them, or with the root's own absolute
        path, means the file under the root.  ``trust_cache`` False reads and
        hashes every file on every refresh, for folders where content can change
        without moving a file's metadata (a write through ``mmap``)."""
        self._root = os.path.abspath(os.path.expanduser(os.fspath(root)))
        self.roots = _known_roots(self._root, also_known_as)
        self.sources_heading = sources_heading
        self._settings = orjson.dumps([sources_heading, self.roots]).decode()
        if files is None:
            if not os.path.isdir(self._root):
                raise RootError(self._root)
            files = LocalFiles(self._root, trusts_stat=trust_cache)
        elif not trust_cache:
            files.trusts_stat = False
        self.files = files
        self._store = StateStore(self._root, state, warn)
        self._warn = warn or log_warning
        self._progress = progress
        self._last = thread_local()

    # The folders as ``Path`` objects, made when asked for: the pipeline works on text, and a
    # command that only refreshes never imports ``pathlib``.

    @property
    def root(self) -> Path:
        """The memory folder, absolute, with ``~`` expanded."""
        from pathlib import Path

        return Path(self._root)

    @property
    def state_path(self) -> Path:
        """The folder of provgraph's own files: ``ROOT/.provgraph`` or ``state``."""
        from pathlib import Path

        return Path(self._store.state_path)

    @property
    def lock_path(self) -> Path:
        """The portable lock: ``ROOT/provgraph.lock`` or ``state/provgraph.lock``."""
        from pathlib import Path

        return Path(self._store.lock_path)

    def refresh(self, *, now: datetime | None = None) -> Report:
        """Scan the folder, update the stamps, and report what is stale."""
        report, conditions = self._transaction(current(now), frozenset())
        self._last.conditions = conditions if self.files.trusts_stat else None
        return report

    def _saved_conditions(self) -> nochange.Conditions | None:
        """What the state saved (or reused) by this thread's last ``refresh`` records for the
        no-change rule: while those conditions hold, a refresh gives that report again
        (with its own ``now``).  None when nothing was saved (the lock was held by another
        process), when a file changed while the scan read it, or when metadata proves
        nothing (``trust_cache`` False)."""
        return getattr(self._last, "conditions", None)

    def stamp(self, paths: Iterable[str], *, now: datetime | None = None) -> Report:
        """Record that each derived file in ``paths`` was just re-derived from its sources.

        Paths are root-relative.  Raises ``NotDerived`` (and stamps nothing)
        when one of them declares no sources.
        """
        wanted = frozenset(paths)
        return self._transaction(current(now), wanted)[0]

    def explain(self, path: str, report: Report) -> Explanation:
        """What ``why`` prints: the file's sources, its causes and what derives from it.

        A query answers from the ``report`` it is given (``refresh()``'s) and never scans
        or writes the state itself: the one call that may rewrite it is ``refresh``."""
        return queries.explain(report, path)

    def sources_of(self, path: str, *, report: Report, transitive: bool = False) -> tuple[Relative, ...]:
        """What ``path`` is derived from (every ancestor when ``transitive``), with chains."""
        return queries.sources_of(report, path, transitive=transitive)

    def derived_from(self, path: str, *, report: Report, transitive: bool = False) -> tuple[Relative, ...]:
        """What is derived from ``path`` (every descendant when ``transitive``), with chains."""
        return queries.derived_from(report, path, transitive=transitive)

    def stale_after_editing(self, source: str, *, report: Report) -> tuple[StaleEntry, ...]:
        """The stale files downstream of ``source``: what to re-check after editing it."""
        return queries.stale_after_editing(report, source)

    def lineage(self, path: str, report: Report) -> FileLineage:
        """What ``provgraph lineage`` prints: the file's status and sources, and everything derived from it."""
        explanation = self.explain(path, report)
        exists = explanation.status is not None or _exists(self.files, path)
        return queries.file_lineage(report, explanation, exists=exists)

    def graph(self, report: Report) -> nx.DiGraph:
        """The lineage as a networkx DiGraph (see ``lineage.to_networkx``)."""
        return to_networkx(report.edges, report.stale, report.cycles)

    def _transaction(self, now: datetime, restamp: frozenset[str]) -> tuple[Report, nochange.Conditions | None]:
        """Under the exclusive lock; a refresh that cannot get it in ``READ_WAIT`` seconds
        answers without it and saves nothing, a stamp reports it held."""
        wait = WRITE_WAIT if restamp else READ_WAIT
        try:
            with self._store.locked(wait):
                return self._run(now, restamp, save=True)
        except LockBusy as busy:
            if restamp:
                raise StateError(
                    self._store.state_path, f"cannot stamp: the state in {self._store.state_path} is {busy}; try again"
                ) from None
        self._warn(
            f"the state in {self._store.state_path} is locked by another provgraph process; this answer is not saved"
        )
        with self._store.unlocked():
            return self._run(now, restamp, save=False)[0], None

    def _run(self, now: datetime, restamp: frozenset[str], *, save: bool) -> tuple[Report, nochange.Conditions | None]:
        """Walk, reuse the last result when nothing changed, else scan, reconcile, save."""
        started_ns = wall_ns()
        listing, walk_problems = self.files.walk()
        handed_ns = getattr(self.files, "walked_ns", None)
        started_ns = started_ns if handed_ns is None else min(started_ns, handed_ns)
        walk_problems = sorted(set(walk_problems), key=attrgetter("row"))
        # a walk handed over by the command's quick answer is one it found changed
        unchanged = None if restamp or handed_ns is not None else self._unchanged(listing, tuple(walk_problems))
        if unchanged is not None:
            last, held = unchanged
            return _with_hints(replace(last, root=self._root, scanned_at=now), listing), held
        return self._rescan(listing, walk_problems, started_ns, now, restamp, save=save)

    def _rescan(
        self,
        listing: dict[str, FileMeta],
        walk_problems: list[Problem],
        started_ns: int,
        now: datetime,
        restamp: frozenset[str],
        *,
        save: bool,
    ) -> tuple[Report, nochange.Conditions | None]:
        """Scan what the cache cannot vouch for, reconcile the stamps, propagate, save."""
        if save and not restamp and self.files.trusts_stat and self._store.has_cache():
            patched = self._patched(listing, tuple(walk_problems), started_ns, now)
            if patched is not None:
                return patched
        from .scan import scan  # the no-change path above needs neither
        from .stamps import reconcile_as_table

        state = self._store.load()
        racy_from_ns = state.scan_started_ns - RACY_WINDOW_NS
        seen = state.seen if state.settings == self._settings else _without_declarations(state.seen)
        remembered = {path: tuple(derivation.stamps) for path, derivation in state.derivations.items()}
        snapshot = scan(
            self.files,
            seen,
            racy_from_ns,
            (listing, walk_problems),
            self._progress,
            remembered,
            roots=self.roots,
            sources_heading=self.sources_heading,
        )
        not_derived = tuple(sorted(path for path in restamp if path not in snapshot.declarations))
        if not_derived:
            raise NotDerived(not_derived)
        derivations, edges = reconcile_as_table(state.derivations, snapshot, now.timestamp(), restamp)
        children = children_of(edges)  # for staleness, the cycle search and the cache: built once
        report = Report(
            root=self._root,
            scanned_at=now,
            file_count=len(snapshot.files),
            edges=edges,
            stale=propagate(edges, children),
            cycles=find_cycles(edges, children),
            problems=snapshot.problems,
        )
        seen, refused = dict(snapshot.seen), dict(snapshot.refused)
        del snapshot  # what only the scan needed (its sources, its declarations) goes before the state is encoded
        conditions: nochange.Conditions | None = None
        if save:
            state = State(derivations, seen, started_ns, report, tuple(walk_problems), refused, self._settings)
            read = memory_files_read(seen)
            conditions = self._store.save(state, children, read)
            if read != listing:  # ``conditions.listing`` is the key of the files read
                conditions = None  # a file changed as it was read: the hints below saw another listing
        return _with_hints(report, listing), conditions

    def _patched(
        self, listing: dict[str, FileMeta], walk_problems: tuple[Problem, ...], started_ns: int, now: datetime
    ) -> tuple[Report, nochange.Conditions] | None:
        """After a small change, the last result patched where the change reaches
        (``incremental``): only the files written since are read, only the derived files
        they touch compared with their stamps.  None when the change is not one it
        handles (files added or removed, a refused source, ...): the full scan answers."""
        files = memory_files(listing)  # before the cache is read: the two need not coexist
        previous = self._store.previous(self._settings, walk_problems)
        if previous is None:
            return None
        try:
            found = self._patch(previous, listing, files, now)
        except (Corrupt, TypeError, ValueError, KeyError, IndexError):
            return None  # a damaged row: the full scan reads the cache again and sets it aside
        if found is None:
            return None
        from .incremental import still_racy

        patch, updates, lock, changed = found
        state = State({}, {}, started_ns, patch.report, previous.walk_problems, {}, self._settings)
        canonical = previous.lock.canonical or lock is not None
        racy = still_racy(changed, listing, started_ns - RACY_WINDOW_NS)
        record = files[1]._replace(racy=racy)
        try:
            conditions = self._store.save_patched(state, previous, updates, lock, listing, record, canonical, patch)
        except Corrupt:
            return None  # a damaged index of the cache's batches, met before anything was written
        return _with_hints(patch.report, listing), conditions

    def _patch(
        self,
        previous: incremental.Previous,
        listing: dict[str, FileMeta],
        files: tuple[list[str], incremental.MemoryFiles],
        now: datetime,
    ) -> tuple[incremental.Patch, dict[str, Seen | None], bytes | None, set[str]] | None:
        """The patch, the rows that changed (None: dropped), the lock's next bytes (None:
        unchanged) and the files read again; ``files`` are the listing's paths sorted and
        their record (``memory_files``)."""
        from . import incremental
        from .scan import Rescan

        racy_from_ns = previous.scan_started_ns - RACY_WINDOW_NS
        paths, listed = files
        changed = incremental.changed_files(previous.memory_files, listed, paths, listing, previous.rows)
        if changed is None:
            return None
        others = previous.others
        changed.update(path for path in others if not _as_row_says(self.files, path, previous.rows[path], racy_from_ns))
        rows = RowsAsSeen(previous.rows)
        rescan = Rescan(self.files, rows, racy_from_ns, listing, roots=self.roots, sources_heading=self.sources_heading)
        declarations = _compared_declarations(previous, rescan, changed)
        sources = None if declarations is None else _source_states(previous, rescan, declarations, changed)
        if declarations is None or sources is None:
            return None
        contents = _contents(previous, rescan, changed) if any(s.sha256 is None for s in sources.values()) else {}
        if contents is None:
            return None
        problems = [problem for problem in rescan.problems if problem.path in changed]
        patch = incremental.patch_report(previous, declarations, sources, listing, problems, changed, now, contents)
        lock = (
            None if patch is None or not patch.lock_changed else previous.lock.replaced(declarations, patch.derivations)
        )
        if patch is None or (patch.lock_changed and lock is None):
            return None
        updates: dict[str, Seen | None] = dict(rescan.seen)
        for path in others:
            if path not in patch.children or (path in changed and path not in rescan.seen):
                updates[path] = None  # no longer a source, or gone
        return patch, updates, lock, changed

    def _unchanged(
        self, listing: dict[str, FileMeta], walk_problems: tuple[Problem, ...]
    ) -> tuple[Report, nochange.Conditions] | None:
        """The last result, with the conditions under which it holds, when no file it
        depends on can have changed (``nochange.holds``), else None.  A source whose
        metadata proves nothing (``trusts_stat`` False) is always scanned."""
        if not self.files.trusts_stat:
            return None
        recall = self._store.recall()
        if recall is None:
            return None
        rows = tuple(problem.row for problem in walk_problems)
        look = nochange.Look(listing, rows, self._settings)
        if not nochange.holds(recall.conditions, look, self._store.lock_unchanged, _sight_through(self.files)):
            return None
        report = recall.report
        return None if report is None else (report, recall.conditions)


def _sight_through(files: FileSource) -> Callable[[str], nochange.Watched | None]:
    """How a ``FileSource`` sees a watched source (rule 5)."""

    def sight(path: str) -> nochange.Watched | None:
        try:
            meta = files.stat(path)
        except OutsideRoot:
            return nochange.Watched(path, nochange.Sight.OUTSIDE_ROOT)
        except NotRegular:
            return nochange.Watched(path, nochange.Sight.NOT_REGULAR)
        except OSError:
            return None
        if meta is None:
            return nochange.Watched(path, nochange.Sight.MISSING)
        return nochange.Watched(path, nochange.Sight.FILE, (meta.size, meta.mtime_ns, meta.ctime_ns, meta.inode))

    return sight


def _compared_declarations(
    previous: incremental.Previous, rescan: Rescan, changed: set[str]
) -> dict[str, incremental.Declared] | None:
    """What each derived file a change reaches declares now: read again when it changed,
    else as its row holds it.  None when a changed file cannot be read as a full scan would."""
    from . import incremental

    redeclared = {}
    for path in sorted(changed.intersection(rescan.listing)):
        declared = rescan.declaration(path, previous.lock.has(path))
        if declared is None:
            return None
        redeclared[path] = declared
    declaring = [path for path, (sources, _) in redeclared.items() if sources or previous.lock.has(path)]
    compared = incremental.affected(previous, changed, declaring)
    return {
        path: redeclared[path] if path in redeclared else incremental.declared(path, previous.rows[path])
        for path in compared
    }


def _source_states(
    previous: incremental.Previous,
    rescan: Rescan,
    declarations: Mapping[str, incremental.Declared],
    changed: set[str],
) -> dict[str, SourceState] | None:
    """The sources of the compared files: hashed again when they changed or were never
    hashed, else as their rows hold them.  None when one is missing or refused."""
    from . import incremental

    states = {}
    for source in sorted({source for found, _ in declarations.values() for source in found}):
        state = None if source in changed else incremental.known_source(previous.rows.get(source))
        state = state or rescan.source(source)
        if state is None:
            return None
        states[source] = state
    return states


def _contents(previous: incremental.Previous, rescan: Rescan, changed: set[str]) -> dict[str, tuple[str, ...]] | None:
    """Memory files by content hash, as a full scan finds them when a source is missing
    (``Snapshot.contents``): from the rows, each file hashed once and then kept."""
    holders: dict[str, list[str]] = {}
    for path in sorted(rescan.listing):
        sha = None if path in changed else previous.rows[path][4]
        if sha is None:
            state = rescan.source(path)
            if state is None:
                return None
            sha = state.sha256
        if type(sha) is not str:
            raise ValueError("a cached hash is not text")
        holders.setdefault(sha, []).append(path)
    return {sha: tuple(paths) for sha, paths in holders.items()}


def _as_row_says(files: FileSource, path: str, row: list[Any], racy_from_ns: int) -> bool:
    """Whether a source outside the listing is still the file its row describes (not racy)."""
    try:
        meta = files.stat(path)
    except (OSError, NotRegular, OutsideRoot):
        return False
    return meta is not None and list(meta) == row[:4] and meta.mtime_ns < racy_from_ns and meta.ctime_ns < racy_from_ns


def _exists(files: FileSource, path: str) -> bool:
    """Whether ``path`` is there at all: a folder or a link out of the root is there, though never read."""
    try:
        return files.stat(path) is not None
    except (NotRegular, OutsideRoot):
        return True


def _known_roots(root: str, also_known_as: Iterable[str]) -> tuple[str, ...]:
    """The absolute paths the folder is known by, longest first (so the most specific wins)."""
    known = {root, os.path.realpath(root)}
    for path in also_known_as:
        if not str(path).startswith("/"):
            raise ValueError(f"also_known_as takes absolute paths, not {path!r}")
        known.add(os.path.normpath(str(path)))
    return tuple(sorted((path for path in known if path != "/"), key=lambda path: (-len(path), path)))


def _without_declarations(seen: Mapping[str, Seen]) -> dict[str, Seen]:
    """The scan cache with every declaration dropped (read with other settings); hashes stay."""
    return {path: entry._replace(declaration=None) for path, entry in seen.items()}


def _with_hints(report: Report, listing: dict[str, FileMeta]) -> Report:
    """``report`` with a "did you mean" on each missing source that is probably a typo.

    Hints depend on which files exist, so they are worked out from the current
    listing on every refresh, the no-change path included, never stored."""
    missing = [edge.source for edge in broken_edges(report.edges) if edge.status is EdgeStatus.MISSING]
    if not missing:
        return report
    from .declarations import Lookup, did_you_mean  # only now: the no-change path rarely needs it

    lookup = Lookup(listing)
    hints = {source: did_you_mean(source, lookup) for source in missing}
    if not any(hints.values()):
        return report
    edges = tuple(replace(edge, did_you_mean=_new_hint(hints, edge)) for edge in report.edges)
    stale = tuple(
        replace(entry, causes=tuple(replace(cause, did_you_mean=_new_hint(hints, cause)) for cause in entry.causes))
        for entry in report.stale
    )
    return replace(report, edges=edges, stale=stale)


def _new_hint(hints: dict[str, str | None], found: Edge | Cause) -> str | None:
    """The typo hint of a missing source, unless the rename hint already names that file."""
    hint = hints.get(found.source)
    return None if hint == found.moved_to else hint


def find_root(path: str | os.PathLike[str]) -> Path | None:
    """The nearest folder at or above ``path`` that holds ``provgraph.lock``, ``.provgraph/``
    or ``MEMORY.md`` (a plain clone has the lock and no cache)."""
    from pathlib import Path  # why, lineage and stamp look for the root; a refresh is given it

    current = Path(path).absolute()
    if not current.is_dir():
        current = current.parent
    for folder in (current, *current.parents):
        if (folder / LOCK_NAME).is_file() or (folder / STATE_DIR).is_dir() or (folder / "MEMORY.md").is_file():
            return folder
    return None
