"""Persisting what provgraph remembers: stamps, the scan cache, the last result.

The state file is JSON written with orjson, with a format name and a schema
version.  Writes are atomic (a temporary file beside it, flush, fsync,
rename), and every read-modify-write of a root happens under an exclusive
lock, so concurrent processes never lose each other's stamps.  A state file
that cannot be read back (corrupt, truncated, another version, another
program's) is moved aside, never deleted, and provgraph starts afresh.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import glob
import hashlib
import os
import stat
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

import orjson

from .lineage import propagate
from .model import Edge, EdgeStatus, FileMeta, Problem, ProblemKind, Report, Stamp

if TYPE_CHECKING:  # imported where decoded: the no-change path never needs them
    from .declarations import Declaration
    from .scan import Seen
    from .stamps import Derivation

__all__ = ["FORMAT", "VERSION", "Recall", "State", "StateError", "StateStore", "listing_key"]

FORMAT = "provgraph-state"
VERSION = 1


class StateError(Exception):
    """The state cannot be read or written (permissions, full disk, ...).

    ``path`` is the file or folder concerned; the message is one sentence
    that names it and says what to do.
    """

    def __init__(self, path: Path, message: str) -> None:
        super().__init__(message)
        self.path = path


@dataclass
class State:
    """Everything provgraph keeps about one memory root."""

    derivations: dict[str, Derivation] = field(default_factory=dict)
    seen: dict[str, Seen] = field(default_factory=dict)
    scan_started_ns: int = 0
    """Real clock at the start of the last full scan (for the racy-file rule)."""
    report: Report | None = None
    """The last result, reused while nothing on disk changed."""
    walk_problems: tuple[Problem, ...] = ()
    refused: dict[str, ProblemKind] = field(default_factory=dict)
    """Declared sources that must not be opened (outside the root, not a regular
    file), with the kind of problem each is: the no-change check looks again."""
    settings: str = ""
    """The reading settings the cache and the last result were made with; with
    others, declarations are read again and the last result is not reused."""


@dataclass(frozen=True)
class Recall:
    """What the no-change check needs, read without the per-file tables.

    The last result holds while the memory files listed now have exactly the
    metadata recorded when they were last read (``listing`` is their
    ``listing_key``), every source outside them stats as it did then
    (``watched``), and the walk meets the same problems.
    """

    scan_started_ns: int
    walk_problems: tuple[Problem, ...]
    listing: str
    watched: tuple[tuple[str, tuple[int, ...] | str | None], ...]
    """(path, what stat said): (size, mtime_ns, ctime_ns, inode); None for a missing
    file; the problem kind's value for a refused one."""
    stored_report: bytes = field(repr=False, compare=False)
    """The last result as the file holds it (JSON)."""
    settings: str = ""
    """See ``State.settings``."""

    @cached_property
    def report(self) -> Report | None:
        """The last result, parsed when first asked for (a folder that changed never
        needs it); None when it cannot be read back, which a full scan then sorts out."""
        try:
            return _decode_report(orjson.loads(self.stored_report))
        except (orjson.JSONDecodeError, _Corrupt, KeyError, TypeError, ValueError, AttributeError, IndexError):
            return None


def listing_key(listing: Mapping[str, FileMeta]) -> str:
    """A digest of every path with its metadata, independent of listing order."""
    rows = sorted([(path, *meta) for path, meta in listing.items()])
    return hashlib.sha256(orjson.dumps(rows)).hexdigest()


class _Corrupt(Exception):
    pass


