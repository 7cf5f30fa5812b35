"""Persisting what provgraph remembers, in two parts that age differently.

The **lock** (``provgraph.lock``, see ``lockfile``) holds the stamps: portable
facts, committed and synced with the memory.  The **cache** (``cache.json`` in
``.provgraph/``) holds what makes a warm check cheap: what each file's stat
said when it was read, its hash and declaration, the last result.  It means
something on one machine only and may be deleted at any time: a scan rebuilds
it from the files and the lock.  The cache is JSON written with orjson, with a
format name and a schema version, and records the root and the lock it was
written with, so it is never used for another folder or another lock.

Writes are atomic (see ``statefolder``), and every read-modify-write of a root
happens under an exclusive lock, so concurrent processes never lose each
other's stamps.  A file that cannot be read back (corrupt, truncated, another
version, another program's) is moved aside, never deleted, and provgraph
starts afresh.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import marshal
import os
import stat
from _thread import _local as thread_local  # what threading.local is, without importing threading (~1 ms a run)
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from datetime import UTC, datetime
from functools import cached_property, partial
from itertools import chain
from operator import itemgetter

import orjson

from .clock import wall_ns
from .codec import (
    FORMAT,
    REPORT,
    TABLES,
    VERSION,
    Bytes,
    Checksum,
    Chunks,
    EdgeBatch,
    EdgeBatches,
    RowTable,
    Span,
    StoredEdges,
    StoredReport,
    decode_edges,
    decode_legacy,
    decode_report,
    decode_seen,
    derivations_of,
    edge_batches,
    edge_row,
    encode_report,
    encode_seen,
    encode_table,
    lock_bytes,
    sized,
    sized_spans,
    split_cache,
    stream,
)
from .codec import Corrupt as _Corrupt  # the codec's names, private to the store
from .codec import check_format as _check_format
from .codec import decode_problem as _decode_problem
from .codec import encode_problem as _encode_problem
from .codec import text as _text
from .errors import ProvgraphError, log_warning
from .incremental import FILES_PER_PART, LockData, LockLines, MemoryFiles, Patch, Previous, racy_files
from .lineage import children_of, propagate
from .lockfile import LOCK_NAME, LockError, LockRead, decode_lock, decode_stamps, is_sync_copy, merge_reads
from .model import Edge, EdgeStatus, FileMeta, Frozen, NamedTuple, Problem, ProblemKind, Report, broken_edges, column
from .nochange import (
    RACY_WINDOW_NS,
    Conditions,
    LockSeal,
    decode_watched,
    encode_watched,
    joined_paths,
    listing_key,
    listing_parts,
    lock_as_sealed,
    watched_sources,
)
from .paths import normalized as _normalized
from .statefolder import (
    Folders,
    hold,
    in_memory_tree,
    open_folder,
    read_file,
    remove_temporaries,
    set_aside,
    write_file,
)

TYPE_CHECKING = False
if TYPE_CHECKING:  # imported where decoded: the no-change path never needs them
    from typing import Any

    from .scan import Seen
    from .stamps import Derivation

__all__ = [
    "CACHE_NAME",
    "FORMAT",
    "LOCK_NAME",
    "STATE_DIR",
    "VERSION",
    "LockSeal",
    "Previous",
    "Recall",
    "State",
    "StateError",
    "StateStore",
    "listing_key",
    "memory_files",
    "memory_files_read",
]

STATE_DIR = ".provgraph"
CACHE_NAME = "cache.json"
FLOCK_NAME = "flock"
"""The file whose ``flock`` is the root's exclusive lock (it holds no data)."""
ROOT_NAME = "root"
"""In a ``--state`` folder: the memory root it belongs to."""
LEGACY_NAME = "state.json"


class StateError(ProvgraphError):
    """The state cannot be read or written (permissions, full disk, ...).

    ``path`` is the file or folder concerned; the message is one sentence
    that names it and says what to do.
    """

    def __init__(self, path: str | os.PathLike[str], message: str) -> None:
        from pathlib import Path  # only on an error: a refresh that goes well never makes a Path

        super().__init__(message)
        self.path = Path(path)


class State:
    """Everything provgraph keeps about one memory root.

    Compared by its fields.  A plain class, not a dataclass: ~0.5 ms less to create on
    every full run."""

    __slots__ = ("derivations", "seen", "scan_started_ns", "report", "walk_problems", "refused", "settings")
    derivations: dict[str, Derivation]
    seen: dict[str, Seen]
    scan_started_ns: int
    """Real clock at the start of the last full scan (for the racy-file rule)."""
    report: Report | None
    """The result of this scan; None in a state just loaded (a scan after a change never
    needs the last one: ``StateStore.last_report`` reads it when asked)."""
    walk_problems: tuple[Problem, ...]
    refused: dict[str, ProblemKind]
    """Declared sources that must not be opened (outside the root, not a regular
    file), with the kind of problem each is: the no-change check looks again."""
    settings: str
    """The reading settings the cache and the last result were made with; with
    others, declarations are read again and the last result is not reused."""

    def __init__(
        self,
        derivations: dict[str, Derivation] | None = None,
        seen: dict[str, Seen] | None = None,
        scan_started_ns: int = 0,
        report: Report | None = None,
        walk_problems: tuple[Problem, ...] = (),
        refused: dict[str, ProblemKind] | None = None,
        settings: str = "",
    ) -> None:
        self.derivations = {} if derivations is None else derivations
        self.seen = {} if seen is None else seen
        self.scan_started_ns, self.report, self.walk_problems = scan_started_ns, report, walk_problems
        self.refused = {} if refused is None else refused
        self.settings = settings

    def _asdict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__slots__}

    def _replace(self, **changes: Any) -> State:
        """A copy with ``changes``, as a ``NamedTuple``'s ``_replace`` makes one."""
        return State(**{**self._asdict(), **changes})

    def __eq__(self, other: object) -> bool:
        return type(other) is State and self._asdict() == other._asdict()

    def __repr__(self) -> str:
        return "State(" + ", ".join(f"{name}={value!r}" for name, value in self._asdict().items()) + ")"


class Recall(Frozen):
    """The head of the cache, read without the per-file tables: what the last full scan
    saw (``conditions``, checked by ``nochange.holds``) and its result, still encoded.
    Equal only to itself: nothing compares two.  A ``Frozen`` class, not a dataclass:
    ~0.5 ms less to create on every full run."""

    root: str
    conditions: Conditions
    stored_report: bytes
    """The last result as the file holds it (JSON)."""

    def __init__(self, root: str, conditions: Conditions, stored_report: bytes) -> None:
        super().__init__(root=root, conditions=conditions, stored_report=stored_report)

    @cached_property
    def report(self) -> Report | None:
        """The last result, parsed when first asked for (a folder that changed never
        needs it); None when it cannot be read back, which a full scan then sorts out."""
        try:
            return _decode_report(orjson.loads(self.stored_report))
        except (orjson.JSONDecodeError, _Corrupt, KeyError, TypeError, ValueError, AttributeError, IndexError):
            return None


