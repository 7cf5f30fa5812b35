"""The Python API: open a memory root, refresh, stamp, explain.

``Memory`` ties the pipeline together under the store's lock: walk and stat; then the
last result when nothing changed, the last result patched after a small change, or a full
scan that reconciles the stamps, propagates and saves.  Every method that reads the clock
takes ``now=``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Collection, Iterable
from dataclasses import replace
from datetime import UTC, datetime
from operator import attrgetter
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

import orjson

from . import incremental, queries
from .clock import current, wall_ns
from .declarations import Lookup, did_you_mean
from .errors import ProvgraphError, log_warning
from .files import RACY_WINDOW_NS, FileSource, LocalFiles, NotRegular, OutsideRoot
from .index import INDEX_NAME, index_text
from .lineage import children_of, find_cycles, hinted, propagate, to_networkx, typo_hint
from .model import (
    EdgeStatus,
    Explanation,
    FileLineage,
    FileMeta,
    Problem,
    ProblemKind,
    Relative,
    Report,
    StaleEntry,
    as_text,
    broken_edges,
)
from .render import lineage_hints, safe_name
from .scan import FieldsRead, Rescan, check_indexes, fields_of, read_indexes, scan
from .stamps import Derivation, reconcile_as_table
from .store.cache import Cache, Damaged, Watched, file_rows
from .store.folder import LockBusy
from .store.state import LOCK_NAME, STATE_DIR, OptionsDiffer, StateError, StateStore

if TYPE_CHECKING:
    import networkx as nx


__all__ = ["DEFAULT_SOURCES_HEADING", "Explanation", "FieldNameError", "Memory", "NotDerived", "OptionsDiffer"]
__all__ += ["RootError", "find_root"]

DEFAULT_SOURCES_HEADING = "## Sources"
"""The heading ``--sources-heading`` reads when it names none."""
READ_WAIT = 2.0
"""Seconds a refresh waits for another process's lock before it answers from a scan it does
not save: a provgraph suspended while holding the lock must not hang every agent start."""
READING_OPTIONS = ("sources_heading", "index_files", "unindexed", "volatile_field")
"""The options that change what is read, recorded in the lock by the run that writes it."""
WRITE_WAIT = 10.0
"""Seconds a stamp waits for the lock before it reports it held, as one error line."""


class RootError(ProvgraphError):
    """The memory root does not exist or is not a folder."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        super().__init__(f"memory root {root} is not a folder")
        self.root = Path(root)


class FieldNameError(ProvgraphError, ValueError):
    """A volatile field named as no frontmatter key is written (empty, with a space or a colon)."""