class StateStore:
    """The state file of one root, with its lock."""

    def __init__(self, path: str | os.PathLike[str], warn=None) -> None:
        self.path = Path(path)
        self._warn = warn or _warn_stderr
        self._recalled: tuple[bytes, Recall] | None = None

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """Hold the root's exclusive lock (blocking) for one read-modify-write."""
        folder = self.path.parent
        try:
            folder.mkdir(parents=True, exist_ok=True)
            descriptor = os.open(self.path.with_name(self.path.name + ".lock"), os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as error:
            raise StateError(folder, _cannot("use the state folder", folder, error)) from error
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX)
            self._remove_leftovers()
            yield
        finally:
            os.close(descriptor)

    def _remove_leftovers(self) -> None:
        """Delete the temporary files of writers killed before their rename: every writer
        holds the lock, so while we hold it no temporary file is in use."""
        for leftover in self.path.parent.glob(glob.escape(self.path.name) + ".*.tmp"):
            with contextlib.suppress(OSError):
                leftover.unlink()

    def load(self) -> State:
        self._recalled = None  # a full load follows a change: the kept head is stale
        try:
            data = _read_regular(self.path)
        except FileNotFoundError:
            return State()
        except OSError as error:
            raise StateError(self.path, _cannot("read the state file", self.path, error)) from error
        try:
            document = orjson.loads(data)
            del data  # a large folder's state: the bytes and the objects need not coexist
            return _decode(document)
        except (orjson.JSONDecodeError, _Corrupt, KeyError, TypeError, ValueError, AttributeError, IndexError) as error:
            self._set_aside(error)
            return State()

    def recall(self) -> Recall | None:
        """The no-change part of the state, or None when there is none to trust.

        The file lists that part first (up to ``derivations``), so only those
        bytes are parsed; the last answer is kept while they are the same.
        Anything unexpected is left to ``load``, which reads it all and sets an
        unreadable file aside.
        """
        try:
            head = _read_head(self.path)
        except OSError:
            return None
        if head is None:
            return None
        if self._recalled is not None and self._recalled[0] == head:
            return self._recalled[1]
        split = head.find(_REPORT)
        if split < 0:
            return None
        try:
            recall = _decode_recall(orjson.loads(head[:split] + b"}"), bytes(head[split + len(_REPORT) :]))
        except (orjson.JSONDecodeError, _Corrupt, KeyError, TypeError, ValueError, AttributeError, IndexError):
            return None
        self._recalled = (bytes(head), recall) if recall is not None else None
        return recall

    def _set_aside(self, error: Exception) -> None:
        stamp = time.strftime("%Y%m%dT%H%M%S")
        aside = self.path.with_name(f"{self.path.name}.corrupt-{stamp}")
        counter = 1
        while aside.exists():
            counter += 1
            aside = self.path.with_name(f"{self.path.name}.corrupt-{stamp}-{counter}")
        try:
            os.replace(self.path, aside)
        except OSError as move_error:
            raise StateError(
                self.path, _cannot("move the unreadable state file aside", self.path, move_error)
            ) from error
        reason = str(error) if isinstance(error, _Corrupt) else "it is not valid provgraph state"
        self._warn(f"state file {self.path} could not be read ({reason}); kept as {aside.name}, starting afresh")

    def save(self, state: State) -> None:
        import tempfile  # only a write needs it

        self._recalled = None
        folder = self.path.parent
        temporary = None
        try:
            descriptor, temporary = tempfile.mkstemp(prefix=self.path.name + ".", suffix=".tmp", dir=folder)
            os.fchmod(descriptor, 0o644)
            with os.fdopen(descriptor, "wb") as handle:
                handle.writelines(_encoded(state))
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(temporary, self.path)
            temporary = None
            _fsync_folder(folder)
        except OSError as error:
            raise StateError(self.path, _cannot("write the state file", self.path, error)) from error
        finally:
            if temporary is not None:
                with contextlib.suppress(OSError):
                    os.unlink(temporary)


def _read_regular(path: Path) -> bytes:
    """The state file's bytes.  Anything but a regular file there (a FIFO would block
    forever, ``/dev/zero`` never end) is an error, found without reading it."""
    descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0))
    try:
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):
            raise OSError(errno.EINVAL, "not a regular file", str(path))
        with os.fdopen(descriptor, "rb", closefd=False) as handle:
            return handle.read()
    finally:
        os.close(descriptor)


def _read_head(path: Path) -> bytearray | None:
    """The state file's bytes up to its per-file tables (most of a large file), read a
    chunk at a time; None when there is no such mark."""
    descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0))
    try:
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):
            raise OSError(errno.EINVAL, "not a regular file", str(path))
        head = bytearray()
        while chunk := os.read(descriptor, _HEAD_CHUNK):
            searched = max(0, len(head) - len(_TABLES) + 1)
            head += chunk
            end = head.find(_TABLES, searched)
            if end >= 0:
                del head[end:]
                return head
        return None
    finally:
        os.close(descriptor)


_HEAD_CHUNK = 256 * 1024


