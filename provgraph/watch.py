"""Learning from the operating system that nothing in a memory folder changed.

A long-running process (the AgentScope middleware) asks for the same folder's
report on every model call.  ``Memory.refresh()`` answers an unchanged folder
by walking it and comparing every file's stat with the cache: correct, and
about as costly as the walk.  On Linux, inotify tells the same thing for the
price of one non-blocking ``read``: the kernel queues an event inside the very
system call that changes a watched folder (a ``write``, a ``rename``, a
``utime``), so an edit whose call returned before the check is in the queue
when the check reads it.  ``WatchedRefresh`` answers from its last report
while that queue holds nothing that matters, and walks otherwise.

What is watched: every folder of the memory folder that a walk enters (hidden
ones are not walked, and events on hidden names are ignored), the state folder
and the folder holding the lock; each check also stats the memory and state
folders, since a symbolic link above them, re-pointed, sends no event into
them.  A watch is added before the walk whose report it vouches for, so nothing
changed during the walk is missed; events during the walk make one more walk,
except those of the cache files the walk itself writes under the exclusive
lock (never the lock file: a pulled one looks the same).  Any doubt means
walking (``Memory.refresh()``) for that call: a full event queue, the watch
limit, too many folders, a file system whose changes inotify may not see, a
symbolic link that leads out of the watched folders or ends at a hidden name
(changing the link's target would go unseen), a file with several hard links (written through
another name, it sends no event here), a mount point inside the folder, a
declared source in a hidden folder, a walk that warned (it may not have saved
its answer), and every platform without inotify.  inotify comes from the
``inotify_simple`` package (the ``watch`` extra), imported only here and only
when a watch is made.
"""

from __future__ import annotations

import enum
import errno
import os
import stat as stat_module
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

from .clock import current
from .errors import log_warning
from .model import Report
from .store.state import LOCK_NAME, STATE_DIR

if TYPE_CHECKING:
    from .api import Memory

__all__ = ["MAX_FOLDERS", "Doubt", "FolderWatch", "WatchTargets", "WatchedRefresh"]

MAX_FOLDERS = 4096
"""Folders watched at most: above this, a walk is cheaper to keep than thousands of watches."""
RETRY_SECONDS = 30.0
"""After the system refused a watch (its limits), how long to walk before trying again."""
LOCAL_FILE_SYSTEMS = frozenset(
    {"ext2", "ext3", "ext4", "xfs", "btrfs", "tmpfs", "ramfs", "f2fs", "jfs", "reiserfs", "zfs", "bcachefs"}
    | {"nilfs2", "overlay"}
)
"""File systems whose every change goes through this machine's kernel, so inotify sees it.
Network and FUSE file systems (nfs, cifs, sshfs, 9p, virtiofs, ...) change elsewhere too."""

# inotify's event bits (linux/inotify.h): the values are the kernel's ABI.
_MODIFY, _ATTRIB, _CLOSE_WRITE = 0x2, 0x4, 0x8
_MOVED_FROM, _MOVED_TO, _CREATE, _DELETE = 0x40, 0x80, 0x100, 0x200
_DELETE_SELF, _MOVE_SELF, _UNMOUNT, _Q_OVERFLOW, _IGNORED = 0x400, 0x800, 0x2000, 0x4000, 0x8000
_ONLYDIR, _DONT_FOLLOW, _ISDIR = 0x01000000, 0x02000000, 0x40000000
_FOLDER_MASK = (
    _MODIFY | _ATTRIB | _CLOSE_WRITE | _MOVED_FROM | _MOVED_TO | _CREATE | _DELETE | _DELETE_SELF | _MOVE_SELF
) | (_ONLYDIR | _DONT_FOLLOW)
"""Every change of an entry's content, metadata or name, and of the folder itself;
opening and reading are left out (a walk reads)."""
_LOST = _DELETE_SELF | _MOVE_SELF | _UNMOUNT | _Q_OVERFLOW | _IGNORED
"""The watches no longer cover what they did: watch again."""
_ARRIVED = _CREATE | _MOVED_TO
_READ_SIZE = 65536


