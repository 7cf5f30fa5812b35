"""The only module that opens memory files: the walk, stat and reading.

``FileSource`` is what the scan needs from a memory folder (integrations provide others).
``LocalFiles`` is the local disk: hidden entries are skipped, symlinked folders not followed,
a symlink leaving the root and anything not a regular file (a FIFO, a device, a dangling
link) never opened, and a name that is not UTF-8 reported, never listed.
"""

from __future__ import annotations

import hashlib
import os
import stat as stat_module
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from itertools import chain
from pathlib import Path
from typing import Protocol

from .errors import PathRefused
from .meaning import Meaning
from .model import FileMeta, Problem, ProblemKind, as_text, is_utf8
from .paths import normalized

__all__ = ["RACY_WINDOW_NS", "FileSource", "LocalFiles", "NotRegular", "OutsideRoot", "ProvgraphOwn", "walk_folder"]

RACY_WINDOW_NS = 2_000_000_000
"""A file whose mtime is this close to (or after) the start of the scan that read it may have
been written again with identical metadata: it is read again, not trusted (git's index rule)."""

_CHUNK = 1024 * 1024
_READ_FLAGS = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_NOFOLLOW", 0)
ROOT_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC  # the root is opened through a link, as it was named
FOLDER_FLAGS = ROOT_FLAGS | os.O_NOFOLLOW


class OutsideRoot(PathRefused):
    """A path that resolves (through a symlink) outside the memory root."""


class NotRegular(PathRefused):
    """A path that exists but is not a regular file (folder, FIFO, device)."""


class ProvgraphOwn(NotRegular):
    """A path that leads (by its name or a link) to provgraph's lock or state folder: never a source."""


class FileSource(Protocol):
    """What a scan reads from a memory folder; every path is root-relative POSIX."""

    trusts_stat: bool
    """True when an unchanged ``FileMeta`` proves unchanged content (local disks); False reads
    every file on every scan (metadata coarser than that, an mtime only)."""

    def walk(self) -> tuple[dict[str, FileMeta], list[Problem]]:
        """Every regular ``*.md`` file below the root, with its metadata."""

    def stat(self, path: str) -> FileMeta | None:
        """Metadata of any file under the root, None when it does not exist; ``OutsideRoot`` or
        ``NotRegular`` for paths that must not be opened."""

    def read(self, path: str, limit: int | None = None) -> bytes:
        """The file's bytes, or only its first ``limit`` bytes."""