def _fsync_folder(folder: Path) -> None:
    with contextlib.suppress(OSError):
        descriptor = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(descriptor)
        finally:
            os.close(descriptor)


def _cannot(what: str, path: Path, error: OSError) -> str:
    reason = error.strerror or type(error).__name__
    hint = " (use --state PATH to keep provgraph's state elsewhere)" if error.errno in (1, 13, 30) else ""
    return f"cannot {what} {path}: {reason}{hint}"


def _warn_stderr(message: str) -> None:
    print(f"provgraph: warning: {message}", file=sys.stderr)


# -- encoding ----------------------------------------------------------------
# Plain lists keep the file small: a state file holds one row per memory file.


_TABLES = b',"derivations":'
"""Where the per-file tables start in a state file, after what ``recall`` reads
(inside a JSON string a quote is always escaped, so these bytes mark the key)."""
_REPORT = b',"report":'
"""Where the last result starts: ``recall`` parses it only once the check passed."""


def _encoded(state: State) -> Iterator[bytes]:
    """The state file's bytes, one top-level entry at a time, as ``orjson.dumps`` would
    write the whole object: a large folder's tables are never all held as lists at once."""
    yield b"{"
    for index, (key, value) in enumerate(_entries(state)):
        yield (b',"' if index else b'"') + key.encode() + b'":' + orjson.dumps(value)
    yield b"}"


def _entries(state: State) -> Iterator[tuple[str, object]]:
    """Each top-level entry, built only when it is written; the no-change check's part first."""
    yield "format", FORMAT
    yield "version", VERSION
    yield "scan_started_ns", state.scan_started_ns
    yield "settings", state.settings
    yield "walk_problems", [_encode_problem(problem) for problem in state.walk_problems]
    yield from _encode_recall(state).items()
    yield "report", None if state.report is None else _encode_report(state.report)
    yield (
        "derivations",
        {
            path: {
                "derived_at": derivation.derived_at,
                "stamps": {
                    source: [stamp.sha256, stamp.stamped_at, stamp.mismatch_since]
                    for source, stamp in derivation.stamps.items()
                },
            }
            for path, derivation in state.derivations.items()
        },
    )
    yield (
        "seen",
        {path: [*seen.meta, seen.sha256, _encode_declaration(seen.declaration)] for path, seen in state.seen.items()},
    )
    yield "refused", {path: kind.value for path, kind in sorted(state.refused.items())}


def _encode_recall(state: State) -> dict:
    """The no-change check's part, derived from the rest: the memory files read at the
    last full scan are the ones seen with a declaration; the sources outside them are
    the report's and the refused ones."""
    read = {path: seen.meta for path, seen in state.seen.items() if seen.declaration is not None}
    outside = {edge.source for edge in state.report.edges} if state.report is not None else set()
    watched = [[path, _outcome(state, path)] for path in sorted((outside | state.refused.keys()) - read.keys())]
    return {"listing": listing_key(read), "watched": watched}


def _outcome(state: State, path: str) -> list[int] | str | None:
    kind = state.refused.get(path)
    if kind is not None:
        return kind.value
    seen = state.seen.get(path)
    return None if seen is None else list(seen.meta)


_NO_DECLARATION: tuple = ()
"""How most files encode, as an empty list: no ``derived_from``, no ``derived_at``, no problem."""


def _encode_declaration(declaration: Declaration | None) -> list | tuple | None:
    if declaration is None:
        return None
    if not declaration.entries and declaration.derived_at is None and not declaration.problems:
        return _NO_DECLARATION
    return [
        list(declaration.entries),
        declaration.derived_at,
        [[kind.value, detail] for kind, detail in declaration.problems],
    ]


def _encode_problem(problem: Problem) -> list:
    return [problem.path, problem.kind.value, problem.detail]


def _encode_report(report: Report) -> dict:
    """Stale entries are not stored: they follow from the edges, and their chains grow with
    the square of the depth (a 10,000-deep chain would make a state file of half a gigabyte)."""
    return {
        "root": report.root,
        "files": report.files,
        "edges": [[e.source, e.derived, e.status.value, e.stamped_at, e.since, e.moved_to] for e in report.edges],
        "cycles": [list(cycle) for cycle in report.cycles],
        "problems": [_encode_problem(problem) for problem in report.problems],
    }