class NotDerived(ProvgraphError):
    """``stamp`` was asked to record a re-derivation of files that declare no sources."""

    def __init__(self, paths: tuple[str, ...]) -> None:
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
        index_files: Iterable[str] = (),
        unindexed: Iterable[str] = (),
        volatile_fields: Iterable[str] = (),
    ) -> None:
        """``progress(done, total)`` hears how far a scan that reads files has got.
        ``sources_heading`` (``"## Sources"``) makes the links under that heading declare
        sources; it is recorded in the lock, and one that differs from the lock's raises
        ``OptionsDiffer``.  ``also_known_as`` are other absolute paths of this folder (where
        a sandboxed agent sees it).  ``trust_cache`` False reads and hashes every file on
        every refresh, for content that changes without moving metadata (``mmap``).
        ``index_files`` are indexes beside ``MEMORY.md`` (root-relative); ``unindexed`` are
        patterns (``fnmatch``) of memory files no index needs to list; both are recorded
        in the lock like ``sources_heading``.  ``volatile_fields`` are frontmatter fields an
        edit of which alone marks nothing, besides ``VOLATILE_FIELDS`` (``updated``...);
        recorded in the lock too."""
        self._root = os.path.abspath(os.path.expanduser(os.fspath(root)))
        self.roots = _known_roots(self._root, also_known_as)
        self._asked = {} if sources_heading is None else {"sources_heading": sources_heading}
        self._asked.update((name, "\n".join(sorted(set(value)))) for name, value in _listed(index_files, unindexed))
        self.volatile_fields = _field_names(volatile_fields)
        """The extra volatile fields the last refresh read with: those asked for, else the lock's."""
        if self.volatile_fields:
            self._asked["volatile_field"] = ",".join(self.volatile_fields)
        self.sources_heading = sources_heading
        """The heading the last refresh read with: the one asked for, else the lock's."""
        self.index_files, self.unindexed = _split(self._asked, "index_files"), _split(self._asked, "unindexed")
        for path in self.index_files:
            if path.startswith("/") or ".." in path.split("/") or not path.endswith(".md"):
                raise ProvgraphError(f"an index is a Markdown file named from the memory root, not {path!r}")
        self._settings = self._reading_settings()
        if files is None:
            if not os.path.isdir(self._root):
                raise RootError(self._root)
            files = LocalFiles(self._root, trusts_stat=trust_cache)
        elif not trust_cache:
            files.trusts_stat = False
        self.files = files
        self._store = StateStore(self._root, state, warn, self._settings)
        self._warn = warn or log_warning
        self._progress = progress
        self._known: _Known | None = None
        self._fields: dict[str, FieldsRead] = {}
        """The index entries' fields as last read, by file."""
        self._unsaved: _Unsaved | None = None
        """The last scan of a folder where nothing of provgraph's is written yet, saved as it
        is once something derived is found."""
        self._listing: dict[str, FileMeta] = {}
        """The last walk's listing: the one the last report was made from."""
        self.index_file: str | None = None
        """The index file the last ``index()`` printed, None when there was none."""

    @property
    def root(self) -> Path:
        """The memory folder, absolute, with ``~`` expanded."""
        return Path(self._root)

    @property
    def state_path(self) -> Path:
        """The folder of provgraph's own files: ``ROOT/.provgraph`` or ``state``."""
        return Path(self._store.state_path)

    @property
    def lock_path(self) -> Path:
        """The portable lock: ``ROOT/provgraph.lock`` or ``state/provgraph.lock``."""
        return Path(self._store.lock_path)

    def _reading_settings(self) -> str:
        """The reading settings, part of the cache's key (a list option only when given)."""
        lists = {"index_files": self.index_files, "unindexed": self.unindexed, "volatile": self.volatile_fields}
        given = {name: value for name, value in lists.items() if value}
        return orjson.dumps([self.sources_heading, [as_text(path) for path in self.roots], given]).decode()

    def refresh(self, *, now: datetime | None = None) -> Report:
        """Scan the folder, update the stamps, and report what is stale."""
        return self._transaction(current(now), frozenset())

    def stamp(self, paths: Iterable[str], *, now: datetime | None = None) -> Report:
        """Record that each derived file in ``paths`` (root-relative) was just re-derived from
        its sources; ``NotDerived``, and nothing stamped, when one declares no sources."""
        return self._transaction(current(now), frozenset(paths))

    def explain(self, path: str, report: Report) -> Explanation:
        """What ``why`` prints: the file's sources, its causes and what derives from it, from
        the ``report`` given; a query never scans or writes the state."""
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

    def _transaction(self, now: datetime, restamp: frozenset[str]) -> Report:
        """Under the exclusive lock; a refresh that cannot get it in ``READ_WAIT`` seconds
        answers without it and saves nothing, a stamp reports it held."""
        pending = None
        if not restamp and self._store.absent():  # none of provgraph's files: none written until a file derives
            with self._store.unlocked():
                report = self._run(now, restamp, save=False)
            if not report.edges and not (self._unsaved and any(d.stamps for d in self._unsaved.derivations.values())):
                return report  # nothing derived and no index entry to stamp
            pending = self._unsaved
        where = self._store.state_path
        try:
            with self._store.locked(WRITE_WAIT if restamp else READ_WAIT):
                return self._run(now, restamp, save=True, pending=pending)
        except LockBusy as busy:
            if restamp:
                raise StateError(where, f"cannot stamp: the state in {where} is {busy}; try again") from None
        self._warn(f"the state in {where} is locked by another provgraph process; this answer is not saved")
        with self._store.unlocked():
            return self._run(now, restamp, save=False)

    def _run(self, now: datetime, restamp: frozenset[str], *, save: bool, pending: _Unsaved | None = None) -> Report:
        """Walk and stat; then the last result, the last result patched, or a full scan."""
        started_ns = wall_ns()
        options = self._store.reading_options(self._asked, READING_OPTIONS)
        self.sources_heading = options.get("sources_heading")
        self.index_files, self.unindexed = _split(options, "index_files"), _split(options, "unindexed")
        self.volatile_fields = _field_names(filter(None, options.get("volatile_field", "").split(",")))
        self._store.settings = self._settings = self._reading_settings()
        if pending is not None and self._store.cache() is None and self._store.lock_data() is None:
            return self._saved(pending)  # the scan that found something derived, saved under the lock
        cache = self._store.cache()
        expect = getattr(self.files, "expect", None)  # a remote source batches its reads with the listing
        if expect is not None:
            expect(None if cache is None else (cache.memory, cache.scan_started_ns - RACY_WINDOW_NS))
        listing, found = self.files.walk()
        self._listing = listing
        walk_problems = tuple(sorted(set(found), key=attrgetter("row")))
        unsaved = self._unsaved
        if cache is None and unsaved is not None and not save and unsaved.cache.settings == self._settings:
            cache = unsaved.cache  # its no-change path only: a change reads every file again
        if cache is not None and not restamp and self.files.trusts_stat and self._store.options_recorded():
            known = self._known_of(cache)
            if incremental.unchanged(
                cache,
                listing,
                walk_problems,
                cache.scan_started_ns - RACY_WINDOW_NS,
                known.newest,
                lambda: self._store.lock_unchanged(cache.lock),
                self._look,
            ):
                return _with_hints(replace(known.report(self._root), root=self._root, scanned_at=now), listing)
            if save and walk_problems == cache.walk_problems:
                patched = self._patched(known, listing, started_ns, now)
                if patched is not None:
                    return patched
        previous = None if unsaved is not None and cache is unsaved.cache else cache
        return self._rescan(previous, listing, walk_problems, started_ns, now, restamp, save=save)

    def _saved(self, unsaved: _Unsaved) -> Report:
        self._unsaved = None
        saved = self._store.save(unsaved.derivations, unsaved.cache)
        self._known = _Known(saved, unsaved.report)
        return unsaved.report

    def _known_of(self, cache: Cache) -> _Known:
        """What this ``Memory`` worked out of ``cache`` before, while the store gives the same one."""
        known = self._known
        if known is None or known.cache is not cache:
            known = self._known = _Known(cache)
        return known

    def _patched(self, known: _Known, listing: dict[str, FileMeta], started_ns: int, now: datetime) -> Report | None:
        """After a small change, the last result patched where the change reaches; None
        when the change is not one a patch handles: the full scan answers."""
        cache = known.cache
        racy_mark = cache.scan_started_ns - RACY_WINDOW_NS
        changed = incremental.changed_files(cache, listing, racy_mark, known.newest)
        indexes = sorted(self._index_paths().intersection(listing))
        if (
            changed is None
            or changed.intersection(indexes)
            or cache.refused
            or not self._store.lock_unchanged(cache.lock)
        ):
            return None  # an index that changed is read again by the full scan
        changed |= incremental.others_changed(cache, self._look, racy_mark)
        data = self._store.lock_data()
        lock = incremental.LockLines.of(data, cache.lock is not None and cache.lock.canonical)
        if lock is None or (data is None and self._asked):  # a first lock records the options: the full scan writes it
            return None
        rows = file_rows(cache.rows)
        rescan = Rescan(
            self.files,
            rows,
            racy_mark,
            listing,
            roots=self.roots,
            sources_heading=self.sources_heading,
            volatile=self.volatile_fields,
        )
        try:
            found = incremental.patch(cache, known.index(), lock, rescan, changed, now, self._root)
            if found is not None and indexes:
                found = self._entries_patched(found, lock, listing, indexes, now, started_ns - RACY_WINDOW_NS, changed)
            if found is None:
                return None
            patched = incremental.patched_cache(cache, found, started_ns, listing)
        except (TypeError, ValueError, KeyError, IndexError, Damaged):
            return None  # a row that does not fit the last result: the full scan answers
        saved = self._store.save(None, patched, found.lock)
        self._known = _Known(saved, found.report)
        return _with_hints(found.report, listing)

    def _entries_patched(
        self,
        found: incremental.Patch,
        lock: incremental.LockLines,
        listing: dict[str, FileMeta],
        indexes: list[str],
        now: datetime,
        racy_mark: int,
        moved: Collection[str],
    ) -> incremental.Patch | None:
        """``found`` with the index entries compared again with the files the change moved; None
        when the lock's lines cannot be rewritten in place (the full scan answers)."""
        stamps = lock.derivations(indexes)
        readings = read_indexes(self.files, listing, indexes, self.roots)
        if stamps is None or not readings:
            return found if stamps is not None else None
        kept = (self._fields, racy_mark)
        updated, problems = check_indexes(
            self.files, listing, readings, stamps, now.timestamp(), kept, unindexed=self.unindexed, moved=moved
        )
        report = replace(found.report, problems=found.report.problems + problems)
        updated = {
            path: derivation for path, derivation in updated.items() if derivation.stamps
        }  # as the lock holds them
        if updated == stamps:
            return found._replace(report=report)
        lines = lock if found.lock is None else incremental.LockLines.of(b"".join(found.lock), True)
        data = None if lines is None else lines.replaced(indexes, updated)
        return None if data is None else found._replace(report=report, lock=data)

    def _rescan(
        self,
        cache: Cache | None,
        listing: dict[str, FileMeta],
        walk_problems: tuple[Problem, ...],
        started_ns: int,
        now: datetime,
        restamp: frozenset[str],
        *,
        save: bool,
    ) -> Report:
        """Scan what the cache cannot vouch for, reconcile the stamps, propagate, save."""
        derivations = self._store.stamps()
        indexes = self._index_paths()
        entry_stamps = {path: derivations.pop(path) for path in indexes.intersection(derivations)}
        remembered = {path: tuple(derivation.stamps) for path, derivation in derivations.items()}
        if cache is not None and not self._store.rows_checked(cache):
            cache = None  # set aside: every file is read again
        previous, racy_ns = ({}, 0) if cache is None else (file_rows(cache.rows), cache.scan_started_ns)
        walked = (listing, list(walk_problems))
        snapshot = scan(
            self.files,
            previous,
            racy_ns - RACY_WINDOW_NS,
            walked,
            self._progress,
            remembered,
            roots=self.roots,
            sources_heading=self.sources_heading,
            volatile=self.volatile_fields,
        )
        readings = read_indexes(self.files, listing, sorted(indexes), self.roots)
        index_found: tuple[Problem, ...] = ()
        if readings:  # an index is never a derived file: its lock lines are its entries' stamps
            declarations = {path: found for path, found in snapshot.declarations.items() if path not in indexes}
            snapshot = snapshot._replace(declarations=declarations)
            entry_stamps, index_found = check_indexes(
                self.files,
                listing,
                readings,
                entry_stamps,
                now.timestamp(),
                (self._fields, started_ns - RACY_WINDOW_NS),
                restamp,
                self.unindexed,
            )
        read = {reading.path for reading in readings}
        not_derived = tuple(sorted(path for path in restamp - read if path not in snapshot.declarations))
        if not_derived:
            raise NotDerived(not_derived)
        derivations, edges = reconcile_as_table(derivations, snapshot, now.timestamp(), restamp)
        derivations.update(entry_stamps)
        children = children_of(edges)  # for staleness and the cycle search: built once
        report = Report(
            root=self._root,
            scanned_at=now,
            file_count=len(snapshot.files),
            edges=edges,
            stale=propagate(edges, children),
            cycles=find_cycles(edges, children),
            problems=snapshot.problems + index_found,
            hints=() if edges else lineage_hints(snapshot.lineage_like),
        )
        seen, refused = snapshot.seen, snapshot.refused
        del snapshot, children  # what only the scan needed goes before the cache is built
        scanned = incremental.scanned_cache(
            os.fsdecode(self._store.root), self._settings, started_ns, walk_problems, seen, refused, report
        )
        del seen
        report = _with_hints(report, listing)
        saved = self._store.save(derivations, scanned) if save else scanned
        self._unsaved = None if save else _Unsaved(scanned, derivations, report)
        self._known = _Known(saved, report)
        return report

    def index(self, *, now: datetime | None = None) -> str:
        """The index as it should be (``provgraph index``): ``MEMORY.md``, else the first of
        ``index_files``, with outdated entries rewritten, dangling and repeated ones dropped
        and orphans appended; "" when there is no index.  Writes no memory file."""
        report, listing = self.refresh(now=now), self._listing
        readings = read_indexes(self.files, listing, [INDEX_NAME, *self.index_files], self.roots)
        self.index_file = readings[0].path if readings else None
        if not readings:
            return ""
        found = {kind: [problem.path for problem in report.problems if problem.kind is kind] for kind in ProblemKind}
        reading, added = readings[0], found[ProblemKind.ORPHAN]
        listed = {entry.target for entry in reading.entries if entry.target in listing}
        fields = fields_of(self.files, sorted({*listed, *added}), listing, self._fields, wall_ns() - RACY_WINDOW_NS)
        return index_text(reading, fields, found[ProblemKind.OUTDATED_ENTRY], found[ProblemKind.DANGLING_ENTRY], added)

    def _index_paths(self) -> frozenset[str]:
        """The index files read: ``MEMORY.md`` at the root and those the options name."""
        return frozenset([INDEX_NAME, *self.index_files])

    def _look(self, path: str) -> Watched | None:
        """How a source outside the listing looks now (``incremental.SourceStat``)."""
        try:
            meta = self.files.stat(path)
        except OutsideRoot:
            return Watched(path, ProblemKind.OUTSIDE_ROOT.value)
        except NotRegular:
            return Watched(path, ProblemKind.BAD_ENTRY.value)
        except OSError:
            return None
        return Watched(path, "missing") if meta is None else Watched(path, "file", meta)