class Doubt(enum.Enum):
    """Why the watch cannot vouch for the folder now; every call walks meanwhile."""

    UNSUPPORTED = "this system has no inotify (Linux only, with the watch extra)"
    FILE_SYSTEM = "the folder lies on a file system whose changes inotify may not see"
    LIMIT = "the system refused a watch (its inotify limits)"
    TOO_MANY_FOLDERS = "more folders than the watch takes (MAX_FOLDERS)"
    LINK_OUT = "a symbolic link leads out of the watched folders"
    HARD_LINK = "a file has other hard links, through which it may change unseen"
    MOUNT = "another file system is mounted inside the folder"
    HIDDEN_SOURCE = "a declared source lies in a hidden folder, which is not watched"
    MISSING = "the memory folder or its state folder does not exist (yet)"
    WARNED = "the last walk warned (its answer may not be saved)"


@dataclass(frozen=True)
class WatchTargets:
    """The folders a memory folder's answer depends on: the memory folder, the state
    folder and the folder of the lock, by their paths on this machine."""

    root: str
    state: str
    lock_folder: str

    @classmethod
    def of(cls, memory: Memory) -> WatchTargets:
        return cls(str(memory.root), str(memory.state_path), str(memory.lock_path.parent))

    def resolved(self) -> WatchTargets:
        """The same folders by their real paths (what a symbolic link on the way leads to now)."""
        return WatchTargets(*map(os.path.realpath, (self.root, self.state, self.lock_folder)))

    def identity(self) -> tuple[tuple[int, int] | None, ...]:
        """Which folders the paths lead to now: a link on the way re-pointed leads elsewhere."""
        return tuple(map(_identity, (self.root, self.state)))


def _identity(path: str) -> tuple[int, int] | None:
    try:
        info = os.stat(path)
    except OSError:
        return None
    return info.st_dev, info.st_ino


class _Inotify(Protocol):
    """What is used of ``inotify_simple.INotify``."""

    def add_watch(self, path: str, mask: int) -> int: ...
    def fileno(self) -> int: ...
    def close(self) -> None: ...


class _Refused(Exception):
    """Arming stopped: the watch cannot vouch for the folder."""

    def __init__(self, doubt: Doubt) -> None:
        super().__init__(doubt.value)
        self.doubt = doubt


@dataclass(frozen=True)
class _Folder:
    """A watched folder: its real path, and whether it is part of the memory tree."""

    path: str
    in_tree: bool