def _check_format(data: dict) -> None:
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise _Corrupt("it is not a provgraph state file")
    if data.get("version") != VERSION:
        raise _Corrupt(f"unknown state version {data.get('version')!r}, this provgraph reads version {VERSION}")


def _decode_recall(data: dict, report: bytes) -> Recall | None:
    _check_format(data)
    if report == b"null":
        return None
    watched = tuple((_text(path), _decode_outcome(outcome)) for path, outcome in data["watched"])
    return Recall(
        int(data["scan_started_ns"]),
        tuple(_decode_problem(row) for row in data["walk_problems"]),
        _text(data["listing"]),
        watched,
        report,
        _text(data.get("settings", "")),
    )


def _decode_outcome(outcome: object) -> tuple[int, ...] | str | None:
    if outcome is None or isinstance(outcome, str):
        return outcome
    if not isinstance(outcome, list) or len(outcome) != 4:
        raise _Corrupt("a watched source must hold a stat result, null or a problem kind")
    return tuple(int(number) for number in outcome)


def _decode(data: dict) -> State:
    from .stamps import Derivation

    _check_format(data)
    # each table is taken out of the document as it is decoded, so its lists go at once
    return State(
        derivations={
            _text(path): Derivation(_optional_text(record["derived_at"]), _decode_stamps(record["stamps"]))
            for path, record in data.pop("derivations").items()
        },
        seen=_decode_seen(data.pop("seen")),
        scan_started_ns=int(data["scan_started_ns"]),
        walk_problems=tuple(_decode_problem(row) for row in data["walk_problems"]),
        report=None if data["report"] is None else _decode_report(data.pop("report")),
        refused={_text(path): ProblemKind(kind) for path, kind in data["refused"].items()},
        settings=_text(data.get("settings", "")),
    )


def _decode_stamps(stamps: dict) -> dict[str, Stamp]:
    decoded = {}
    for source, (sha, at, since) in stamps.items():
        decoded[_text(source)] = Stamp(_optional_text(sha), float(at), None if since is None else float(since))
    return decoded


def _decode_seen(table: dict) -> dict[str, Seen]:
    """One row per file, decoded in one tight loop: a scan after a change needs them all."""
    from .declarations import NOTHING, Declaration
    from .scan import Seen

    seen = {}
    for path, (size, mtime_ns, ctime_ns, inode, sha, declaration) in table.items():
        meta = FileMeta(int(size), int(mtime_ns), int(ctime_ns), int(inode))
        if declaration is not None:
            entries, derived_at, problems = declaration or ((), None, ())
            if entries or derived_at is not None or problems:
                declaration = Declaration(
                    tuple(_text(entry) for entry in entries),
                    _optional_text(derived_at),
                    tuple((ProblemKind(kind), _text(detail)) for kind, detail in problems),
                )
            else:
                declaration = NOTHING
        seen[_text(path)] = Seen(meta, _optional_text(sha), declaration)
    return seen


def _decode_problem(row: list) -> Problem:
    path, kind, detail = row
    return Problem(_text(path), ProblemKind(kind), _text(detail))


def _decode_report(data: dict) -> Report:
    edges = _decode_edges(data["edges"])
    return Report(
        root=_text(data["root"]),
        scanned_at=datetime.fromtimestamp(0, UTC),
        files=int(data["files"]),
        edges=edges,
        stale=propagate(edges),
        cycles=tuple(tuple(_text(path) for path in cycle) for cycle in data["cycles"]),
        problems=tuple(_decode_problem(row) for row in data["problems"]),
    )


def _decode_edges(rows: list) -> tuple[Edge, ...]:
    """One row per declared source: checked and built in one tight loop, since the
    no-change path decodes them all."""
    status_of = _EDGE_STATUS
    edges = []
    for source, derived, status, at, since, moved_to in rows:
        if type(source) is not str or type(derived) is not str:
            raise _Corrupt("an edge must join two paths")
        at = None if at is None else float(at)
        since = None if since is None else float(since)
        edges.append(Edge(source, derived, status_of[status], at, since, _optional_text(moved_to)))
    return tuple(edges)


_EDGE_STATUS = {status.value: status for status in EdgeStatus}


def _text(value: object) -> str:
    if not isinstance(value, str):
        raise _Corrupt(f"expected text, found {type(value).__name__}")
    return value


def _optional_text(value: object) -> str | None:
    return None if value is None else _text(value)