class _Transaction:
    """What one transaction opened and read: a ``Memory`` may be used from several threads.
    A plain class, not a dataclass: ~0.4 ms less to create on every full run."""

    __slots__ = (
        "folders",
        "exclusive",
        "lock_bytes",
        "migrating",
        "seal",
        "cache",
        "lock_file",
        "as_locked",
        "hashed_lock",
    )
    folders: Folders | None
    exclusive: bool
    lock_bytes: bytes | None
    """The lock as this transaction loaded it: it is rewritten only when it changes."""
    migrating: bool
    """A schema-1 ``state.json`` was read: set it aside once the lock is written."""
    seal: LockSeal | None
    """What the cache says the lock was when it was written."""
    cache: int | None
    """The cache as ``previous`` opened it, kept open until the transaction ends: the batches
    of rows a patch leaves alone are copied from it as they were read."""
    lock_file: int | None
    """The lock as ``previous`` opened it, when a patch reads it where it looks (``_PagedLock``),
    kept open until the transaction ends."""
    as_locked: dict[str, Derivation] | None
    """The stamps as loaded, when the lock's bytes are exactly their encoding (clean, and
    the very bytes the seal vouches for): a save with equal stamps neither encodes nor
    rewrites the lock."""
    hashed_lock: bytes | None
    """The lock's bytes as ``previous`` read them, when they were hashed and found to be
    the sealed ones (a young lock, whose metadata proves nothing yet)."""

    def __init__(self, folders: Folders | None = None, exclusive: bool = False) -> None:
        self.folders, self.exclusive, self.migrating = folders, exclusive, False
        self.lock_bytes = self.seal = self.cache = self.lock_file = self.as_locked = self.hashed_lock = None