class LocalFiles:
    """A memory folder on the local disk."""

    def __init__(self, root: str | os.PathLike[str], *, trusts_stat: bool = True) -> None:
        """``trusts_stat`` False reads every file on every scan (for writes through ``mmap``)."""
        self.trusts_stat = trusts_stat
        self._root = normalized(root)
        self._real_root = os.path.realpath(self._root)
        self._listed: dict[str, FileMeta] = {}
        self._device: int | None = None
        self._reading = threading.local()
        """This thread's ``_Folders`` while it is in ``reading``: two threads may scan at once."""

    @property
    def root(self) -> Path:
        return Path(self._root)

    def walk(self) -> tuple[dict[str, FileMeta], list[Problem]]:
        found, problems = walk_folder(self._root, self._real_root, self._listed)
        self._listed = found
        try:
            self._device = os.stat(self._root).st_dev
        except OSError:
            self._device = None
        return found, problems

    def _open(self, path: str) -> tuple[int, int]:
        """The descriptor and size of the very path that was checked, opened one folder at a time
        from the root's descriptor (``_Folders.open``): a folder or file swapped for a symlink
        in between is not followed, and anything but a regular file raises ``NotRegular`` unread."""
        with self._folders() as folders:
            opened = self._open_listed(path, folders)
            if opened is not None:
                return opened
            inside = self._resolved(path)[len(self._real_root) :].strip("/")
            if not inside:
                raise NotRegular(path)  # the root itself
            descriptor = folders.open(inside)
        info = os.fstat(descriptor)
        if not stat_module.S_ISREG(info.st_mode):
            os.close(descriptor)
            raise NotRegular(path)
        return descriptor, info.st_size

    @contextmanager
    def _folders(self) -> Iterator[_Folders]:
        """This thread's ``_Folders`` while it is in ``reading``, else one for this open only."""
        folders: _Folders | None = getattr(self._reading, "folders", None)
        if folders is not None:
            yield folders
            return
        folders = _Folders(self._root)
        try:
            yield folders
        finally:
            folders.close()

    def _open_listed(self, path: str, folders: _Folders) -> tuple[int, int] | None:
        """A file of the last walk, opened without resolving its path, kept only when it is the
        very file the walk found there, untouched: a regular file with the same device, inode
        and ctime (a reused inode number comes with a new ctime).  None: the caller checks the path."""
        listed = self._listed.get(path)
        if listed is None:
            return None
        try:
            descriptor = folders.open(path)
        except OSError:
            return None
        info = os.fstat(descriptor)
        if (
            info.st_ino == listed.inode
            and info.st_ctime_ns == listed.ctime_ns
            and info.st_dev == self._device
            and stat_module.S_ISREG(info.st_mode)
        ):
            return descriptor, info.st_size
        os.close(descriptor)
        return None

    def _resolved(self, path: str) -> str:
        """``path`` resolved through every symlink; ``OutsideRoot`` when that leaves the root, and
        ``ProvgraphOwn`` for provgraph's lock or state folder, so a stamp never stales its own lock."""
        real = os.path.realpath(os.path.join(self._root, *path.split("/")))
        real_root = self._real_root
        if not (real == real_root or real.startswith(real_root.rstrip("/") + "/")):
            raise OutsideRoot(path)
        folder, lock = os.path.join(real_root, ".provgraph"), os.path.join(real_root, "provgraph.lock")
        if real in (lock, folder) or real.startswith(folder + "/"):
            raise ProvgraphOwn(path)
        return real

    def stat(self, path: str) -> FileMeta | None:
        try:
            info = os.stat(self._resolved(path))
        except (FileNotFoundError, NotADirectoryError):
            return None
        if not stat_module.S_ISREG(info.st_mode):
            raise NotRegular(path)
        return _meta(info)

    @contextmanager
    def reading(self) -> Iterator[None]:
        """While in it, a file is opened by its name through its folder's descriptor, kept from
        one file to the next (``_Folders``), as a scan reading every file in order wants."""
        if getattr(self._reading, "folders", None) is not None or os.open not in os.supports_dir_fd:
            yield
            return
        try:
            folders = self._reading.folders = _Folders(self._root)
        except OSError:
            yield
            return
        try:
            yield
        finally:
            self._reading.folders = None
            folders.close()

    def read(self, path: str, limit: int | None = None) -> bytes:
        folders: _Folders | None = getattr(self._reading, "folders", None)
        listed = self._listed.get(path) if folders is not None else None
        if listed is not None:
            found = folders.read(path, listed.size, limit)  # type: ignore[union-attr]
            if found is not None:
                return found
        descriptor, size = self._open(path)
        try:
            return _read(descriptor, size, limit)
        finally:
            os.close(descriptor)

    def sha256(self, path: str, meaning: Meaning | None = None) -> str:
        """Hash without holding a large file in memory; a small file in one read, as ``read``.
        ``meaning`` hears the same bytes."""
        descriptor, size = self._open(path)
        digest = hashlib.sha256()
        try:
            first = os.read(descriptor, min(size + 1, _CHUNK))
            for chunk in chain((first,), _chunks(descriptor) if first and len(first) != size else ()):
                digest.update(chunk)
                if meaning is not None:
                    meaning.update(chunk)
        finally:
            os.close(descriptor)
        return digest.hexdigest()


