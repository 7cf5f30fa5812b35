"""The lock (the stamps, committed and synced with the memory) and the disposable cache of
one memory root.  Writes are atomic and every read-modify-write happens under an exclusive
``flock``, so concurrent processes never lose each other's stamps.  A lock or cache that
cannot be read is moved aside, never deleted, with one warning.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import threading
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import orjson

from ..clock import wall_ns
from ..errors import ProvgraphError, log_warning
from ..files import RACY_WINDOW_NS
from ..model import VERSION, FileMeta, Stamp, as_text
from ..paths import normalized
from ..stamps import Derivation
from .cache import CACHE_NAME, Cache, Damaged, LockRecord, checked, checked_date, decode, encode, lines_of
from .folder import (
    Folders,
    hold,
    in_memory_tree,
    open_file,
    open_folder,
    read_file,
    remove_temporaries,
    set_aside,
    write_file,
)
from .lock import (
    HEADER_BYTES,
    LOCK_NAME,
    LockError,
    LockRead,
    decode_lock,
    decode_options,
    decode_stamps,
    encode_pieces,
    is_sync_copy,
    lock_row,
    merge_reads,
)

__all__ = ["LOCK_NAME", "STATE_DIR", "OptionsDiffer", "StateError", "StateStore"]

STATE_DIR = ".provgraph"
Bytes = bytes | memoryview
"""A piece of a file written: a lock patched is written as slices of the lock read, not copies."""
FLOCK_NAME = "flock"  # the file whose flock is the root's exclusive lock (it holds no data)
ROOT_NAME = "root"  # in a --state folder: the memory root it belongs to


class StateError(ProvgraphError):
    """The state cannot be read or written (permissions, full disk, ...) at ``path``."""

    def __init__(self, path: str | os.PathLike[str], message: str) -> None:
        super().__init__(message)
        self.path = Path(path)


class OptionsDiffer(ProvgraphError):
    """A run asked for reading options other than the lock's: it would lose the stamps they read."""

    def __init__(self, lock: str, recorded: Mapping[str, str], asked: Mapping[str, str]) -> None:
        self.recorded, self.asked = dict(recorded), dict(asked)
        name, value = next((name, value) for name, value in recorded.items() if asked.get(name, value) != value)
        super().__init__(
            f"{lock} was written with --{name.replace('_', '-')}={value!r}, not {asked[name]!r}: run without the "
            "option (the lock's applies), or change the lock's options line to read the folder otherwise"
        )


class _Transaction(threading.local):
    """What this thread's transaction opened and read: a ``Memory`` may be used from several threads."""

    folders: Folders | None = None
    exclusive = False
    lock_bytes: bytes | None = None  # the lock as read: it is rewritten only when it changes
    as_locked: dict[str, Derivation] | None = None  # the stamps as loaded, when the lock is their encoding
    migrating = False  # a first-layout state.json was read: set it aside once the lock is written
    recorded: dict[str, str] | None = None  # the reading options the lock records (None: no lock)
    options: dict[str, str]  # the reading options this transaction reads with, written into the lock