class StateStore:
    """The lock and the cache of one root, with the exclusive lock that guards them.

    By default the lock is ``ROOT/provgraph.lock`` and the cache folder
    ``ROOT/.provgraph/``; with ``folder`` (``--state``) both live in that folder,
    which then records the root it belongs to.
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        folder: str | os.PathLike[str] | None = None,
        warn: Callable[[str], None] | None = None,
    ) -> None:
        self.root = _normalized(root)
        self.folder = _normalized(folder) if folder is not None else None
        self.state_path = self.folder if self.folder is not None else os.path.join(self.root, STATE_DIR)
        self.lock_path = os.path.join(self.folder if self.folder is not None else self.root, LOCK_NAME)
        self.cache_path = os.path.join(self.state_path, CACHE_NAME)
        self._warn = warn or log_warning
        self._recalled: tuple[bytes, Recall] | None = None
        self._local = thread_local()

    @property
    def _tx(self) -> _Transaction:
        """This thread's transaction (an idle one outside ``locked`` and ``unlocked``)."""
        current = getattr(self._local, "transaction", None)
        if current is None:
            current = self._local.transaction = _Transaction()
        return current

    def _begin(self, folders: Folders | None, *, exclusive: bool) -> None:
        ended = getattr(self._local, "transaction", None)
        for descriptor in () if ended is None else (ended.cache, ended.lock_file):
            if descriptor is not None:
                os.close(descriptor)
        if folders is not None:
            self._local.known_lock = None  # the last transaction's, asked for once it ended or never
        self._local.transaction = _Transaction(folders, exclusive)

    # -- the folders and the exclusive lock --

    @contextlib.contextmanager
    def locked(self, wait: float = 3600.0) -> Iterator[None]:
        """Hold the root's exclusive lock for one read-modify-write, waiting at most
        ``wait`` seconds (``LockBusy`` then)."""
        folders = self._open(create=True)
        assert folders is not None
        try:
            try:
                descriptor = hold(folders.state, FLOCK_NAME, wait)
            except OSError as error:
                raise StateError(
                    self.state_path, _cannot("lock", os.path.join(self.state_path, FLOCK_NAME), error)
                ) from error
            try:
                self._check_root(folders, write=True)
                remove_temporaries(folders)
                self._begin(folders, exclusive=True)
                yield
            finally:
                self._begin(None, exclusive=False)
                os.close(descriptor)
        finally:
            folders.close()

    @contextlib.contextmanager
    def unlocked(self) -> Iterator[None]:
        """Read what is there without the lock (another process holds it): files are
        replaced whole, so what is read is whole; nothing is written or set aside."""
        folders = self._open(create=False)
        try:
            if folders is not None:
                self._check_root(folders, write=False)
            self._begin(folders, exclusive=False)
            yield
        finally:
            self._begin(None, exclusive=False)
            if folders is not None:
                folders.close()

    def _open(self, *, create: bool) -> Folders | None:
        """The state folder and the lock's folder, each checked to be a real folder."""
        try:
            if self.folder is None:
                lock = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
                try:
                    state = open_folder(self.root, STATE_DIR, create=create)
                except BaseException:
                    os.close(lock)
                    raise
                return Folders(-1 if state is None else state, lock, self.state_path, self.root)
            self._refuse_memory_tree()
            parent, name = os.path.dirname(self.folder) or os.curdir, os.path.basename(self.folder)
            if create:
                os.makedirs(parent, exist_ok=True)
            elif not os.path.isdir(parent):
                return None
            state = open_folder(parent, name, create=create)
            return None if state is None else Folders(state, state, self.folder, self.folder)
        except NotADirectoryError as error:
            raise StateError(
                self.state_path,
                f"{error.filename or self.state_path} is not a real folder (a symlink or a file): provgraph keeps "
                "its state only in a folder of its own (--state names that folder; for a state.json of an earlier "
                "version, the folder that holds it)",
            ) from error
        except OSError as error:
            raise StateError(self.state_path, _cannot("use the state folder", self.state_path, error)) from error

    def _refuse_memory_tree(self) -> None:
        """A ``--state`` folder inside the memory folder must be ``.provgraph`` or below it:
        anywhere else provgraph could overwrite a memory file."""
        assert self.folder is not None
        if in_memory_tree(self.folder, self.root, STATE_DIR):
            raise StateError(
                self.folder,
                f"--state {self.folder} lies in the memory folder {self.root}: provgraph keeps its files there "
                f"only in {STATE_DIR}/",
            )

    def _check_root(self, folders: Folders, *, write: bool) -> None:
        """A ``--state`` folder belongs to one memory root: it records it, and refuses another."""
        if self.folder is None:
            return
        recorded = self._read(folders.state, ROOT_NAME, self.state_path)
        if recorded is None:
            if write:
                self._write(folders, folders.state, ROOT_NAME, [os.fsencode(self.root)], "record the root in")
            return
        other = os.fsdecode(recorded)
        if os.path.realpath(other) != os.path.realpath(self.root):
            raise StateError(
                self.state_path,
                f"state folder {self.state_path} belongs to the memory folder {other}, not {self.root}: "
                "pass another --state folder",
            )

    # -- reading --

    def load(self) -> State:
        """Stamps from the lock (or from a schema-1 ``state.json`` to convert), the rest
        from the cache.  Damage is set aside with one warning and rebuilt."""
        self._recalled = None  # a full load follows a change: the kept head is stale
        self._tx.migrating, self._tx.seal = False, None
        folders = self._tx.folders
        if folders is None:
            return State()
        state = self._load_cache(folders)
        state.derivations = self._load_lock(folders)
        if self._tx.as_locked is not None and not self.lock_unchanged(self._tx.seal):
            self._tx.as_locked = None
        return state

    def _load_lock(self, folders: Folders) -> dict[str, Derivation]:
        self._tx.as_locked = None
        self._tx.lock_bytes = data = self._read(folders.lock, LOCK_NAME, folders.lock_path)
        if data is None:
            return self._load_legacy(folders)
        clean = None if any(map(is_sync_copy, _names(folders.lock))) else decode_stamps(data)
        if clean is not None:  # the common case, read without a table of records
            self._tx.as_locked = derivations_of(clean)
            return self._tx.as_locked
        try:
            read = decode_lock(data)
        except LockError as error:
            self._set_aside(folders, folders.lock, LOCK_NAME, str(error))
            return {}
        if read.damaged:
            self._set_aside(folders, folders.lock, LOCK_NAME, f"{read.damaged} line(s) are not valid stamps", kept=True)
        elif read.merged and self._tx.exclusive:
            self._warn(
                f"{self.lock_path} holds merged lines ({read.merged} repeated edges or conflict markers); "
                "took the newest stamp of each edge"
            )
        copies = self._sync_copies(folders)
        derivations = derivations_of(merge_reads(read, copies).derivations())
        self._tx.as_locked = derivations if not (read.damaged or read.merged or copies) else None
        return derivations

    def _sync_copies(self, folders: Folders) -> list[LockRead]:
        """The conflict copies a sync tool left beside the lock, read like the lock and
        merged into it; each is then moved into the state folder, kept."""
        copies = []
        for name in sorted(filter(is_sync_copy, _names(folders.lock))):
            data = self._read(folders.lock, name, folders.lock_path)
            try:
                copies.append(decode_lock(data or b""))
            except LockError as error:
                self._set_aside(folders, folders.lock, name, str(error))
                continue
            if self._tx.exclusive:
                aside = self._move_aside(folders, folders.lock, name, "merged")
                self._warn(
                    f"merged {os.path.join(folders.lock_path, name)} into {self.lock_path}; the copy is kept as {aside}"
                )
        return copies

    def _load_legacy(self, folders: Folders) -> dict[str, Derivation]:
        """A schema-1 ``state.json`` from before the lock: its stamps, converted once."""
        if folders.state < 0:
            return {}
        data = self._read(folders.state, LEGACY_NAME, self.state_path)
        if data is None:
            return {}
        try:
            derivations = decode_legacy(orjson.loads(data))
        except (orjson.JSONDecodeError, _Corrupt, KeyError, TypeError, ValueError, AttributeError) as error:
            reason = str(error) if isinstance(error, _Corrupt) else "it is not valid provgraph state"
            self._set_aside(folders, folders.state, LEGACY_NAME, reason)
            return {}
        self._tx.migrating = self._tx.exclusive
        return derivations

    def _load_cache(self, folders: Folders) -> State:
        data = self._read(folders.state, CACHE_NAME, self.state_path) if folders.state >= 0 else None
        if data is None:
            return State()
        try:
            head, _, tables = split_cache(data)
            del data  # a large folder's cache: the bytes and the objects need not coexist
            document = orjson.loads(head)
            if not isinstance(document, dict) or document.get("root") != os.fsdecode(self.root):
                return State()  # the folder was copied or moved: another machine's cache
            document.update(orjson.loads(tables))
            del tables
            state = _decode(document)
            self._tx.seal = _decode_seal(document["lock"])
            return state
        except (orjson.JSONDecodeError, _Corrupt, KeyError, TypeError, ValueError, AttributeError, IndexError) as error:
            reason = str(error) if isinstance(error, _Corrupt) else "it is not a valid provgraph cache"
            self._set_aside(folders, folders.state, CACHE_NAME, reason)
            return State()

    def has_cache(self) -> bool:
        """Whether the state folder holds a cache at all: a first scan has none, and need
        not prepare what a patch of one reads (``api``'s listing record, ``previous``)."""
        folders = self._tx.folders
        if folders is None or folders.state < 0:
            return False
        try:
            os.stat(CACHE_NAME, dir_fd=folders.state, follow_symlinks=False)
        except OSError:
            return False  # ``previous`` could not read it either
        return True

    def last_report(self) -> Report | None:
        """The last result the cache holds (its stale entries propagated again), or None."""
        folders = self._tx.folders
        data = self._read(folders.state, CACHE_NAME, self.state_path) if folders and folders.state >= 0 else None
        try:
            return None if data is None else _decode_report(orjson.loads(split_cache(data)[1]))
        except (orjson.JSONDecodeError, _Corrupt, KeyError, TypeError, ValueError, AttributeError, IndexError):
            return None

    def previous(self, settings: str, walk_problems: tuple[Problem, ...]) -> Previous | None:
        """The last scan, its per-file rows undecoded, with the lock's lines, when a small
        change can be patched into it: the cache is whole, for this root and these
        settings, with nothing refused and the same walk problems, and the lock is the
        one it was written with.  Else None, and ``load`` reads (or sets aside) it all.

        The cache's parts are parsed one after the other, from the bytes read, so that
        a large folder's parsed tables never sit beside a parse of the whole file; its
        per-file table is never held whole (its batches are read from the file when asked
        for), and what is read of the rest is let go before the lock is read."""
        self._recalled = None  # the head the no-change check kept: a patch never needs it
        folders = self._tx.folders
        if folders is None or folders.state < 0 or not self._tx.exclusive:
            return None
        try:
            if self._tx.cache is not None:
                os.close(self._tx.cache)
                self._tx.cache = None
            self._tx.cache = os.open(CACHE_NAME, _READ_FLAGS, dir_fd=folders.state)
            if not stat.S_ISREG(os.fstat(self._tx.cache).st_mode):
                return None
            front = _read_to(self._tx.cache, TABLES)
            tail = _read_tail(self._tx.cache, _REFUSED)
        except OSError:
            return None  # ``load`` reads it again, and says why when it cannot
        if front is None or tail is None:
            return None
        lock_read = _LockRead(partial(self._lock_bytes_or_none, folders))
        try:
            parsed = self._parsed(front, tail, settings, walk_problems, partial(_read_span, self._tx.cache), lock_read)
            del front, tail
            lock_data = None if parsed is None else self._lock_data(folders, lock_read)
            if parsed is None or lock_data is None:
                return None
            self._tx.hashed_lock = lock_read() if lock_read.hashed else None
            head, stored, lineage = parsed
            lock = LockLines.of(lock_data, head.get("lock_canonical") is True)
            files = _decode_memory_files(head["memory_files"], head["listing"])
            others = tuple(map(_text, head["others"]))
        except (orjson.JSONDecodeError, _Corrupt, KeyError, TypeError, ValueError, AttributeError, IndexError):
            return None
        if lock is None:
            return None
        return Previous(
            root=os.fsdecode(self.root),
            rows=lineage.rows,
            memory_files=files,
            others=others,
            edges=lineage.edges,
            broken=lineage.broken,
            children=lineage.children,
            cycles=stored.cycles,
            problems=stored.problems,
            walk_problems=walk_problems,
            scan_started_ns=int(head["scan_started_ns"]),
            lock=lock,
        )

    def _lock_data(self, folders: Folders, lock_read: _LockRead) -> LockData | None:
        """The lock's bytes for a patch: those read to be hashed against the seal when they
        were, else the lock file opened and read where the patch looks (``_PagedLock``),
        when it is the very file the seal names (the metadata that proved it unchanged);
        else read whole."""
        if lock_read.hashed or self._tx.seal is None:
            return lock_read()
        if self._tx.lock_file is not None:
            os.close(self._tx.lock_file)
            self._tx.lock_file = None
        try:
            descriptor = os.open(LOCK_NAME, _READ_FLAGS, dir_fd=folders.lock)
        except OSError:
            return lock_read()
        info = os.fstat(descriptor)
        if (info.st_size, info.st_mtime_ns, info.st_ctime_ns, info.st_ino) != self._tx.seal.meta:
            os.close(descriptor)
            return lock_read()
        self._tx.lock_file = descriptor
        return _PagedLock(descriptor, info.st_size)

    def _parsed(
        self,
        head: bytearray,
        tail: tuple[int, bytes],
        settings: str,
        walk_problems: tuple[Problem, ...],
        read: Span,
        lock_read: _LockRead,
    ) -> tuple[dict[str, Any], StoredReport, _Read] | None:
        """The cache's head, last result and what a patch reads instead of its edges, when the
        head says a patch may build on them and on the lock (``_patchable``).  ``head`` is
        the cache up to its per-file table, ``tail`` where the small entries after the
        tables start and their bytes: the per-file table is never held, its batches are
        read (``read``) when asked for."""
        report_at, tables_at, (refused_at, rest) = head.find(REPORT), len(head), tail
        if not 0 < report_at < tables_at < refused_at:
            return None
        document = orjson.loads(head[:report_at] + b"}")
        document.update(orjson.loads(b"{" + rest[1:]))
        if document.get("version") != VERSION or document.get("edge_batches") is None:
            return None  # an earlier layout, or edges a patch cannot build on: the full scan answers
        if not self._patchable(document, settings, walk_problems, lock_read):
            return None
        stored, (edges_at, edges_end) = _report_without_edges(head, report_at + len(REPORT), tables_at)
        seen_at, sizes = tables_at + len(TABLES), document["row_sizes"]
        if not isinstance(sizes, list) or not all(type(size) is int and size > 0 for size in sizes):
            return None
        children_at = seen_at + sum(sizes) + len(_CHILDREN)
        if not children_at < refused_at or read(children_at - len(_CHILDREN), children_at) != _CHILDREN:
            return None
        view, children = memoryview(head), read(children_at, refused_at)
        if _checksum(document, view[edges_at:edges_end], children) != document["index_check"]:
            return None  # a damaged index: the full scan rewrites it
        spans = sized_spans(edges_at, edges_end, document["edge_sizes"])
        if spans is None:
            return None
        lineage = _Read(
            RowTable(read, seen_at, children_at - len(_CHILDREN), document["row_batches"], sizes),
            StoredEdges(view, spans, document["edge_batches"]),
            decode_edges(document["broken"]),
            RowTable(
                partial(_slice, children), 0, len(children), document["children_batches"], document["children_sizes"]
            ),
        )
        return document, stored, lineage

    def _patchable(self, head: Any, settings: str, walk_problems: tuple[Problem, ...], lock_read: _LockRead) -> bool:
        """Whether the cache is for this root and these settings, with nothing refused and
        the same walk problems, and the lock is the one it was written with (its bytes, when
        they must be read for that, read by ``lock_read`` once: the patch reads the same)."""
        _check_format(head)
        if head["root"] != os.fsdecode(self.root) or head.get("settings", "") != settings or head["refused"]:
            return False
        if tuple(_decode_problem(row) for row in head["walk_problems"]) != walk_problems:
            return False
        seal = _decode_seal(head["lock"])
        if seal is None or not self.lock_unchanged(seal, lock_read.hashing):
            return False
        self._tx.seal = seal
        return True

    def recall(self) -> Recall | None:
        """The no-change part of the cache, or None when there is none to trust.

        The cache lists that part first (up to ``seen``), so only those bytes
        are parsed; the last answer is kept while they are the same.  Anything
        unexpected is left to ``load``, which reads it all and sets an
        unreadable file aside.
        """
        folders = self._tx.folders
        if folders is None or folders.state < 0:
            return None
        try:
            head = _read_head(folders.state, CACHE_NAME)
        except OSError:
            return None
        if head is None:
            return None
        if self._recalled is not None and self._recalled[0] == head:
            return self._recalled[1]
        split = head.find(REPORT)
        if split < 0:
            return None
        try:
            recall = _decode_recall(orjson.loads(head[:split] + b"}"), bytes(head[split + len(REPORT) :]))
        except (orjson.JSONDecodeError, _Corrupt, KeyError, TypeError, ValueError, AttributeError, IndexError):
            return None
        if recall is not None and recall.root != os.fsdecode(self.root):
            return None
        self._recalled = (bytes(head), recall) if recall is not None else None
        return recall

    def lock_unchanged(self, seal: LockSeal | None, read: Callable[[], bytes | None] | None = None) -> bool:
        """The lock on disk against ``seal`` (``nochange.lock_as_sealed``); never the
        lock it was sealed for while a sync tool's conflict copy waits to be merged.
        ``read`` gives its bytes when its metadata cannot prove them."""
        folders = self._tx.folders
        if folders is None or any(map(is_sync_copy, _names(folders.lock))):
            return False
        try:
            info = os.stat(LOCK_NAME, dir_fd=folders.lock, follow_symlinks=False)
        except FileNotFoundError:
            return lock_as_sealed(seal, None, lambda: None)
        except OSError:
            return False
        if not stat.S_ISREG(info.st_mode):
            return False
        meta = FileMeta(info.st_size, info.st_mtime_ns, info.st_ctime_ns, info.st_ino)
        return lock_as_sealed(seal, meta, read or (lambda: self._lock_bytes_or_none(folders)))

    def _lock_bytes_or_none(self, folders: Folders) -> bytes | None:
        try:
            return self._read(folders.lock, LOCK_NAME, folders.lock_path)
        except StateError:
            return None

    def _read(self, folder: int, name: str, where: str | os.PathLike[str]) -> bytes | None:
        try:
            return read_file(folder, name, where)
        except OSError as error:
            path = os.path.join(where, name)
            raise StateError(path, _cannot("read", path, error)) from error

    def _set_aside(self, folders: Folders, source: int, name: str, reason: str, *, kept: bool = False) -> None:
        """Move a damaged file into the state folder, unchanged, and say so in one line."""
        if not self._tx.exclusive:
            return
        where = folders.path_of(source, name)
        aside = self._move_aside(folders, source, name, "corrupt")
        rest = "the valid lines were loaded" if kept else "starting afresh"
        self._warn(f"{where} could not be read ({reason}); kept as {aside}, {rest}")

    def _move_aside(self, folders: Folders, source: int, name: str, why: str) -> str:
        where = folders.path_of(source, name)
        try:
            return os.path.join(self.state_path, set_aside(folders, source, name, why))
        except OSError as error:
            raise StateError(where, _cannot("move aside", where, error)) from error

    # -- writing --

    def save(
        self,
        state: State,
        children: Mapping[str, list[str]] | None = None,
        read: Mapping[str, FileMeta] | None = None,
    ) -> Conditions:
        """Write the lock when a stamp or a date changed, then the cache; a converted
        ``state.json`` is set aside only once both are written.  Returns what the cache
        records for the no-change rule: while it holds, ``state.report`` is the answer.
        ``children`` is ``lineage.children_of`` of the report's edges, and ``read``
        ``memory_files_read(state.seen)``, when the caller has them (the cycle search needed
        the one, the check of the listing the other): neither is built twice."""
        self._recalled = None
        folders = self._tx.folders
        if folders is None or not self._tx.exclusive:
            raise StateError(self.state_path, f"cannot write the state in {self.state_path}: it is not locked")
        if state.report is None:  # a state saved as loaded keeps the last result
            state, children = state._replace(report=self.last_report()), None
        as_locked = self._tx.as_locked
        if as_locked is not None and state.derivations == as_locked:
            data, seal = self._tx.lock_bytes, self._reseal(folders)
        else:
            data = lock_bytes(state.derivations, self._tx.lock_bytes is not None)
            if data is not None and data != self._tx.lock_bytes:
                self._write(folders, folders.lock, LOCK_NAME, [data], "write the lock file")
                self._tx.lock_bytes = data
            seal = self._seal(folders, data)
        self._tx.as_locked = None
        read = memory_files_read(state.seen) if read is None else read
        per_file = _per_file(state.seen, read, state.scan_started_ns - RACY_WINDOW_NS)
        conditions = _conditions(state, seal, per_file.memory, read)
        canonical = as_locked is None or state.derivations != as_locked
        lineage = _lineage_of(state.report, read, children)
        entries = _entries(state, os.fsdecode(self.root), conditions, canonical, per_file, lineage)
        self._write(folders, folders.state, CACHE_NAME, stream(entries), "write")
        if self._tx.migrating:
            self._tx.migrating = False
            aside = self._move_aside(folders, folders.state, LEGACY_NAME, "migrated")
            self._warn(
                f"converted {os.path.join(self.state_path, LEGACY_NAME)} into {self.lock_path}; "
                f"the old file is {os.path.basename(aside)}"
            )
        return conditions

    def save_patched(
        self,
        state: State,
        previous: Previous,
        updates: Mapping[str, Seen | None],
        lock: bytes | None,
        listing: Mapping[str, FileMeta],
        files: MemoryFiles,
        lock_canonical: bool,
        patch: Patch,
    ) -> Conditions:
        """``save`` for a result patched after a small change (``incremental``): the lock
        is written only when ``lock`` holds new bytes, the per-file rows are those of
        ``previous`` with ``updates`` applied (None drops a row; every batch of rows left
        alone is written back as it was read), and the memory files read are those of
        ``listing`` (``files``), every one of which has its row.  ``lock_canonical``: the lock is
        exactly what ``encode_lock`` writes (``LockLines.canonical``).  The report's edges
        are ``patch.batches``, those the patch left alone written back as they were read, and
        so is every batch of what derives from each file that no change touched."""
        self._recalled = None
        folders = self._tx.folders
        if folders is None or not self._tx.exclusive or state.report is None:
            raise StateError(self.state_path, f"cannot write the state in {self.state_path}: it is not locked")
        rows = previous.rows
        assert isinstance(rows, RowTable), "the rows as ``previous`` read them"
        table, firsts = rows.written(updates)  # before any write: a damaged batch index raises ``Corrupt`` here
        assert isinstance(previous.children, RowTable), "as ``previous`` read it"
        children = previous.children.written(patch.children.changed, list)
        if lock is None:
            seal, known = self._reseal(folders), self._tx.hashed_lock
        else:
            self._write(folders, folders.lock, LOCK_NAME, [lock], "write the lock file")
            self._tx.lock_bytes = known = lock
            seal = self._seal(folders, lock)
        self._local.known_lock = None if seal is None or known is None else (seal, known)
        others = _others_after(rows, previous.others, updates, listing)
        stats = {path: _meta_of(row) for path, row in others.items()}
        broken = broken_edges(state.report.edges)
        missing = (edge.source for edge in broken if edge.status is EdgeStatus.MISSING)
        watched = watched_sources(chain(others, missing), listing, {}, stats)  # every source outside the listing
        problems = tuple(problem.row for problem in state.walk_problems)
        conditions = Conditions(seal, state.scan_started_ns, problems, files.listing_key, watched, state.settings)
        per_file = _PerFile(table, firsts, files, sorted(others))
        assert isinstance(patch.batches, EdgeBatches), "as ``StoredEdges.replaced`` made them"
        lineage = _Lineage(patch.batches.batches, broken, *children, patchable=True)
        entries = _entries(state, os.fsdecode(self.root), conditions, lock_canonical, per_file, lineage)
        self._write(folders, folders.state, CACHE_NAME, stream(entries), "write")
        return conditions

    def known_lock(self, seal: LockSeal | None) -> bytes | None:
        """The bytes of the lock ``seal`` was made for, when this thread's last patched save
        hashed them or wrote them (their sha256 is the seal's): whoever keeps them to compare
        with the lock later need not read and hash it again.  None for any other seal.  Given
        once, and kept at most until the next transaction: a large lock's bytes do not stay."""
        known, self._local.known_lock = getattr(self._local, "known_lock", None), None
        return known[1] if known is not None and seal is not None and known[0] == seal else None

    def _seal(self, folders: Folders, data: bytes | None) -> LockSeal | None:
        if data is None:
            return None
        meta = _lock_meta(folders)
        return None if meta is None else LockSeal(meta, hashlib.sha256(data).hexdigest(), wall_ns())

    def _reseal(self, folders: Folders) -> LockSeal | None:
        """The seal of a lock left as it was loaded, whose bytes the old seal vouched for:
        its sha256 is known, so a large lock is not hashed again."""
        seal, meta = self._tx.seal, _lock_meta(folders)
        return None if seal is None or meta is None else LockSeal(meta, seal.sha256, wall_ns())

    def _write(self, folders: Folders, target: int, name: str, chunks: Iterable[Bytes], what: str) -> None:
        """Every file is replaced atomically; only the cache is not synced to the disk: it is
        derived again from the memory files and the lock, and a torn one (after a crash of
        the machine) fails to parse, or its checksum, and gives the full scan."""
        where = folders.path_of(target, name)
        try:
            write_file(folders, target, name, chunks, durable=name != CACHE_NAME)
        except OSError as error:
            raise StateError(where, _cannot(what, where, error)) from error


