"""Scan a memory folder: read declarations and hash the sources into a ``Snapshot``.

What the previous scan learned (``FileRow``) is reused for every file whose metadata is
unchanged.  Memory files are read only as far as their frontmatter; one read whole is
hashed as it is read, and the hash kept for the files that turn out to be sources.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Set
from contextlib import AbstractContextManager, nullcontext
from operator import attrgetter
from typing import NamedTuple

from .declarations import (
    FRONTMATTER_LIMIT,
    NOTHING,
    Declaration,
    Lookup,
    follows_listing,
    frontmatter_incomplete,
    read_declaration,
    resolve_entries,
)
from .errors import ProvgraphError
from .files import RACY_WINDOW_NS, FileSource, NotRegular, OutsideRoot, ProvgraphOwn
from .index import Fields, IndexReading, entries_of, index_problems, orphans, read_fields, restamped
from .meaning import Meaning, meaning_hash, volatile_lines
from .model import FileMeta, Problem, ProblemKind, Snapshot, SourceState, by_content
from .stamps import Derivation
from .store.cache import FileRow, Resolution

__all__ = ["RACY_WINDOW_NS", "DanglingEntries", "FileRow", "Rescan", "Snapshot", "SourceState", "check_indexes", "scan"]

_PROGRESS_EVERY = 256
"""Files between two progress reports."""


def scan(
    files: FileSource,
    previous: Mapping[str, FileRow],
    racy_from_ns: int,
    walked: tuple[dict[str, FileMeta], list[Problem]] | None = None,
    progress: Callable[[int, int], None] | None = None,
    remembered: Mapping[str, tuple[str, ...]] | None = None,
    *,
    roots: tuple[str, ...] = (),
    sources_heading: str | None = None,
    volatile: tuple[str, ...] = (),
) -> Snapshot[FileRow]:
    """Scan ``files``, trusting ``previous`` for files unchanged before ``racy_from_ns``.

    ``walked`` is ``files.walk()``'s result when the caller has it; ``progress(done,
    total)`` hears how far the scan got.  ``remembered`` holds the sources each derived
    file declared when last stamped: one whose declaration cannot be read now is
    ``unsettled``, and those sources are hashed for it.  A declaration with a wiki link is
    resolved again on every scan: where it points depends on which files exist.
    ``volatile`` names the frontmatter fields, besides ``meaning.VOLATILE_FIELDS``, that a
    file's meaning leaves out.
    """
    listing, problems = walked if walked is not None else files.walk()
    problems = list(problems)
    remembered = remembered or {}
    lookup = Lookup(listing, roots)
    reader = _Reader(files, previous, racy_from_ns, problems, sources_heading, volatile)
    reader.names = {path: path for path in listing}
    reader.lineage_like = None if remembered else {}
    declarations: dict[str, tuple[str, ...]] = {}
    derived_at: dict[str, str | None] = {}
    ordered = sorted(listing)
    with _reading(files):
        declared, unsettled = _declared(reader, ordered, listing, remembered, progress)
    for path, declaration in declared:
        sources, refused = reader.resolution(path, declaration, lookup)
        problems.extend(refused)
        if sources:
            declarations[path] = sources
            derived_at[path] = declaration.derived_at
    unsettled.update(_in_unread_folders(remembered, listing, problems))
    needed = sorted({source for sources in (*declarations.values(), *unsettled.values()) for source in sources})
    with _reading(files):  # each source opened through its folder's kept descriptor, like a memory file
        states = {source: reader.source(source, listing.get(source)) for source in needed}
    if progress is not None:
        progress(len(listing), len(listing))
    withheld = {
        path: refused_sources
        for path, sources in (declarations.items() if reader.refused else ())
        if (refused_sources := tuple(source for source in sources if source in reader.refused))
    }
    declarations = _drop_refused(declarations, reader.refused, problems)
    missing = any(state.sha256 is None for source, state in states.items() if source not in reader.refused)
    return Snapshot(
        files=tuple(ordered),
        declarations=declarations,
        derived_at={path: derived_at[path] for path in declarations.keys() | withheld.keys()},
        sources={source: state for source, state in states.items() if source not in reader.refused},
        problems=tuple(sorted(set(problems), key=attrgetter("row"))),
        seen=reader.seen,
        refused={source: kind for source, (kind, _) in reader.refused.items()},
        contents=reader.contents(listing) if missing else {},
        withheld=withheld,
        unsettled=unsettled,
        lineage_like=reader.lineage_like or {},
    )


class Rescan:
    """Reads again only the files a small change touched, as a full scan reads them."""

    def __init__(
        self,
        files: FileSource,
        previous: Mapping[str, FileRow],
        racy_from_ns: int,
        listing: Mapping[str, FileMeta],
        *,
        roots: tuple[str, ...] = (),
        sources_heading: str | None = None,
        volatile: tuple[str, ...] = (),
    ) -> None:
        self.problems: list[Problem] = []
        self.listing = listing
        self._lookup = Lookup(listing, roots)
        self._reader = _Reader(files, previous, racy_from_ns, self.problems, sources_heading, volatile)

    @property
    def seen(self) -> Mapping[str, FileRow]:
        """The rows of the files looked at, for the next cache."""
        return self._reader.seen

    def declaration(self, path: str, remembered: bool) -> tuple[tuple[str, ...], str | None] | None:
        """The sources ``path`` declares (resolved, none refused) and its ``derived_at``;
        None when this reading cannot settle it: a full scan sorts that out."""
        reader = self._reader
        declaration = reader.declaration(path, self.listing[path], remembered)
        self.problems.extend(Problem(path, kind, detail) for kind, detail in declaration.problems)
        if path in reader.unsettled or path in reader._unreadable:
            return None
        if declaration is NOTHING:
            return (), None
        sources, refused = reader.resolution(path, declaration, self._lookup)
        self.problems.extend(refused)
        return sources, declaration.derived_at if sources else None

    def source(self, path: str) -> SourceState | None:
        """A source hashed (a memory file's row keeps its declaration), or missing; None
        when it cannot be read or is refused."""
        reader = self._reader
        meta = self.listing.get(path)
        if meta is not None and path not in reader.seen and self.declaration(path, False) is None:
            return None
        problems = len(self.problems)
        state = reader.source(path, meta)
        return None if reader.refused or len(self.problems) > problems else state


def _declared(
    reader: _Reader,
    ordered: list[str],
    listing: Mapping[str, FileMeta],
    remembered: Mapping[str, tuple[str, ...]],
    progress: Callable[[int, int], None] | None,
) -> tuple[list[tuple[str, Declaration]], dict[str, tuple[str, ...]]]:
    """Every file's declaration, in order: the files that declare something, and the
    remembered ones whose declaration is unsettled."""
    declared: list[tuple[str, Declaration]] = []
    unsettled: dict[str, tuple[str, ...]] = {}
    for done, path in enumerate(ordered):
        if progress is not None and done % _PROGRESS_EVERY == 0:
            progress(done, len(ordered))
        is_remembered = path in remembered
        declaration = reader.declaration(path, listing[path], is_remembered)
        if declaration is NOTHING and not is_remembered:
            continue  # most memory files: nothing declared, nothing to keep from before
        reader.problems.extend(Problem(path, kind, detail) for kind, detail in declaration.problems)
        if path in reader.unsettled:
            unsettled[path] = remembered[path]
        elif declaration is not NOTHING:
            declared.append((path, declaration))
    return declared, unsettled


def _reading(files: FileSource) -> AbstractContextManager[object]:
    """``files.reading()`` where the source has it (``LocalFiles``)."""
    reading = getattr(files, "reading", None)
    return reading() if reading is not None else nullcontext()


def _in_unread_folders(
    remembered: Mapping[str, tuple[str, ...]], listing: Mapping[str, FileMeta], problems: list[Problem]
) -> dict[str, tuple[str, ...]]:
    """Remembered derived files the walk could not list because a folder above them
    could not be read: like a file that cannot be read, they keep their last declaration."""
    folders = {problem.path for problem in problems if problem.kind is ProblemKind.UNREADABLE} - listing.keys()
    if not folders:
        return {}
    return {
        path: sources
        for path, sources in remembered.items()
        if path not in listing and ("." in folders or any(folder in folders for folder in _folders_above(path)))
    }


def _folders_above(path: str) -> list[str]:
    """``a/b/c.md`` -> ``["a", "a/b"]``."""
    parts = path.split("/")[:-1]
    return ["/".join(parts[: depth + 1]) for depth in range(len(parts))]


def _drop_refused(
    declarations: dict[str, tuple[str, ...]], refused: Mapping[str, tuple[ProblemKind, str]], problems: list[Problem]
) -> dict[str, tuple[str, ...]]:
    """Remove sources that must not be opened, with a problem for each declaring file."""
    if not refused:
        return declarations
    kept = {}
    for path, sources in declarations.items():
        problems.extend(Problem(path, *refused[source]) for source in sources if source in refused)
        if remaining := tuple(source for source in sources if source not in refused):
            kept[path] = remaining
    return kept


class _Reader:
    """Reads what the cache cannot vouch for, and builds the next cache."""

    def __init__(
        self,
        files: FileSource,
        previous: Mapping[str, FileRow],
        racy_from_ns: int,
        problems: list[Problem],
        sources_heading: str | None = None,
        volatile: tuple[str, ...] = (),
    ) -> None:
        self.files = files
        self.sources_heading = sources_heading
        self.volatile = volatile_lines(volatile)
        self.previous = previous
        self.racy_from_ns = racy_from_ns
        self.problems = problems
        self.seen: dict[str, FileRow] = {}
        self.refused: dict[str, tuple[ProblemKind, str]] = {}
        self._unreadable: set[str] = set()
        self.unsettled: set[str] = set()
        """Remembered derived files whose declaration could not be read this time."""
        self._digests: dict[str, tuple[bytes, str | None]] = {}
        """The sha256 of each file read whole and its meaning's, taken as it was read: which
        files are sources is known only once every declaration is read, and keeping their
        bytes would hold the whole folder in memory."""
        self.lineage_like: dict[str, int] | None = None
        """Counted while no stamp is recorded and nothing is declared: see ``Snapshot.lineage_like``."""
        self.names: dict[str, str] = {}
        """Each listed path, as the listing holds it: a resolved source is kept as that very
        string, not as a copy per declaration naming it."""

    def _trusted(self, seen: FileRow | None, meta: FileMeta) -> bool:
        return seen is not None and vouches(self.files, seen.meta, meta, self.racy_from_ns)

    def declaration(self, path: str, meta: FileMeta, remembered: bool = False) -> Declaration:
        """What ``path`` declares: from the cache while it vouches for the file, else read now.
        A ``remembered`` derived file whose declaration cannot be read now is unsettled and
        not cached, so the next scan reads it again."""
        old = self.previous.get(path)
        if old is not None and old.declaration is not None and self._trusted(old, meta):
            self.seen[path] = old
            return old.declaration
        digest, declaration, unreadable, incomplete = read_one(
            self.files, path, self.sources_heading, remembered, self.lineage_like, self.volatile
        )
        if unreadable is not None:
            self._unreadable.add(path)
            self.problems.append(Problem(path, ProblemKind.UNREADABLE, unreadable))
            if remembered:
                self.unsettled.add(path)
            return NOTHING
        if digest is not None:
            self._digests[path] = digest
        if declaration.entries:
            self.lineage_like = None  # something is declared: no hint will be given
        if remembered and not declaration.entries and (declaration.problems or incomplete):
            self.unsettled.add(path)
            if not declaration.problems:
                self.problems.append(Problem(path, ProblemKind.UNREADABLE, _INCOMPLETE))
            return declaration
        self.seen[path] = _new_row(FileRow, (meta, None, declaration, None, None))
        return declaration

    def resolution(self, path: str, declaration: Declaration, lookup: Lookup) -> Resolution:
        """The declaration's entries resolved: as the cache recorded them while the file is
        the one it vouches for and no entry follows the listing, else resolved now."""
        seen = self.seen.get(path)
        kept = seen.resolved if seen is not None and seen is self.previous.get(path) else None
        if kept is not None and not follows_listing(declaration.entries):
            return kept
        sources, refused = resolve_entries(path, declaration.entries, lookup)
        resolved = tuple([self.names.get(source, source) for source in sources]), refused
        if seen is not None:
            self.seen[path] = _new_row(FileRow, (seen.meta, seen.sha256, seen.declaration, resolved, seen.meaning))
        return resolved

    def source(self, path: str, meta: FileMeta | None) -> SourceState:
        if path in self._unreadable:
            return SourceState(None)
        try:
            if meta is None:
                meta = self.files.stat(path)
            if meta is None:
                return SourceState(None)
            sha, meaning = self._hashes(path, meta)
        except OutsideRoot:
            self.refused[path] = (ProblemKind.OUTSIDE_ROOT, f"{path} resolves outside the root")
            return SourceState(None)
        except ProvgraphOwn:
            self.refused[path] = (ProblemKind.BAD_ENTRY, f"provgraph's own state, never a source: {path}")
            return SourceState(None)
        except NotRegular:
            self.refused[path] = (ProblemKind.BAD_ENTRY, f"not a regular file: {path}")
            return SourceState(None)
        except OSError as error:
            self.problems.append(Problem(path, ProblemKind.UNREADABLE, describe(error)))
            return SourceState(None)
        return SourceState(sha, meta.mtime, meaning)

    def contents(self, listing: Mapping[str, FileMeta]) -> dict[str, tuple[str, ...]]:
        """Memory files by content hash (cached like any other hash); one that cannot be read is left out."""
        return by_content(self._readable_hashes(listing))

    def _readable_hashes(self, listing: Mapping[str, FileMeta]) -> Iterator[tuple[str, str, str | None]]:
        for path in sorted(listing):
            if path in self._unreadable:
                continue
            try:
                yield (path, *self._hashes(path, listing[path]))
            except (OSError, NotRegular, OutsideRoot):
                continue

    def _hashes(self, path: str, meta: FileMeta) -> tuple[str, str | None]:
        """The file's sha256 and its meaning's (None: the same), from the cache while it
        vouches for the file, else as the file was read, else read now."""
        current = self.seen.get(path)
        if current is not None and current.sha256 is not None and current.meta == meta:
            return current.sha256, current.meaning  # hashed already in this scan
        old = self.previous.get(path)
        digest = self._digests.pop(path, None)  # taken as the file was read, then let go of
        if old is not None and old.sha256 is not None and self._trusted(old, meta):
            sha, meaning = old.sha256, old.meaning
        elif digest is not None:
            sha, meaning = digest[0].hex(), digest[1]
        else:
            sha, meaning = self._read_hashes(path)
        declaration, resolved = (None, None) if current is None else (current.declaration, current.resolved)
        self.seen[path] = _new_row(FileRow, (meta, sha, declaration, resolved, meaning))
        return sha, meaning

    def _read_hashes(self, path: str) -> tuple[str, str | None]:
        """A file not read whole for its declaration (a large one, not a memory file), hashed
        now: in chunks where the source can (``LocalFiles.sha256``), else read whole."""
        meaning = Meaning(self.volatile)
        hasher = getattr(self.files, "sha256", None)
        if hasher is not None:
            sha: str = hasher(path, meaning)
        else:
            data = self.files.read(path)
            sha = hashlib.sha256(data).hexdigest()
            meaning.update(data)
        return sha, meaning.hexdigest(sha)


_new_row = tuple.__new__
"""Makes a ``FileRow`` from every field without a Python ``__new__`` per call, as
``namedtuple``'s own ``_make`` does."""

_INCOMPLETE = "frontmatter is empty or cut short (being rewritten?); its last declaration is kept"


Reading = tuple[tuple[bytes, str | None] | None, Declaration, str | None, bool | None]
"""The sha256 of a file read whole and its meaning's (None past the frontmatter's limit),
its declaration, why it could not be read, and whether a frontmatter declaring nothing
looks cut short."""


def read_one(
    files: FileSource,
    path: str,
    heading: str | None,
    remembered: bool,
    forms: dict[str, int] | None,
    volatile: re.Pattern[bytes],
) -> Reading:
    """Read ``path`` for its declaration and its hash, changing nothing.  Whether a
    frontmatter looks cut short is worked out only for a ``remembered`` derived file;
    ``forms`` counts the lineage written in other words of a file that declares nothing."""
    try:
        head = files.read(path, FRONTMATTER_LIMIT + 1)
    except (OSError, NotRegular, OutsideRoot) as error:
        return None, NOTHING, describe(error), None
    truncated = len(head) > FRONTMATTER_LIMIT
    digest = None if truncated else (hashlib.sha256(head).digest(), meaning_hash(head, volatile))
    declaration = read_declaration(head[:FRONTMATTER_LIMIT] if truncated else head, truncated, heading)
    if forms is not None and not declaration.entries and (b"ource" in head or b"erive" in head):
        _count_lineage_like(head, forms, heading)
    if remembered and not declaration.entries and not declaration.problems:
        return digest, declaration, None, frontmatter_incomplete(head)
    return digest, declaration, None, None


_LINEAGE_LIKE = (
    rb"[ \t]*(?:(sources|source_files|derives_from|derived-from)[ \t]*:(?!:)"
    rb"|.*?\b(sources|derives_from|derived-from)::|(#{1,6}[ \t]+Sources)[ \t]*\r?$)"
)
"""A line of lineage in forms provgraph does not read: a frontmatter key, a Dataview field, a Sources heading."""


def _count_lineage_like(head: bytes, forms: dict[str, int], heading: str | None) -> None:
    """Count each form of lineage in other words that ``head`` writes, on the lines that
    hold ``ource`` or ``erive``."""
    found, lineage_like = set(), re.compile(_LINEAGE_LIKE)
    for word in (b"ource", b"erive"):
        at = head.find(word)
        while at >= 0:
            end = head.find(b"\n", at) % (len(head) + 1)
            line = lineage_like.match(head, head.rfind(b"\n", 0, at) + 1, end)
            if line is not None:
                key, field, title = line.groups()
                found.add(f"{key.decode()}:" if key else f"{field.decode()}::" if field else title.decode())
            at = head.find(word, end)
    for form in found - {heading}:
        forms[form] = forms.get(form, 0) + 1


def describe(error: Exception) -> str:
    """Why a file could not be read, in a few words for a problem's detail."""
    if isinstance(error, NotRegular):
        return "not a regular file"
    if isinstance(error, OutsideRoot):
        return "resolves outside the root"
    if isinstance(error, UnicodeDecodeError):
        return "invalid UTF-8"
    if isinstance(error, OSError):
        return error.strerror or type(error).__name__
    return str(error)


class DanglingEntries(ProvgraphError):
    """``stamp`` of an index that links files that do not exist: nothing is stamped."""

    def __init__(self, index: str, missing: list[str]) -> None:
        names = ", ".join(missing)
        super().__init__(f"{index} links files that do not exist: {names}; print it anew with `provgraph index`")
        self.index, self.missing = index, missing


def read_indexes(
    files: FileSource, listing: Mapping[str, FileMeta], paths: list[str], roots: tuple[str, ...] = ()
) -> tuple[IndexReading, ...]:
    """The index files among ``paths`` that exist, can be read and link a memory file, their
    links resolved as a ``derived_from`` entry's are (``roots``: the root's absolute paths):
    a ``MEMORY.md`` of prose alone is no index."""
    lookup = Lookup(listing, roots)
    readings = []
    for path in paths:
        data = _read(files, path, None) if path in listing else None
        if data is not None:
            entries = entries_of(path, data.decode("utf-8", "replace").removeprefix("\ufeff"), lookup)
            if any(entry.target is not None for entry in entries):
                readings.append(IndexReading(path, entries, hashlib.sha256(data).hexdigest()))
    return tuple(readings)


class FieldsRead(NamedTuple):
    """A file's fields, trusted while its metadata stays ``meta`` and older than ``racy_mark``
    (the time of the read less the racy window)."""

    meta: FileMeta
    fields: Fields
    racy_mark: int


def vouches(files: FileSource, before: FileMeta, now: FileMeta, racy_from_ns: int) -> bool:
    """Whether what was read of a file with metadata ``before`` still holds: the source can be
    trusted by its stat, the metadata is equal, and neither its mtime nor its ctime falls in the
    racy window (from ``racy_from_ns`` on), where a write may leave them unmoved."""
    return files.trusts_stat and before == now and max(now.mtime_ns, now.ctime_ns) < racy_from_ns


def fields_of(
    files: FileSource,
    paths: Iterable[str],
    listing: Mapping[str, FileMeta],
    kept: dict[str, FieldsRead],
    racy_mark: int,
) -> dict[str, Fields]:
    """The ``name``, ``description`` and ``type`` of each file that can be read: from
    ``kept`` while the file's metadata is unchanged and older than the racy window, else
    read now (and kept)."""
    found = {}
    for path in paths:
        meta, old = listing[path], kept.get(path)
        if old is not None and vouches(files, old.meta, meta, old.racy_mark):
            found[path] = old.fields
        elif (head := _read(files, path, FRONTMATTER_LIMIT)) is not None:
            found[path] = read_fields(head)
            kept[path] = FieldsRead(meta, found[path], racy_mark)
    return found


def _read(files: FileSource, path: str, limit: int | None) -> bytes | None:
    try:
        return files.read(path, limit)
    except (OSError, NotRegular, OutsideRoot):
        return None


def check_indexes(
    files: FileSource,
    listing: Mapping[str, FileMeta],
    readings: tuple[IndexReading, ...],
    stamps: Mapping[str, Derivation],
    now: float,
    kept: tuple[dict[str, FieldsRead], int],
    restamp: Set[str] = frozenset(),
    unindexed: Collection[str] = (),
    moved: Collection[str] | None = None,
) -> tuple[dict[str, Derivation], tuple[Problem, ...]]:
    """The indexes' entry stamps after this scan, and their problems; ``DanglingEntries``
    when an index to ``restamp`` links a file that does not exist.  ``kept``: the fields
    read before, and the racy mark of this scan (see ``fields_of``).  ``moved``: the files a
    small change moved, the only ones whose fields are read again (the others' entry stamps
    were compared when they last moved); None reads every listed file's."""
    targets = {entry.target for reading in readings for entry in reading.entries if entry.target is not None}
    for reading in readings:
        missing = sorted({target for entry in reading.entries if (target := entry.target) and target not in listing})
        if reading.path in restamp and missing:
            raise DanglingEntries(reading.path, missing)
    compared = targets.intersection(listing) if moved is None else targets.intersection(listing, moved)
    fields = fields_of(files, sorted(compared), listing, *kept)
    mtimes = {path: listing[path].mtime for path in fields}
    updated = dict(stamps)
    for reading in readings:
        updated[reading.path] = restamped(
            reading, stamps.get(reading.path), fields, mtimes, now, reading.path in restamp
        )
    digests: dict[str, str] = {}
    if targets - listing.keys():  # a dangling entry: an unlisted file holding its fields may be where it went
        indexes = [reading.path for reading in readings]
        unlisted = orphans(listing, indexes, targets, unindexed)
        digests = {path: found.digest for path, found in fields_of(files, unlisted, listing, *kept).items()}
    return updated, index_problems(readings, updated, listing.keys(), unindexed, digests)
