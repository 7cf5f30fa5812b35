"""The folders provgraph writes in, opened once and then used only by name.

Every file provgraph reads or writes for its own state is named relative to a
folder descriptor that was opened with ``O_NOFOLLOW`` and checked to be a real
folder, and opened itself with ``O_NOFOLLOW``: a symlink planted at
``.provgraph``, at the lock or at the cache can never send a write (or a
rename, or a delete) anywhere else.  Temporary files are created with
``O_EXCL`` and renamed into place from one folder descriptor to the other, so
a reader never sees a partial file and a crash leaves the old or the new one.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import stat
import time
from collections.abc import Iterable
from typing import BinaryIO

from ..errors import ProvgraphError

__all__ = ["Folders", "LockBusy", "hold", "in_memory_tree", "open_file", "open_folder", "read_file", "write_file"]

_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_READ = os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC | getattr(os, "O_NOCTTY", 0)
_NEW = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
TEMPORARY = ".tmp"


class LockBusy(ProvgraphError):
    """Another process holds the exclusive lock for longer than the wait allowed."""

    def __init__(self, waited: float) -> None:
        super().__init__(f"locked by another provgraph process (waited {waited:g} s)")
        self.waited = waited


class Folders:
    """Open descriptors: ``state`` holds the cache, the lock's temporaries and what is set
    aside (-1 when it does not exist yet); ``lock`` holds ``provgraph.lock`` (the memory
    root, or the state folder itself).  Equal only to itself: descriptors are not values."""

    __slots__ = ("state", "lock", "state_path", "lock_path")

    def __init__(
        self, state: int, lock: int, state_path: str | os.PathLike[str], lock_path: str | os.PathLike[str]
    ) -> None:
        self.state, self.lock = state, lock
        self.state_path, self.lock_path = state_path, lock_path

    def path_of(self, folder: int, name: str) -> str:
        """The path of ``name`` in ``folder`` (``lock`` or ``state``), for messages."""
        return os.path.join(self.lock_path if folder == self.lock else self.state_path, name)

    def close(self) -> None:
        for descriptor in {self.state, self.lock} - {-1}:
            with contextlib.suppress(OSError):
                os.close(descriptor)


def in_memory_tree(folder: str | os.PathLike[str], root: str | os.PathLike[str], own: str) -> bool:
    """True when ``folder`` lies in the memory folder ``root`` but outside its state folder
    ``own``: a state folder there could have provgraph overwrite a memory file."""
    real, real_root = os.path.realpath(folder), os.path.realpath(root)
    return _within(real, real_root) and not _within(real, os.path.join(real_root, own))


def _within(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def open_folder(parent: str | os.PathLike[str], name: str, *, create: bool) -> int | None:
    """``parent/name`` as a real folder (never through a symlink), made when ``create``;
    None when it does not exist and ``create`` is false.  ``NotADirectoryError`` when
    something else is there (a symlink, a file)."""
    parent_descriptor = os.open(parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        if create:
            with contextlib.suppress(FileExistsError):
                os.mkdir(name, 0o755, dir_fd=parent_descriptor)
        try:
            return os.open(name, _DIRECTORY, dir_fd=parent_descriptor)
        except FileNotFoundError:
            if create:
                raise
            return None
        except OSError as error:
            if error.errno in (errno.ELOOP, errno.ENOTDIR):
                raise NotADirectoryError(errno.ENOTDIR, "not a real folder", os.path.join(parent, name)) from None
            raise
    finally:
        os.close(parent_descriptor)


def read_file(folder: int, name: str, where: str | os.PathLike[str], limit: int | None = None) -> bytes | None:
    """The bytes of the regular file ``name`` (its first ``limit`` bytes at most); None
    when there is none, as ``open_file`` finds it.

    Read in one call of the size the open file has, as it nearly always gives it all (a
    large read allocates its buffer once, and nothing is joined); a read that gives less,
    or a file that grew meanwhile, is read on to its end."""
    opened = open_file(folder, name, where)
    if opened is None:
        return None
    with opened:
        descriptor = opened.fileno()
        size = os.fstat(descriptor).st_size
        first = os.read(descriptor, size + 1 if limit is None else min(limit, size + 1))
        if limit is not None or len(first) == size or not first:
            return first
        chunks = [first]
        while chunk := os.read(descriptor, 1 << 20):
            chunks.append(chunk)
        return b"".join(chunks)


def open_file(folder: int, name: str, where: str | os.PathLike[str]) -> BinaryIO | None:
    """The regular file ``name`` open for reading; None when there is none.  A symlink or
    anything but a regular file there is an error, found without reading it."""
    try:
        descriptor = os.open(name, _READ, dir_fd=folder)
    except FileNotFoundError:
        return None
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise OSError(
                errno.ELOOP, "a symlink, which provgraph does not follow", os.path.join(where, name)
            ) from None
        raise
    opened = os.fdopen(descriptor, "rb")
    if not stat.S_ISREG(os.fstat(descriptor).st_mode):
        opened.close()
        raise OSError(errno.EINVAL, "not a regular file", os.path.join(where, name))
    return opened


def write_file(
    folders: Folders,
    target: int,
    name: str,
    chunks: Iterable[bytes | bytearray | memoryview],
    *,
    suffix: str = TEMPORARY,
    durable: bool = True,
) -> None:
    """Replace ``name`` in the folder ``target`` atomically: a new temporary file in the
    state folder (its name ends with ``suffix``), written, synced, renamed over it, and
    the folder synced.  Nothing is left behind on failure.  ``durable`` False skips both
    syncs, for a file that can be derived again and is checked when read (the cache): a
    crash of the process still leaves the old file or the new one, whole; only a crash of
    the machine may leave it torn, which its reader detects."""
    temporary = f"{name}.{os.urandom(6).hex()}{suffix}"  # what secrets.token_hex does, without its imports
    descriptor = os.open(temporary, _NEW, 0o644, dir_fd=folders.state)
    try:
        with os.fdopen(descriptor, "wb") as handle:
            handle.writelines(chunks)
            handle.flush()
            if durable:
                os.fsync(handle.fileno())
        os.rename(temporary, name, src_dir_fd=folders.state, dst_dir_fd=target)
        temporary = ""
        if durable:
            with contextlib.suppress(OSError):
                os.fsync(target)
    finally:
        if temporary:
            with contextlib.suppress(OSError):
                os.unlink(temporary, dir_fd=folders.state)


def set_aside(folders: Folders, source: int, name: str, suffix: str) -> str:
    """Move ``name`` from the folder ``source`` into the state folder as
    ``name.<suffix>-<time>``, never over another file; the new name."""
    moment = time.strftime("%Y%m%dT%H%M%S")
    for counter in range(1, 1000):
        aside = f"{name}.{suffix}-{moment}" + (f"-{counter}" if counter > 1 else "")
        try:
            os.stat(aside, dir_fd=folders.state, follow_symlinks=False)
        except FileNotFoundError:
            os.rename(name, aside, src_dir_fd=source, dst_dir_fd=folders.state)
            return aside
    raise FileExistsError(errno.EEXIST, "too many files set aside", os.path.join(folders.state_path, name))


def remove_temporaries(folders: Folders, suffix: str = TEMPORARY) -> None:
    """Delete the temporary files (names ending with ``suffix``) of writers killed before
    their rename: every writer of those files holds one lock, so while it is held none is
    in use.  A writer under another lock gives its temporaries another suffix."""
    with contextlib.suppress(OSError):
        for name in os.listdir(folders.state):
            if name.endswith(suffix):
                with contextlib.suppress(OSError):
                    os.unlink(name, dir_fd=folders.state)


def hold(folder: int, name: str, wait: float) -> int:
    """Take the exclusive lock on ``name`` (a regular file, made if needed), waiting at
    most ``wait`` seconds; the descriptor that holds it.  ``LockBusy`` after that."""
    try:
        descriptor = os.open(name, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644, dir_fd=folder)
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise OSError(errno.ELOOP, "a symlink, which provgraph does not follow", name) from None
        raise
    try:
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):
            raise OSError(errno.EINVAL, "not a regular file", name)
        deadline = time.monotonic() + wait
        pause = 0.001
        while True:
            try:
                fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return descriptor
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise LockBusy(wait) from None
                time.sleep(pause)
                pause = min(pause * 2, 0.05)
    except BaseException:
        os.close(descriptor)
        raise