def memory_files(listing: Mapping[str, FileMeta], racy_from_ns: int | None = None) -> tuple[list[str], MemoryFiles]:
    """The paths of ``listing`` sorted, and their record for the next cache
    (``incremental.MemoryFiles``).  The files are sorted and their numbers gathered once,
    for that record, for the no-change rule's ``listing_key`` (the sha256 of
    ``numbers_bytes`` of these very numbers), and, given the racy mark of the scan that
    records them, for the files racy at the next scan (a patch finds those among the few
    files it reads: ``incremental.still_racy``)."""
    paths = sorted(listing)
    numbers = list(chain.from_iterable(_values_in_order(listing, paths)))
    names, key, parts = _digests(len(paths), joined_paths(paths), numbers)
    racy = () if racy_from_ns is None else racy_files(paths, numbers, racy_from_ns)
    return paths, MemoryFiles(names, key, parts, racy)


def _values_in_order(listing: Mapping[str, FileMeta], paths: list[str]) -> Iterable[FileMeta]:
    """``listing[path]`` for each of ``paths``, a large folder's looked up in one call
    (``itemgetter`` of one key gives its value, of several a tuple of theirs)."""
    if len(paths) < 2:
        return [listing[path] for path in paths]
    values: tuple[FileMeta, ...] = itemgetter(*paths)(listing)
    return values