class FolderWatch:
    """inotify watches over a memory folder, its state folder and its lock's folder.

    ``quiet()`` says whether nothing that matters changed since the last walk
    it vouched for; ``before_walk()`` and ``after_walk()`` frame each walk.
    Not thread-safe: the caller serialises (the middleware holds its guard).
    """

    def __init__(self, targets: WatchTargets, *, max_folders: int | None = None) -> None:
        self.given = targets
        """The folders as the memory names them; ``targets`` are where they lead at the last arming."""
        self.targets = targets.resolved()
        self._identity = targets.identity()
        self.max_folders = MAX_FOLDERS if max_folders is None else max_folders
        self.doubt: Doubt | None = None
        """Why the last walk could not be vouched for (None when it was, or before any)."""
        self._inotify: _Inotify | None = None
        self._folders: dict[int, _Folder] = {}
        self._shape: Doubt | None = None
        """A doubt about the folder's shape (a link, a hard link, a mount): it lasts until the shape changes."""
        self._rearm = True
        self._vouched = False
        self._retry: tuple[float, Doubt] | None = None
        """When watching may be tried again after the system refused it, and why it was refused."""
        self._permanent = _unsupported()
        if self._permanent is not None:
            self.doubt = self._permanent

    # -- the three steps of a call ---------------------------------------------

    def quiet(self) -> bool:
        """True when the last walk was vouched for and no event since concerns the answer."""
        if not self._vouched or self._inotify is None:
            return False
        if self.given.identity() != self._identity:
            self._vouched, self._rearm = False, True  # a link on the way to a watched folder was re-pointed
            return False
        data = self._read()
        if data and self._absorb(data, during_walk=False):
            self._vouched = False
        return self._vouched

    def before_walk(self) -> None:
        """Take in what happened, and watch (again) when the watches no longer cover the folder.

        Arming comes before the walk: a change made while the walk reads is
        then an event, and the walk is not vouched for."""
        self._vouched = False
        self.doubt = self._permanent
        if self._permanent is not None:
            return
        if self._inotify is not None:
            data = self._read()
            if data:
                self._absorb(data, during_walk=False)
        if self._inotify is None or self._rearm:
            self._arm()

    def after_walk(self, report: Report, *, trusted: bool) -> bool:
        """Vouch for the walk's report when no event during the walk concerns it.

        Events in the state folder are the walk's own writes (it holds the
        exclusive lock meanwhile), except the lock's: a pulled lock looks the
        same as a lock the walk wrote, and costs one more walk."""
        if self._inotify is None:
            return False
        data = self._read()
        changed = bool(data) and self._absorb(data, during_walk=True)
        self.doubt = self.doubt or self._shape or _source_doubt(report) or (None if trusted else Doubt.WARNED)
        self._vouched = not changed and not self._rearm and self.doubt is None
        return self._vouched

    def close(self) -> None:
        """Release the inotify descriptor (idempotent)."""
        if self._inotify is not None:
            self._inotify.close()
            self._inotify = None
        self._folders = {}
        self._vouched = False
        self._rearm = True

    # -- arming ------------------------------------------------------------------

    def _arm(self) -> None:
        self.close()
        self._shape = None
        if self._retry is not None and time.monotonic() < self._retry[0]:
            self.doubt = self._retry[1]
            return
        try:
            self._inotify = _new_inotify()
            self._rearm = False
            self._identity = self.given.identity()  # first: a link re-pointed from now on is seen
            self.targets = self.given.resolved()
            self._watch_all()
        except _Refused as refused:
            self._refuse(refused.doubt)
        except OSError:
            self._refuse(Doubt.MISSING)  # the folder went away while it was being watched

    def _refuse(self, doubt: Doubt) -> None:
        """A doubt about the folder's shape keeps the watches (a change of shape re-arms);
        a limit or an incomplete watch drops them."""
        self.doubt = doubt
        if doubt in (Doubt.LINK_OUT, Doubt.HARD_LINK, Doubt.MOUNT):
            self._shape = doubt
            return
        if doubt is Doubt.MISSING:
            self._rearm = True
            return
        if doubt is Doubt.FILE_SYSTEM:
            self._permanent = doubt
        elif doubt in (Doubt.LIMIT, Doubt.TOO_MANY_FOLDERS):
            self._retry = (time.monotonic() + RETRY_SECONDS, doubt)
        self.close()

    def _watch_all(self) -> None:
        targets = self.targets
        if not all(_local(path) for path in {targets.root, targets.state, targets.lock_folder}):
            raise _Refused(Doubt.FILE_SYSTEM)
        shape = self._watch_tree(targets.root)
        for folder in (targets.state, targets.lock_folder):
            if not _inside_tree(targets.root, folder):
                self._watch(folder, in_tree=False)
        if shape is not None:
            raise _Refused(shape)

    def _watch_tree(self, top: str) -> Doubt | None:
        """Watch ``top`` and every folder below it a walk enters; the first doubt about its shape.

        Each folder is watched before it is listed, so an entry made between
        the two is either listed or an event."""
        device = os.stat(top).st_dev
        pending, doubt = [top], None
        while pending:
            folder = pending.pop()
            self._watch(folder, in_tree=True)
            try:
                entries = list(os.scandir(folder))
            except OSError:
                continue  # the walk reports it; a change of its permissions is an event
            for entry in entries:
                if entry.name.startswith("."):
                    continue
                found = self._look_at(entry, device, pending)
                doubt = doubt or found
        return doubt

    def _look_at(self, entry: os.DirEntry[str], device: int, pending: list[str]) -> Doubt | None:
        try:
            info = entry.stat(follow_symlinks=False)
        except OSError:
            return None  # gone meanwhile: an event says so
        if stat_module.S_ISLNK(info.st_mode):
            return None if _link_stays(entry.path, self.targets.root) else Doubt.LINK_OUT
        if stat_module.S_ISDIR(info.st_mode):
            if info.st_dev != device:
                return Doubt.MOUNT
            pending.append(entry.path)
            return None
        if stat_module.S_ISREG(info.st_mode) and info.st_nlink > 1:
            return Doubt.HARD_LINK
        return None

    def _watch(self, folder: str, *, in_tree: bool) -> None:
        assert self._inotify is not None
        if len(self._folders) >= self.max_folders:
            raise _Refused(Doubt.TOO_MANY_FOLDERS)
        try:
            descriptor = self._inotify.add_watch(folder, _FOLDER_MASK)
        except FileNotFoundError:
            if in_tree and folder != self.targets.root or os.path.dirname(folder) == self.targets.root:
                return  # gone meanwhile, or a state folder not made yet: its parent's event says so
            raise _Refused(Doubt.MISSING) from None
        except OSError as error:
            if error.errno in (errno.ENOSPC, errno.ENOMEM):
                raise _Refused(Doubt.LIMIT) from None
            if error.errno in (errno.ENOTDIR, errno.ENOENT, errno.EACCES):
                return  # not a folder (any more), or unreadable: the walk cannot enter it either
            raise _Refused(Doubt.LIMIT) from None
        self._folders[descriptor] = _Folder(folder, in_tree)

    # -- events --------------------------------------------------------------------

    def _read(self) -> bytes:
        """Every event queued now, without waiting (the descriptor is non-blocking)."""
        assert self._inotify is not None
        chunks = []
        while True:
            try:
                chunk = os.read(self._inotify.fileno(), _READ_SIZE)
            except BlockingIOError:
                break
            if not chunk:
                break
            chunks.append(chunk)
        return b"".join(chunks)

    def _absorb(self, data: bytes, *, during_walk: bool) -> bool:
        """Whether the events in ``data`` concern the answer; marks the watches for
        re-arming when they no longer cover the folder."""
        from inotify_simple import parse_events  # type: ignore[import-untyped,unused-ignore]

        changed = False
        for event in parse_events(data):
            changed = self._concerns(event.wd, event.mask, event.name, during_walk) or changed
        return changed

    def _concerns(self, descriptor: int, mask: int, name: str, during_walk: bool) -> bool:
        folder = self._folders.get(descriptor)
        if mask & _LOST or folder is None:
            self._rearm = True
            return True
        if not folder.in_tree or folder.path == self.targets.lock_folder and name == LOCK_NAME:
            return _concerns_state(folder.path, name, self.targets, during_walk)
        if name.startswith("."):
            if name == STATE_DIR and mask & (_ARRIVED | _DELETE | _MOVED_FROM):
                self._rearm = True  # the state folder came or went: watch it (again)
            return self._rearm
        if self._shape is not None and mask & (_ARRIVED | _DELETE | _MOVED_FROM) or mask & _ISDIR and mask & _ATTRIB:
            self._rearm = True  # the shape changed: look at it again; or a folder may have become readable
        elif mask & _ARRIVED:
            self._arrived(os.path.join(folder.path, name), bool(mask & _ISDIR))
        return True

    def _arrived(self, path: str, is_folder: bool) -> None:
        """A new entry: a folder is watched with all it holds (a re-arm), a link or a
        hard-linked file is a doubt until the shape changes again."""
        if is_folder:
            self._rearm = True
            return
        try:
            info = os.lstat(path)
        except OSError:
            return
        if stat_module.S_ISLNK(info.st_mode) and not _link_stays(path, self.targets.root):
            self._shape = Doubt.LINK_OUT
        elif stat_module.S_ISREG(info.st_mode) and info.st_nlink > 1:
            self._shape = Doubt.HARD_LINK
        elif stat_module.S_ISDIR(info.st_mode):
            self._rearm = True