class StateStore:
    """The lock (``ROOT/provgraph.lock``) and the cache (in ``ROOT/.provgraph/``) of one root,
    or both in ``folder`` (``--state``), which records its root.  ``settings`` key the cache."""

    def __init__(
        self,
        root: str | os.PathLike[str],
        folder: str | os.PathLike[str] | None = None,
        warn: Callable[[str], None] | None = None,
        settings: str = "",
    ) -> None:
        self.root = normalized(root)
        self.folder = normalized(folder) if folder is not None else None
        self.state_path = self.folder if self.folder is not None else os.path.join(self.root, STATE_DIR)
        self.lock_path = os.path.join(self.folder if self.folder is not None else self.root, LOCK_NAME)
        self.settings = settings
        self._warn = warn or log_warning
        self._tx = _Transaction()
        self._kept: tuple[tuple[int, ...], Cache] | None = None  # the cache last read or written, by its stat
        self._proven: tuple[FileMeta, str] | None = None  # a lock's stat and sha256, hashed once settled

    @contextlib.contextmanager
    def locked(self, wait: float = 3600.0) -> Iterator[None]:
        """Hold the root's exclusive lock for one read-modify-write (``LockBusy`` after ``wait`` s)."""
        folders = self._open(create=True)
        assert folders is not None
        with contextlib.closing(folders):
            try:
                descriptor = hold(folders.state, FLOCK_NAME, wait)
            except OSError as error:
                flock = os.path.join(self.state_path, FLOCK_NAME)
                raise StateError(self.state_path, _cannot("lock", flock, error)) from error
            try:
                self._check_root(folders, write=True)
                remove_temporaries(folders)
                self._begin(folders, exclusive=True)
                yield
            finally:
                self._begin(None, exclusive=False)
                os.close(descriptor)

    @contextlib.contextmanager
    def unlocked(self) -> Iterator[None]:
        """Read without the lock (files are replaced whole); nothing is written or set aside."""
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

    def _begin(self, folders: Folders | None, *, exclusive: bool) -> None:
        tx = self._tx
        tx.folders, tx.exclusive, tx.lock_bytes, tx.as_locked = folders, exclusive, None, None
        tx.migrating, tx.recorded, tx.options = False, None, {}

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
        """A ``--state`` folder in the memory folder must be in ``.provgraph`` (not over memory files)."""
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

    def absent(self) -> bool:
        """Whether nothing of provgraph's is in the folder (no state folder, no lock)."""
        return self.folder is None and not os.path.lexists(self.state_path) and not os.path.lexists(self.lock_path)

    def cache(self) -> Cache | None:
        """The cache for this root and settings (read again only when its file changed), or None."""
        folders = self._tx.folders
        if folders is None or folders.state < 0:
            return None
        try:
            info = os.stat(CACHE_NAME, dir_fd=folders.state, follow_symlinks=False)
        except OSError:
            return None
        identity = _identity(info)
        kept = self._kept
        if kept is not None and kept[0] == identity and kept[1].settings == self.settings:
            return kept[1]
        try:
            cache = self._decoded(folders)
        except Damaged as error:
            self._set_aside(folders, folders.state, CACHE_NAME, str(error))
            return None
        self._kept = None if cache is None else (identity, cache)
        return cache

    def rows_checked(self, cache: Cache) -> bool:
        """Whether every row of ``cache`` decodes (``checked``); a cache file whose rows do not is set aside."""
        try:
            checked(cache.rows)
        except Damaged as error:
            folders = self._tx.folders
            if self._kept is not None and self._kept[1] is cache and folders is not None:
                self._kept = None
                self._set_aside(folders, folders.state, CACHE_NAME, str(error))
            return False
        return True

    def _decoded(self, folders: Folders) -> Cache | None:
        """The cache file read in one call and decoded (``decode``); None when there is none or it is another's."""
        path = os.path.join(self.state_path, CACHE_NAME)
        try:
            opened = open_file(folders.state, CACHE_NAME, self.state_path)
            if opened is None:
                return None
            with opened:
                data = opened.read()
            return decode(lines_of(data), VERSION, as_text(os.fsdecode(self.root)), self.settings)
        except OSError as error:
            raise StateError(path, _cannot("read", path, error)) from error

    def lock_unchanged(self, record: LockRecord | None) -> bool:
        """Whether the lock on disk is ``record``'s (same settled stat, or same sha256), with no sync copy."""
        folders = self._tx.folders
        if folders is None or any(map(is_sync_copy, _names(folders.lock))):
            return False
        meta = _lock_meta(folders)
        if meta is None or record is None:
            return meta is None and record is None
        settled = meta == record.meta and max(meta.mtime_ns, meta.ctime_ns) < record.recorded_ns - RACY_WINDOW_NS
        if settled or self._proven == (meta, record.sha256):
            return True
        looked_ns = wall_ns()
        self._tx.lock_bytes = None
        data = self.lock_data()
        if data is None or hashlib.sha256(data).hexdigest() != record.sha256:
            return False
        if max(meta.mtime_ns, meta.ctime_ns) < looked_ns - RACY_WINDOW_NS:
            self._proven = (meta, record.sha256)  # hashed once it was old enough: its stat proves it from now on
        return True

    def reading_options(self, asked: Mapping[str, str], known: Collection[str]) -> dict[str, str]:
        """The lock's reading options with the ``asked`` ones it records none of; ``OptionsDiffer``
        when one asked differs from the lock's."""
        tx = self._tx
        folders = tx.folders
        data = None if folders is None else self._read(folders.lock, LOCK_NAME, folders.lock_path, 1 << 16)  # its head
        try:
            recorded = None if data is None else decode_options(data)
        except LockError as error:
            raise StateError(self.lock_path, f"cannot read {self.lock_path}: {error}; mend or remove it") from None
        unknown = sorted((recorded or {}).keys() - set(known))
        if unknown:
            raise StateError(
                self.lock_path, f"{self.lock_path} records the option {unknown[0]!r}, unknown here: upgrade provgraph"
            )
        if any((recorded or {}).get(name, value) != value for name, value in asked.items()):
            raise OptionsDiffer(self.lock_path, recorded or {}, asked)
        tx.recorded, tx.options = recorded, {**(recorded or {}), **asked}
        return tx.options

    def options_recorded(self) -> bool:
        """Whether the lock records the options this transaction reads with (or there is no lock)."""
        return self._tx.recorded is None or self._tx.recorded == self._tx.options

    def stamps(self) -> dict[str, Derivation]:
        """The stamps in the lock (or a first-layout ``state.json``) and its sync copies; damage set aside."""
        tx = self._tx
        folders = tx.folders
        if folders is None:
            return {}
        tx.as_locked = None
        tx.lock_bytes = data = self._read(folders.lock, LOCK_NAME, folders.lock_path)
        if data is None:
            return self._load_legacy(folders)
        clean = None if any(map(is_sync_copy, _names(folders.lock))) else decode_stamps(data)
        if clean is not None:
            derivations = _derivations(clean)
            tx.as_locked = derivations if data.startswith(HEADER_BYTES) else None  # an older format is rewritten
            return derivations
        try:
            read = decode_lock(data)
        except LockError as error:
            self._set_aside(folders, folders.lock, LOCK_NAME, str(error))
            return {}
        if read.damaged:
            self._set_aside(folders, folders.lock, LOCK_NAME, f"{read.damaged} line(s) are not valid stamps", kept=True)
        elif read.merged and tx.exclusive:
            self._warn(
                f"{self.lock_path} holds merged lines ({read.merged} repeated edges or conflict markers); "
                "took the newest stamp of each edge"
            )
        copies = self._sync_copies(folders)
        return _derivations(merge_reads(read, copies).derivations())

    def lock_data(self) -> bytes | None:
        """The lock's bytes as ``stamps`` or ``lock_unchanged`` last read them, else read now."""
        tx = self._tx
        if tx.lock_bytes is None and tx.folders is not None:
            with contextlib.suppress(StateError):
                tx.lock_bytes = self._read(tx.folders.lock, LOCK_NAME, tx.folders.lock_path)
        return tx.lock_bytes

    def _sync_copies(self, folders: Folders) -> list[LockRead]:
        """The conflict copies a sync tool left beside the lock, read; each then kept aside."""
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
        """The stamps of a ``state.json`` of the first layout, converted into the lock once."""
        data = None if folders.state < 0 else self._read(folders.state, LEGACY_NAME, self.state_path)
        if data is None:
            return {}
        try:
            derivations = _decode_legacy(orjson.loads(data))
        except (orjson.JSONDecodeError, Damaged, KeyError, TypeError, ValueError, AttributeError) as error:
            reason = str(error) if isinstance(error, Damaged) else "it is not valid provgraph state"
            self._set_aside(folders, folders.state, LEGACY_NAME, reason)
            return {}
        self._tx.migrating = self._tx.exclusive
        return derivations

    def save(
        self, derivations: Mapping[str, Derivation] | None, cache: Cache, lock: Sequence[Bytes] | None = None
    ) -> Cache:
        """Write the lock when its stamps changed (``derivations``, the stamps now, or ``lock``,
        a patch's bytes in pieces), then ``cache`` with the lock it was written with; the cache as written."""
        folders, tx = self._tx.folders, self._tx
        if folders is None or not tx.exclusive:
            raise StateError(self.state_path, f"cannot write the state in {self.state_path}: it is not locked")
        canonical = cache.lock is not None and cache.lock.canonical
        if derivations is not None:
            canonical = tx.as_locked is None or derivations != tx.as_locked or not self.options_recorded()
            lock = lock_pieces(derivations, tx.lock_bytes is not None, tx.options) if canonical else None
        if lock is not None:
            if not _same(lock, tx.lock_bytes):
                self._write(folders, folders.lock, LOCK_NAME, lock, "write the lock file")
            canonical = True
        written = lock if lock is not None else None if tx.lock_bytes is None else [tx.lock_bytes]
        cache = replace(cache, lock=self._lock_record(folders, canonical, written))
        self._write(folders, folders.state, CACHE_NAME, encode(cache, VERSION), "write")
        with contextlib.suppress(OSError):
            info = os.stat(CACHE_NAME, dir_fd=folders.state, follow_symlinks=False)
            self._kept = (_identity(info), cache)
        if tx.migrating:
            self._migrated(folders)
        return cache

    def _migrated(self, folders: Folders) -> None:
        self._tx.migrating = False
        aside = self._move_aside(folders, folders.state, LEGACY_NAME, "migrated")
        self._warn(
            f"converted {os.path.join(self.state_path, LEGACY_NAME)} into {self.lock_path}; "
            f"the old file is {os.path.basename(aside)}"
        )

    def _lock_record(self, folders: Folders, canonical: bool, pieces: Sequence[Bytes] | None) -> LockRecord | None:
        """The lock as written or read now (``pieces``); canonical when written so, or as the last cache knew it."""
        meta = _lock_meta(folders)
        if meta is None or pieces is None or meta.size != sum(map(len, pieces)):
            return None
        digest = hashlib.sha256()
        for piece in pieces:
            digest.update(piece)
        sha256 = digest.hexdigest()
        before = None if self._kept is None else self._kept[1].lock
        canonical = canonical or (before is not None and before.canonical and before.sha256 == sha256)
        return LockRecord(meta, sha256, wall_ns(), canonical)

    def _read(self, folder: int, name: str, where: str | os.PathLike[str], limit: int | None = None) -> bytes | None:
        try:
            return read_file(folder, name, where, limit)
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

    def _write(self, folders: Folders, target: int, name: str, data: Iterable[Bytes], what: str) -> None:
        """Replace a file atomically, synced to the disk but for the cache (torn, it is not trusted)."""
        where = folders.path_of(target, name)
        try:
            write_file(folders, target, name, data, durable=name != CACHE_NAME)
        except OSError as error:
            raise StateError(where, _cannot(what, where, error)) from error