def _digests(count: int, names: bytes, numbers: list[int]) -> tuple[str, str, tuple[str, ...]]:
    """The sha256 of the count and the paths, of the whole (``nochange.listing_key``), and
    of each part's numbers (``MemoryFiles``), from one pass over ``nochange.numbers_bytes``
    of these paths and numbers, fed in its pieces: ``marshal`` writes a list as its length,
    then each item on its own, so the items of the parts written one after the other are
    those of the whole list, which is never written whole (nor a large folder's listing
    copied into one buffer)."""
    head, _, separator, empty = listing_parts(count, names, [])
    digest = hashlib.sha256(head)
    digest.update(names)
    paths = digest.hexdigest()  # and the digest goes on
    digest.update(separator)
    digest.update(empty[:1] + len(numbers).to_bytes(4, "little"))  # the list's type and length
    parts = []
    step = FILES_PER_PART * 4
    for start in range(0, len(numbers), step):
        items = marshal.dumps(numbers[start : start + step], 2)[len(empty) :]
        digest.update(items)
        parts.append(hashlib.sha256(items).hexdigest())
    return paths, digest.hexdigest(), tuple(parts)


def _others_after(
    rows: RowTable, others: Collection[str], updates: Mapping[str, Seen | None], listing: Mapping[str, FileMeta]
) -> dict[str, Seen | list[Any]]:
    """The rows of the files outside ``listing`` (the last scan's ``others``, and those
    ``updates`` adds) once ``updates`` are applied."""
    return {
        path: row
        for path in sorted({*others, *updates} - listing.keys())
        if (row := updates[path] if path in updates else rows[path]) is not None
    }