def _concerns_state(folder: str, name: str, targets: WatchTargets, during_walk: bool) -> bool:
    """An event in the state folder or on the lock: the lock always counts; the cache's
    files count unless the walk itself wrote them."""
    if name == LOCK_NAME and folder == targets.lock_folder:
        return True
    return not during_walk


class WatchedRefresh:
    """``Memory.refresh()`` that answers from its last report while the watch says nothing changed.

    The report given back is the last walk's with ``scanned_at`` set to
    ``now``: what ``Memory.refresh(now=now)`` returns for an unchanged folder.
    """

    def __init__(self, open_memory: Callable[[Callable[[str], None]], Memory]) -> None:
        """``open_memory(warn)`` makes the ``Memory`` whose warnings go to ``warn``:
        a walk that warned is not vouched for."""
        self._warnings = 0
        self.memory = open_memory(self._warn)
        self.watch = FolderWatch(WatchTargets.of(self.memory))
        self._last: Report | None = None
        self.walks = 0
        """Walks made so far (each call that was not answered from the watch)."""

    def refresh(self, now: datetime | None = None) -> Report:
        """``Memory.refresh(now=now)``'s answer; ``now`` None reads the clock, as there."""
        now = current(now)
        last = self._last
        if last is not None and self.watch.quiet():
            return _as_of(last, now)
        self._last = None
        self.watch.before_walk()
        warnings = self._warnings
        report = self.memory.refresh(now=now)
        self.walks += 1
        if self.watch.after_walk(report, trusted=self._warnings == warnings):
            self._last = report
        return report

    def close(self) -> None:
        self._last = None
        self.watch.close()

    def _warn(self, message: str) -> None:
        self._warnings += 1
        log_warning(message)