class _Unsaved(NamedTuple):
    """A scan not saved: its cache, its stamps and its report."""

    cache: Cache
    derivations: dict[str, Derivation]
    report: Report


class _Known:
    """What a ``Memory`` keeps of the cache it last read or wrote, and what it made of it."""

    __slots__ = ("cache", "last_index", "last_report", "newest_row")

    def __init__(self, cache: Cache, last_report: Report | None = None) -> None:
        self.cache, self.last_report = cache, last_report
        self.last_index: incremental.Index | None = None
        self.newest_row: int | None = None

    @property
    def newest(self) -> int:
        """``incremental.newest`` of the cache's memory files, worked out when first asked for
        (a process that saves a cache and ends never asks)."""
        if self.newest_row is None:
            self.newest_row = incremental.newest(self.cache.memory)
        return self.newest_row

    def report(self, root: str) -> Report:
        if self.last_report is None:
            last = self.cache.last
            assert last is not None, "the no-change rule holds only with a last result"
            self.last_report = Report(
                root=root,
                scanned_at=datetime.fromtimestamp(0, UTC),
                file_count=last.file_count,
                edges=last.edges,
                stale=propagate(last.edges),
                cycles=last.cycles,
                problems=last.problems,
            )
        return self.last_report

    def index(self) -> incremental.Index:
        if self.last_index is None:
            last = self.cache.last
            self.last_index = incremental.Index.of(() if last is None else last.edges)
        return self.last_index