def _meta_of(row: Seen | list[Any]) -> FileMeta:
    """A file's metadata from its row, decoded (``Seen``) or as the cache held it."""
    return FileMeta(*row[:4]) if type(row) is list else row.meta  # type: ignore[union-attr]


class _LockRead:
    """The lock's bytes, read once when first asked for, and whether they were read to be
    hashed against a seal (``hashing``): what a patch then reads of them is the very bytes
    the seal was checked with."""

    def __init__(self, read: Callable[[], bytes | None]) -> None:
        self._read = read
        self._data: list[bytes | None] = []
        self.hashed = False

    def __call__(self) -> bytes | None:
        if not self._data:
            self._data.append(self._read())
        return self._data[0]

    def hashing(self) -> bytes | None:
        self.hashed = True
        return self()


class _PagedLock:
    """A lock file's bytes as ``incremental.LockLines`` reads them (``LockData``), read from
    the open file a block at a time, when first looked at: a patch finds the lines of the
    few files a change reaches by a binary search, which touches a few dozen blocks of a
    lock of megabytes (reading a lock of 10,000 edges whole took 1 ms in a new process)."""

    def __init__(self, descriptor: int, size: int) -> None:
        self._descriptor, self._size = descriptor, size
        self._blocks: dict[int, bytes] = {}

    def __len__(self) -> int:
        return self._size

    def _block(self, index: int) -> bytes:
        block = self._blocks.get(index)
        if block is None:
            start = index * _LOCK_BLOCK
            block = self._blocks[index] = self._span(start, min(start + _LOCK_BLOCK, self._size))
        return block

    def _span(self, start: int, stop: int) -> bytes:
        try:
            return _read_span(self._descriptor, start, stop)
        except OSError as error:  # the full scan reads the lock again, and says what is wrong
            raise _Corrupt(f"the lock could not be read again: {error}") from error

    def __getitem__(self, where: slice) -> bytes:
        start, stop, _ = where.indices(self._size)
        if stop <= start:
            return b""
        first, last = start // _LOCK_BLOCK, (stop - 1) // _LOCK_BLOCK
        if last - first > _SPAN_IN_BLOCKS:  # the rest of the lock after a replaced line: one read
            return self._span(start, stop)
        joined = b"".join(map(self._block, range(first, last + 1)))
        return joined[start - first * _LOCK_BLOCK : stop - first * _LOCK_BLOCK]

    def find(self, byte: bytes, start: int) -> int:
        position = max(start, 0)
        while position < self._size:
            index = position // _LOCK_BLOCK
            found = self._block(index).find(byte, position - index * _LOCK_BLOCK)
            if found >= 0:
                return index * _LOCK_BLOCK + found
            position = (index + 1) * _LOCK_BLOCK
        return -1

    def rfind(self, byte: bytes, start: int, end: int) -> int:
        position, start = min(end, self._size), max(start, 0)
        while position > start:
            index = (position - 1) // _LOCK_BLOCK
            offset = index * _LOCK_BLOCK
            found = self._block(index).rfind(byte, max(start - offset, 0), position - offset)
            if found >= 0:
                return offset + found
            position = offset
        return -1

    def startswith(self, prefix: bytes, start: int = 0) -> bool:
        return self[start : start + len(prefix)] == prefix