def _as_of(report: Report, now: datetime) -> Report:
    """``dataclasses.replace(report, scanned_at=now)``, spelt out: made on every call the
    watch answers, where ``replace`` (which looks the fields up each time) took a third of
    the call."""
    return Report(
        root=report.root,
        scanned_at=now,
        file_count=report.file_count,
        edges=report.edges,
        stale=report.stale,
        cycles=report.cycles,
        problems=report.problems,
    )


# -- the folder's shape ---------------------------------------------------------------


def _unsupported() -> Doubt | None:
    if not sys.platform.startswith("linux"):
        return Doubt.UNSUPPORTED
    try:
        import inotify_simple  # type: ignore[import-untyped,unused-ignore]  # noqa: F401
    except ImportError:
        return Doubt.UNSUPPORTED
    return None


def _new_inotify() -> _Inotify:
    from inotify_simple import INotify  # type: ignore[import-untyped,unused-ignore]

    try:
        created: Any = INotify(nonblocking=True)
    except OSError:
        raise _Refused(Doubt.LIMIT) from None
    return created  # type: ignore[no-any-return]


def _inside_tree(root: str, path: str) -> bool:
    """Whether a real path lies in the part of ``root`` a walk enters (no hidden component)."""
    if path == root:
        return True
    if not path.startswith(root.rstrip("/") + "/"):
        return False
    return not any(part.startswith(".") for part in path[len(root.rstrip("/")) + 1 :].split("/"))


def _link_stays(path: str, root: str) -> bool:
    """Whether every step of a symbolic link's chain, and where it ends, lies in watched
    folders of ``root``: then re-pointing any step, or changing what it leads to, is an
    event.  A chain of more than 40 steps is doubtful."""
    current = path
    for _ in range(40):
        folder = os.path.realpath(os.path.dirname(current))
        if not _inside_tree(root, folder):
            return False
        try:
            target = os.readlink(current)
        except OSError:  # the end of the chain: it too must be watched (not a hidden name or folder)
            return _inside_tree(root, os.path.realpath(current))
        current = os.path.join(folder, target)
    return False


def _source_doubt(report: Report) -> Doubt | None:
    """A declared source in a hidden folder is outside the watches (provgraph's own
    files, never a source, answer the same whatever happens to them)."""
    for source in {edge.source for edge in report.edges}:
        parts = source.split("/")
        if parts[0] in (STATE_DIR, LOCK_NAME):
            continue
        if any(part.startswith(".") for part in parts):
            return Doubt.HIDDEN_SOURCE
    return None


def _local(path: str) -> bool:
    """Whether ``path`` lies on a file system of ``LOCAL_FILE_SYSTEMS`` (read from
    ``/proc/self/mountinfo``: the mount with the longest prefix of the path)."""
    mounts = _mounts()
    best, kind = "", ""
    for point, fs_type in mounts:
        if (path == point or path.startswith(point.rstrip("/") + "/")) and len(point) > len(best):
            best, kind = point, fs_type
    return kind in LOCAL_FILE_SYSTEMS


def _mounts() -> list[tuple[str, str]]:
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as lines:
            return [_mount(line) for line in lines if " - " in line]
    except OSError:
        return []


def _mount(line: str) -> tuple[str, str]:
    """(mount point, file system type) of one ``mountinfo`` line."""
    before, after = line.split(" - ", 1)
    point = before.split(" ")[4]
    for escaped, plain in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"), ("\\134", "\\")):
        point = point.replace(escaped, plain)
    return point, after.split(" ")[0]