def walk_folder(
    root: str, real_root: str, last: Mapping[str, FileMeta] | None = None
) -> tuple[dict[str, FileMeta], list[Problem]]:
    """Every regular ``*.md`` file below ``root`` (whose resolved path is ``real_root``), by
    root-relative POSIX path, with its metadata, and the problems met on the way.  A file's
    metadata equal to its entry in ``last`` (the last walk's) is that very entry: an
    unchanged folder's listing then holds no second copy of every file's stat, and compares
    with the last one object by object."""
    walker = _Walker(real_root, last or {})
    walker.pending.append(("", root))
    while walker.pending:  # a stack: the last folder found is listed first, each subtree in one piece
        prefix, folder = walker.pending.pop()
        try:
            walker.folder(folder, prefix)
        except OSError as error:
            walker.problems.append(Problem(prefix.rstrip("/") or ".", ProblemKind.UNREADABLE, _reason(error)))
    return walker.found_files, walker.problems


class _Walker:
    """What one walk has found so far, and the folders it has still to list."""

    __slots__ = ("found_files", "inside", "last", "pending", "problems", "real_root")

    def __init__(self, real_root: str, last: Mapping[str, FileMeta]) -> None:
        self.real_root, self.inside, self.last = real_root, real_root.rstrip("/") + "/", last
        self.found_files: dict[str, FileMeta] = {}
        self.problems: list[Problem] = []
        self.pending: list[tuple[str, str]] = []  # (prefix, folder) still to list

    def folder(self, folder: str, prefix: str) -> None:
        """One folder's entries, listed through its descriptor (a subfolder become a symlink is not
        followed): a regular ``.md`` file with an ASCII name at once, anything else by ``visit``.
        The loop over plain memory files is the walk's whole cost, so it calls no function of
        its own: ``found`` and ``_meta`` are written out in it."""
        found_files, last = self.found_files, self.last
        descriptor = os.open(folder, FOLDER_FLAGS if prefix else ROOT_FLAGS)
        try:
            with os.scandir(descriptor) as entries:
                for entry in entries:
                    name = entry.name
                    if name[0] == ".":  # a name is never empty; cheaper than startswith
                        continue
                    if name.endswith(".md") and name.isascii():
                        try:
                            if entry.is_file(follow_symlinks=False):
                                info, path = entry.stat(follow_symlinks=False), prefix + name
                                meta = _new_meta((info.st_size, info.st_mtime_ns, info.st_ctime_ns, info.st_ino))
                                before = last.get(path)
                                found_files[path] = before if before == meta else meta
                                continue
                        except OSError:
                            pass  # visited again below, where the problem is reported
                    self.visit(entry, prefix + name, os.path.join(folder, name))
        finally:
            os.close(descriptor)

    def found(self, path: str, meta: FileMeta) -> None:
        last = self.last.get(path)
        self.found_files[path] = last if last == meta else meta

    def visit(self, entry: os.DirEntry[str], path: str, full_path: str) -> None:
        """Any entry but a plain memory file (``full_path`` starts as the root was named)."""
        name = entry.name
        try:
            if not (name.isascii() or is_utf8(name)):
                if name.endswith(".md") or entry.is_dir(follow_symlinks=False):
                    self.problems.append(Problem(as_text(path), ProblemKind.UNREADABLE, "its name is not valid UTF-8"))
            elif entry.is_symlink():
                self.visit_link(entry, path, full_path)
            elif entry.is_dir(follow_symlinks=False):
                self.pending.append((path + "/", full_path))
            elif name.endswith(".md") and entry.is_file(follow_symlinks=False):
                self.found(path, _meta(entry.stat(follow_symlinks=False)))
        except OSError as error:
            self.problems.append(Problem(path, ProblemKind.UNREADABLE, _reason(error)))

    def visit_link(self, entry: os.DirEntry[str], path: str, full_path: str) -> None:
        """Symlinked files inside the root count; folders are not followed (no loops)."""
        if not entry.name.endswith(".md"):
            return
        resolved = os.path.realpath(full_path)
        if not (resolved == self.real_root or resolved.startswith(self.inside)):
            self.problems.append(Problem(path, ProblemKind.OUTSIDE_ROOT, "symlink to a path outside the root"))
            return
        try:
            info = os.stat(full_path)
        except OSError:
            return  # dangling link: skipped, never opened
        if stat_module.S_ISREG(info.st_mode):
            self.found(path, _meta(info))