LEGACY_NAME = "state.json"
LEGACY_FORMAT = "provgraph-state"


def _decode_legacy(data: Any) -> dict[str, Derivation]:
    """The stamps of a ``state.json`` of the first layout (schema 1)."""
    if not isinstance(data, dict) or data.get("format") != LEGACY_FORMAT or data.get("version") != 1:
        raise Damaged(f"it is not a {LEGACY_FORMAT} file of version 1")
    derivations = {}
    for path, record in data["derivations"].items():
        derived_at = record["derived_at"]
        if not isinstance(path, str) or not (derived_at is None or isinstance(derived_at, str)):
            raise Damaged("a derived file and its derived_at must be text")
        stamps = {}
        for source, (sha, at, since) in record["stamps"].items():
            if not isinstance(source, str) or not (sha is None or isinstance(sha, str)):
                raise Damaged("a source and its sha256 must be text")
            stamps[source] = Stamp(sha, checked_date(at), None if since is None else checked_date(since))
        derivations[path] = Derivation(derived_at, stamps)
    return derivations


def lock_pieces(
    derivations: Mapping[str, Derivation], exists: bool, options: Mapping[str, str] | None = None
) -> list[bytes] | None:
    """The lock for these stamps, recording ``options``, in the pieces it is written in;
    None when there is none and nothing to put in it."""
    if not exists and not any(derivation.stamps for derivation in derivations.values()):
        return None
    rows = (
        lock_row(derived, source, stamp, derivation.derived_at)
        for derived, derivation in derivations.items()
        for source, stamp in derivation.stamps.items()
    )
    return encode_pieces(rows, options)


def _same(pieces: Sequence[Bytes], data: bytes | None) -> bool:
    """Whether ``pieces`` written one after the other are ``data``, without joining them."""
    if data is None or sum(map(len, pieces)) != len(data):
        return False
    view, at = memoryview(data), 0
    for piece in pieces:
        if view[at : at + len(piece)] != piece:
            return False
        at += len(piece)
    return True


def _derivations(table: Mapping[str, tuple[str | None, dict[str, Stamp]]]) -> dict[str, Derivation]:
    return {derived: Derivation(at, stamps) for derived, (at, stamps) in table.items()}


def _identity(info: os.stat_result) -> tuple[int, ...]:
    """What tells one cache file from another: any write replaces it (a new inode)."""
    return (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns, info.st_mode)


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


def _cannot(what: str, path: str, error: OSError) -> str:
    reason = error.strerror or type(error).__name__
    hint = " (use --state DIR to keep provgraph's state elsewhere)" if error.errno in (1, 13, 30) else ""
    return f"cannot {what} {path}: {reason}{hint}"