_LOCK_BLOCK = 4096
_SPAN_IN_BLOCKS = 4
"""Blocks from which a slice of the lock is read in one call rather than block by block."""


def _lock_meta(folders: Folders) -> FileMeta | None:
    try:
        info = os.stat(LOCK_NAME, dir_fd=folders.lock, follow_symlinks=False)
    except OSError:
        return None
    return FileMeta(info.st_size, info.st_mtime_ns, info.st_ctime_ns, info.st_ino)


def _names(folder: int) -> list[str]:
    try:
        return os.listdir(folder)
    except OSError:
        return []


def _read_span(descriptor: int, start: int, stop: int) -> bytes:
    """The bytes of an open file from ``start`` to ``stop``, all of them."""
    data = os.pread(descriptor, stop - start, start)
    while len(data) < stop - start:
        more = os.pread(descriptor, stop - start - len(data), start + len(data))
        if not more:
            raise _Corrupt("the cache is shorter than when it was read")
        data += more
    return data


def _read_head(folder: int, name: str) -> bytearray | None:
    """The cache's bytes up to its per-file tables (most of a large file), read a chunk
    at a time; None when there is no such mark."""
    descriptor = os.open(name, _READ_FLAGS, dir_fd=folder)
    try:
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):
            raise OSError(errno.EINVAL, "not a regular file", name)
        return _read_to(descriptor, TABLES)
    finally:
        os.close(descriptor)


def _read_to(descriptor: int, mark: bytes) -> bytearray | None:
    """An open file's bytes from where it is up to the first ``mark``, read a chunk at a
    time; None when there is no such mark."""
    head = bytearray()
    while chunk := os.read(descriptor, _HEAD_CHUNK):
        searched = max(0, len(head) - len(mark) + 1)
        head += chunk
        end = head.find(mark, searched)
        if end >= 0:
            del head[end:]
            return head
    return None


def _read_tail(descriptor: int, mark: bytes) -> tuple[int, bytes] | None:
    """Where the last ``mark`` of an open regular file is, and the bytes from there to the
    end, read from the end a growing chunk at a time; None when there is no such mark."""
    size = os.fstat(descriptor).st_size
    window = _TAIL_CHUNK
    while True:
        start = max(0, size - window)
        tail = _read_span(descriptor, start, size)
        found = tail.rfind(mark)
        if found >= 0:
            return start + found, tail[found:]
        if start == 0:
            return None
        window *= 4


_REFUSED = b',"refused":'
"""Where the small tail of the cache starts, after the per-file table (found from the end:
a file named ``refused`` is a key inside that table, never after it)."""
_HEAD_CHUNK = 1024 * 1024
"""Bytes read at a time from the cache's front: a large folder's front is megabytes (a chunk
of 256 KiB took half again as long to read 1 MiB); a chunk of several MiB costs more to
allocate than it saves."""
_TAIL_CHUNK = 64 * 1024
"""Bytes first read from the cache's back, four times more each time the mark is not in
them: the small entries there take a few KiB for a thousand files, some 15 KiB for ten
thousand (more while many files are just written: the racy ones are named), so a first
window of a mebibyte read most of a small folder's cache for them."""
_READ_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC | getattr(os, "O_NOCTTY", 0)


def _cannot(what: str, path: str, error: OSError) -> str:
    reason = error.strerror or type(error).__name__
    hint = " (use --state DIR to keep provgraph's state elsewhere)" if error.errno in (1, 13, 30) else ""
    return f"cannot {what} {path}: {reason}{hint}"


# -- the cache's layout ----------------------------------------------------------------


class _PerFile(NamedTuple):
    """The cache's per-file part: the rows (sorted by path, in batches), the first path of
    each batch, the digests of the memory files' paths and metadata (``incremental.MemoryFiles``),
    and the files the rows hold that are not memory files.
    A ``NamedTuple``, not a dataclass: ~0.5 ms less to create on every full run."""

    rows: Chunks
    firsts: list[str]
    memory: MemoryFiles
    others: list[str]


def memory_files_read(seen: Mapping[str, Seen]) -> dict[str, FileMeta]:
    """The memory files a full scan read, with their metadata: those seen with a
    declaration.  The per-file table, the no-change conditions and the lineage's index
    all count them so.  Equal to the walk's listing exactly when ``nochange.listing_key`` of
    the listing is the key ``save`` records (that of the files read): a full scan compares
    the two mappings rather than digesting the listing again (2 ms at 10,000 files against
    5.5)."""
    return {path: row.meta for path, row in seen.items() if row.declaration is not None}


def _per_file(seen: Mapping[str, Seen], read: Mapping[str, FileMeta], racy_from_ns: int) -> _PerFile:
    """The per-file part of a full scan's cache, ``read`` its memory files (``memory_files_read``),
    ``racy_from_ns`` the racy mark of the next scan."""
    rows, firsts = encode_seen(seen)
    found = memory_files(read, racy_from_ns)
    others = sorted(seen.keys() - read.keys()) if len(read) < len(seen) else []
    return _PerFile(rows, firsts, found[1], others)


def _entries(
    state: State,
    root: str,
    conditions: Conditions,
    lock_canonical: bool,
    per_file: _PerFile,
    lineage: _Lineage,
) -> Iterator[tuple[str, object]]:
    """Each top-level entry, built only when it is written; the no-change check's part first,
    the parts only a patch reads last, with their checksum (``_checksum`` reads it)."""
    yield "format", FORMAT
    yield "version", VERSION
    yield "root", root
    seal = conditions.lock
    yield "lock", None if seal is None else [*seal.meta, seal.sha256, seal.recorded_ns]
    yield "scan_started_ns", state.scan_started_ns
    yield "settings", state.settings
    yield "walk_problems", [_encode_problem(problem) for problem in state.walk_problems]
    yield "listing", conditions.listing
    yield "watched", encode_watched(conditions.watched)
    checksum = Checksum()
    edge_sizes: list[int] = []
    children_sizes: list[int] = []
    sizes: list[int] = []
    report = None if state.report is None else encode_report(state.report, lineage.batches, checksum, edge_sizes)
    yield "report", report
    yield "seen", Chunks(sized(per_file.rows.parts, sizes))
    yield "children", Chunks(checksum.over(sized(lineage.children.parts, children_sizes)))
    yield "refused", {path: kind.value for path, kind in sorted(state.refused.items())}
    yield "row_batches", per_file.firsts
    yield "row_sizes", sizes  # written by now: ``stream`` writes one entry after the other
    yield "memory_files", _encode_memory_files(per_file.memory)
    yield "others", per_file.others
    yield "lock_canonical", lock_canonical
    index = [batch.entry for batch in lineage.batches] if lineage.patchable and report is not None else None
    broken = [edge_row(edge) for edge in lineage.broken]
    checked = (index, edge_sizes, broken, lineage.children_firsts, children_sizes)
    for name, value in zip(_CHECKED, checked, strict=True):  # in the order ``_checksum`` reads them
        yield name, Chunks(checksum.over([orjson.dumps(value)]))
    yield "index_check", checksum.value