def _exists(files: FileSource, path: str) -> bool:
    """Whether ``path`` is there at all: a folder or a link out of the root is there, though never read."""
    try:
        return files.stat(path) is not None
    except (NotRegular, OutsideRoot):
        return True


def _listed(index_files: Iterable[str], unindexed: Iterable[str]) -> Iterable[tuple[str, list[str]]]:
    """The index options asked for, as lists (an option given empty is not asked)."""
    return (
        (name, value) for name, value in (("index_files", list(index_files)), ("unindexed", list(unindexed))) if value
    )


def _split(options: dict[str, str], name: str) -> tuple[str, ...]:
    """A list option as recorded in the lock: one value a line."""
    return tuple(filter(None, options.get(name, "").split("\n")))


def _field_names(names: Iterable[str]) -> tuple[str, ...]:
    """Frontmatter field names, sorted, once each; ``FieldNameError`` for one that no top-level
    key is written as (empty, or holding a space, a colon or a comma)."""
    fields = tuple(sorted(set(names)))
    for name in fields:
        if not name or any(mark in name for mark in " \t\r\n:,#") or name.startswith(("-", "'", '"')):
            raise FieldNameError(f"a volatile field is a frontmatter key such as 'reviewed', not {name!r}")
    return fields


def _known_roots(root: str, also_known_as: Iterable[str]) -> tuple[str, ...]:
    """The absolute paths the folder is known by, longest first (so the most specific wins)."""
    known = {root, os.path.realpath(root)}
    for path in also_known_as:
        if not str(path).startswith("/"):
            raise ValueError(f"also_known_as takes absolute paths, not {path!r}")
        known.add(os.path.normpath(str(path)))
    return tuple(sorted((path for path in known if path != "/"), key=lambda path: (-len(path), path)))