class _Folders:
    """The memory folder's descriptor and those of the last few folders read from.

    Each folder is opened from the root's descriptor one name at a time, none followed if it
    has become a symlink, nor the file itself: what is opened lies inside the root, without a
    ``stat``.  A file changed since the walk has new metadata at the next walk, which reads it
    again; the walk's size serves ``_read``.  Only a read that gives nothing or another size
    asks whether the file is still regular (a FIFO reads as empty): else the caller checks."""

    def __init__(self, root: str) -> None:
        self._root = os.open(root, ROOT_FLAGS)  # the root itself through a link, as the walk opens it
        self._open: dict[str, int] = {}

    def read(self, path: str, size: int, limit: int | None) -> bytes | None:
        """The file's bytes as ``LocalFiles.read`` gives them; None when it cannot be read this way
        (a link, a folder, gone): the caller then opens it with every check."""
        try:
            descriptor = self.open(path)
        except OSError:
            return None
        try:
            found = _read(descriptor, size, limit)
            if (not found or len(found) != min(size, limit or size)) and not stat_module.S_ISREG(
                os.fstat(descriptor).st_mode
            ):
                return None
            return found
        except OSError:
            return None
        finally:
            os.close(descriptor)

    def open(self, path: str) -> int:
        """``path`` (root-relative, POSIX) opened in its folder's descriptor, not followed if it is a symlink."""
        folder, _, name = path.rpartition("/")
        return os.open(name, _READ_FLAGS, dir_fd=self._folder(folder) if folder else self._root)

    def _folder(self, folder: str) -> int:
        """The folder's descriptor; a few are kept, for names sorted between a folder's files
        (``notes/2026-01.md``, ``notes/2026-01/detail.md``, ``notes/2026-02.md``)."""
        descriptor = self._open.get(folder)
        if descriptor is None:
            if len(self._open) >= _FOLDERS_KEPT:
                os.close(self._open.pop(next(iter(self._open))))
            descriptor = self._open[folder] = self._opened(folder)
        return descriptor

    def _opened(self, folder: str) -> int:
        descriptor = self._root
        try:
            for name in folder.split("/"):
                inner = os.open(name, FOLDER_FLAGS, dir_fd=descriptor)
                if descriptor != self._root:
                    os.close(descriptor)
                descriptor = inner
        except OSError:
            if descriptor != self._root:
                os.close(descriptor)
            raise
        return descriptor

    def close(self) -> None:
        for descriptor in (*self._open.values(), self._root):
            os.close(descriptor)
        self._open.clear()


_FOLDERS_KEPT = 8


def _read(descriptor: int, size: int, limit: int | None) -> bytes:
    """The file's bytes up to its end (or ``limit``): one read when it gives the open file's
    ``size``, as it nearly always does; after a short read, a grown or shrunk file, on to the end."""
    wanted = size + 1 if limit is None else min(limit, size + 1)
    if wanted > _CHUNK:
        return b"".join(_chunks(descriptor, limit))
    first = os.read(descriptor, wanted)
    if not first or len(first) == size or len(first) == limit:
        return first
    rest = _chunks(descriptor, None if limit is None else limit - len(first))
    return first + b"".join(rest)


def _chunks(descriptor: int, limit: int | None = None) -> Iterator[bytes]:
    """The file's bytes up to its end (or ``limit``): only an empty read means the end (network
    and FUSE file systems, or signals, may return less than asked)."""
    left = limit
    while left is None or left > 0:
        chunk = os.read(descriptor, _CHUNK if left is None else min(left, _CHUNK))
        if not chunk:
            return
        yield chunk
        if left is not None:
            left -= len(chunk)


def _meta(info: os.stat_result) -> FileMeta:
    return FileMeta(info.st_size, info.st_mtime_ns, info.st_ctime_ns, info.st_ino)


_new_meta = FileMeta._make
"""A ``FileMeta`` of a tuple of its four values (``FileMeta(...)`` runs one more Python frame)."""


def _reason(error: OSError) -> str:
    return error.strerror or type(error).__name__