def _encode_memory_files(files: MemoryFiles) -> list[object]:
    return [files.paths, files.parts, files.racy]


def _decode_memory_files(data: object, listing_key: object) -> MemoryFiles:
    """Raises ``Corrupt`` for anything else (an earlier version's None)."""
    if not isinstance(data, list) or len(data) != 3 or not all(isinstance(item, list) for item in data[1:]):
        raise _Corrupt("the memory files' metadata is not what provgraph writes")
    return MemoryFiles(_text(data[0]), _text(listing_key), tuple(map(_text, data[1])), tuple(map(_text, data[2])))


def _conditions(state: State, seal: LockSeal | None, memory: MemoryFiles, read: Mapping[str, FileMeta]) -> Conditions:
    """The no-change check's part, derived from the rest: the memory files read at the
    last full scan are the ones seen with a declaration (``read``; ``memory``, their
    record); the sources outside them are the report's and the
    refused ones (``nochange.watched_sources``)."""
    watched = watched_sources(
        column(state.report.edges, "source") if state.report is not None else (),
        read,
        {path: kind.value for path, kind in state.refused.items()},
        {path: seen.meta for path, seen in state.seen.items() if seen.declaration is None},  # those not ``read``
    )
    rows = tuple(problem.row for problem in state.walk_problems)
    return Conditions(seal, state.scan_started_ns, rows, memory.listing_key, watched, state.settings)


def _decode_recall(data: dict[str, Any], report: bytes) -> Recall | None:
    _check_format(data)
    if report == b"null":
        return None
    conditions = Conditions(
        _decode_seal(data["lock"]),
        int(data["scan_started_ns"]),
        tuple(_decode_problem(row).row for row in data["walk_problems"]),
        _text(data["listing"]),
        decode_watched(data["watched"]),
        _text(data.get("settings", "")),
    )
    return Recall(_text(data["root"]), conditions, report)


def _report_without_edges(data: bytearray, start: int, end: int) -> tuple[StoredReport, tuple[int, int]]:
    """The last result from ``data[start:end]`` but its edges, and where their table is (a
    patch parses only the batches of it that a change reaches)."""
    edges_at, cycles_at = data.find(_EDGES, start, end), data.rfind(_CYCLES, start, end)
    if not start < edges_at < cycles_at:
        raise _Corrupt("the last result is not what provgraph writes")
    rest = orjson.loads(data[start:edges_at] + b"}")
    rest.update(orjson.loads(b"{" + data[cycles_at + 2 : end]))
    rest["edges"] = []
    return decode_report(rest), (edges_at + len(_EDGES) - 1, cycles_at + 1)


_CHILDREN = b',"children":'
"""Where what derives from each file starts: right after the per-file table, whose size the
cache records (``row_sizes``)."""


class _Read(NamedTuple):
    """What a patch reads of the cache instead of the last result's edges (see ``Previous``).
    A ``NamedTuple``, not a dataclass: ~0.5 ms less to create on every full run."""

    rows: RowTable
    edges: StoredEdges
    broken: tuple[Edge, ...]
    children: RowTable


class _Lineage(NamedTuple):
    """The cache's parts that a patch reads instead of the last result's edges, to write:
    the edges in batches, the broken ones, what derives from each file (encoded, with the
    first source of each batch), and whether a patch may build on them.  A ``NamedTuple``,
    not a dataclass: ~0.5 ms less to create on every full run."""

    batches: list[EdgeBatch]
    broken: tuple[Edge, ...]
    children: Chunks
    children_firsts: list[str]
    patchable: bool


def _lineage_of(
    report: Report | None, read: Collection[str], children: Mapping[str, list[str]] | None = None
) -> _Lineage:
    """A full scan's: a patch builds on it when every derived file is among the memory files
    ``read`` (one kept while it could not be read is left to the full scan).  ``children``:
    ``children_of`` the report's edges, when known."""
    edges = () if report is None else report.edges
    encoded, firsts = encode_table(children_of(edges) if children is None or report is None else children)
    patchable = all(map(read.__contains__, set(column(edges, "derived"))))
    return _Lineage(edge_batches(edges), broken_edges(edges), encoded, firsts, patchable)


def _checksum(document: Mapping[str, Any], edges: memoryview, children: bytes) -> int:
    """The checksum of the parts only a patch reads, as ``_entries`` computes it."""
    checksum = Checksum()
    parts: list[Bytes] = [edges, children]
    parts += (orjson.dumps(document[name]) for name in _CHECKED)
    for _ in checksum.over(parts):
        pass
    return checksum.value


_CHECKED = ("edge_batches", "edge_sizes", "broken", "children_batches", "children_sizes")
"""The small entries after the tables that the checksum covers, in the order they are written."""


def _slice(data: bytes, start: int, stop: int) -> bytes:
    return data[start:stop]


_EDGES = b',"edges":['
_CYCLES = b'],"cycles":'


def _decode_seal(data: object) -> LockSeal | None:
    if data is None:
        return None
    if not isinstance(data, list) or len(data) != 6:
        raise _Corrupt("the lock's seal must hold its metadata, its sha256 and a time")
    size, mtime_ns, ctime_ns, inode, sha256, recorded_ns = data
    return LockSeal(FileMeta(int(size), int(mtime_ns), int(ctime_ns), int(inode)), _text(sha256), int(recorded_ns))


def _decode(data: dict[str, Any]) -> State:
    _check_format(data)
    # each table is taken out of the document as it is decoded, so its rows go at once
    return State(
        seen=decode_seen(data.pop("seen")),
        scan_started_ns=int(data["scan_started_ns"]),
        walk_problems=tuple(_decode_problem(row) for row in data["walk_problems"]),
        refused={_text(path): ProblemKind(kind) for path, kind in data["refused"].items()},
        settings=_text(data.get("settings", "")),
    )


def _decode_report(data: object) -> Report:
    """The stored result, its stale entries propagated again from its edges."""
    stored = decode_report(data)
    return Report(
        root=stored.root,
        scanned_at=datetime.fromtimestamp(0, UTC),
        file_count=stored.file_count,
        edges=stored.edges,
        stale=propagate(stored.edges),
        cycles=stored.cycles,
        problems=stored.problems,
    )