def _with_hints(report: Report, listing: dict[str, FileMeta]) -> Report:
    """``report`` with a "did you mean" on each missing source that is probably a typo: worked
    out from the current listing on every refresh, never stored, as it depends on which files exist."""
    missing = [edge.source for edge in broken_edges(report.edges) if edge.status is EdgeStatus.MISSING]
    if not missing:
        return report
    lookup = Lookup(listing)
    hints = {source: did_you_mean(source, lookup) for source in missing}
    if not any(hints.values()):
        return report
    edges = tuple(replace(edge, did_you_mean=typo_hint(hints, edge.source, edge.moved_to)) for edge in report.edges)
    stale = tuple(replace(entry, causes=hinted(entry.causes, hints)) for entry in report.stale)
    return replace(report, edges=edges, stale=stale)


def find_root(path: str | os.PathLike[str]) -> Path | None:
    """The nearest folder at or above ``path`` that holds ``provgraph.lock``, ``.provgraph/``
    or ``MEMORY.md`` (a plain clone has the lock and no cache)."""
    current = Path(path).absolute()
    if not current.is_dir():
        current = current.parent
    for folder in (current, *current.parents):
        if (folder / LOCK_NAME).is_file() or (folder / STATE_DIR).is_dir() or (folder / "MEMORY.md").is_file():
            return folder
    return None
