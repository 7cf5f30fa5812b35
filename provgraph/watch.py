"""The inotify watch that tells the AgentScope middleware that nothing in a memory folder
changed, for one non-blocking ``read``: the kernel queues an event inside the very system
call that changes a watched folder.  Watched: every folder a walk enters, the state folder
and the lock's folder, armed before the walk they vouch for; each check also stats the
memory and state folders (a symbolic link above them, re-pointed, sends no event into them).
Any ``Doubt`` means ``Memory.refresh()``.  inotify is the ``watch`` extra, imported only here.
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
from typing import TYPE_CHECKING, Protocol, cast

from .clock import current
from .errors import log_warning
from .model import Report
from .store.state import FLOCK_NAME, LOCK_NAME, STATE_DIR

if TYPE_CHECKING:
    from .api import Memory

__all__ = ["MAX_FOLDERS", "Doubt", "FolderWatch", "WatchTargets", "WatchedRefresh"]

MAX_FOLDERS = 4096
"""Folders watched at most: above this, a walk is cheaper to keep than thousands of watches."""
RETRY_SECONDS = 30.0  # after the system refused a watch (its limits), how long to walk before trying again
LOCAL_FILE_SYSTEMS = frozenset(
    {"ext2", "ext3", "ext4", "xfs", "btrfs", "tmpfs", "ramfs", "f2fs", "jfs", "reiserfs", "zfs", "bcachefs"}
    | {"nilfs2", "overlay"}
)
"""File systems whose every change goes through this machine's kernel (unlike network and FUSE ones)."""

# inotify's event bits (linux/inotify.h): the values are the kernel's ABI.
_MODIFY, _ATTRIB, _CLOSE_WRITE = 0x2, 0x4, 0x8
_MOVED_FROM, _MOVED_TO, _CREATE, _DELETE = 0x40, 0x80, 0x100, 0x200
_DELETE_SELF, _MOVE_SELF, _UNMOUNT, _Q_OVERFLOW, _IGNORED = 0x400, 0x800, 0x2000, 0x4000, 0x8000
_ONLYDIR, _DONT_FOLLOW, _ISDIR = 0x01000000, 0x02000000, 0x40000000
_ARRIVED = _CREATE | _MOVED_TO
_SHAPE_CHANGED = _ARRIVED | _DELETE | _MOVED_FROM
_FOLDER_MASK = _MODIFY | _ATTRIB | _CLOSE_WRITE | _SHAPE_CHANGED | _DELETE_SELF | _MOVE_SELF | _ONLYDIR | _DONT_FOLLOW
"""Every change of an entry's content, metadata or name, and of the folder itself (not reads)."""
_LOST = _DELETE_SELF | _MOVE_SELF | _UNMOUNT | _Q_OVERFLOW | _IGNORED  # the watches no longer cover it
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
    """The folders a memory folder's answer depends on, by their paths on this machine."""

    root: str
    state: str
    lock_folder: str

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
    """Arming stopped: the watch cannot vouch for the folder (the ``Doubt`` is its argument)."""


class FolderWatch:
    """inotify watches over a memory folder, its state folder and its lock's folder; not thread-safe."""

    def __init__(self, targets: WatchTargets) -> None:
        self.given = targets
        """The folders as the memory names them; ``targets``: where they led at the last arming."""
        self.targets = targets.resolved()
        self._identity = targets.identity()
        self._permanent = _unsupported()
        self.doubt: Doubt | None = self._permanent
        """Why the last walk could not be vouched for (None when it was, or before any)."""
        self._inotify: _Inotify | None = None
        self._folders: dict[int, str] = {}  # each watch's folder, by its descriptor
        self._outside: set[int] = set()  # the watches of the state and lock folders outside the tree
        self._shape: Doubt | None = None  # a link, hard link or mount: a doubt until the shape changes
        self._rearm, self._vouched = True, False
        self._retry: tuple[float, Doubt] | None = None  # when to try again after a refusal, and why

    def quiet(self) -> bool:
        """True when the last walk was vouched for and no event since concerns the answer."""
        if not self._vouched or self._inotify is None:
            return False
        if self.given.identity() != self._identity:
            self._vouched, self._rearm = False, True  # a link on the way to a watched folder was re-pointed
            return False
        self._vouched = not self._changed(during_walk=False)
        return self._vouched

    def before_walk(self) -> None:
        """Take in what happened, and arm (again) when the watches no longer cover the folder:
        before the walk, so that a change made while it reads is an event."""
        self._vouched = False
        self.doubt = self._permanent
        if self._permanent is not None:
            return
        if self._inotify is not None:
            self._changed(during_walk=False)
        if self._inotify is None or self._rearm:
            self._arm()

    def after_walk(self, report: Report, *, trusted: bool) -> bool:
        """Vouch for the walk's report when no event during the walk concerns it (events in
        the state folder are the walk's own writes, but the lock's: a pulled one looks the same)."""
        if self._inotify is None:
            return False
        changed = self._changed(during_walk=True)
        self.doubt = self.doubt or self._shape or _source_doubt(report) or (None if trusted else Doubt.WARNED)
        self._vouched = not changed and not self._rearm and self.doubt is None
        return self._vouched

    def close(self) -> None:
        """Release the inotify descriptor (idempotent)."""
        if self._inotify is not None:
            self._inotify.close()
            self._inotify = None
        self._folders, self._outside, self._vouched, self._rearm = {}, set(), False, True

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
            self._refuse(refused.args[0])
        except OSError:
            self._refuse(Doubt.MISSING)  # the folder went away while it was being watched

    def _refuse(self, doubt: Doubt) -> None:
        """A doubt about the shape keeps the watches (a change of shape re-arms); others drop them."""
        self.doubt = doubt
        if doubt in (Doubt.LINK_OUT, Doubt.HARD_LINK, Doubt.MOUNT):
            self._shape = doubt
        elif doubt is Doubt.MISSING:
            self._rearm = True
        else:
            if doubt is Doubt.FILE_SYSTEM:
                self._permanent = doubt
            else:  # LIMIT, TOO_MANY_FOLDERS
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
        """Watch every folder a walk enters, each before it is listed; the first doubt about its shape."""
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
                found = None if entry.name.startswith(".") else self._look_at(entry, device, pending)
                doubt = doubt or found
        return doubt

    def _look_at(self, entry: os.DirEntry[str], device: int, pending: list[str]) -> Doubt | None:
        try:
            info = entry.stat(follow_symlinks=False)
        except OSError:
            return None  # gone meanwhile: an event says so
        if not stat_module.S_ISDIR(info.st_mode):
            return _entry_doubt(entry.path, info, self.targets.root)
        if info.st_dev != device:
            return Doubt.MOUNT
        pending.append(entry.path)
        return None

    def _watch(self, folder: str, *, in_tree: bool) -> None:
        assert self._inotify is not None
        if len(self._folders) >= MAX_FOLDERS:
            raise _Refused(Doubt.TOO_MANY_FOLDERS)
        try:
            descriptor = self._inotify.add_watch(folder, _FOLDER_MASK)
        except FileNotFoundError:
            if in_tree and folder != self.targets.root or os.path.dirname(folder) == self.targets.root:
                return  # gone meanwhile, or a state folder not made yet: its parent's event says so
            raise _Refused(Doubt.MISSING) from None
        except OSError as error:
            if error.errno in (errno.ENOTDIR, errno.ENOENT, errno.EACCES):
                return  # not a folder (any more), or unreadable: the walk cannot enter it either
            raise _Refused(Doubt.LIMIT) from None  # ENOSPC, ENOMEM: the system's limits
        self._folders[descriptor] = folder
        if not in_tree:
            self._outside.add(descriptor)

    def _changed(self, *, during_walk: bool) -> bool:
        """Whether an event queued now (read without waiting) concerns the answer."""
        assert self._inotify is not None
        chunks = []
        try:
            while chunk := os.read(self._inotify.fileno(), _READ_SIZE):
                chunks.append(chunk)
        except BlockingIOError:
            pass  # the queue is empty
        if not chunks:
            return False
        from inotify_simple import parse_events  # type: ignore[import-untyped,unused-ignore]

        events = parse_events(b"".join(chunks))  # each taken in (a list, not a generator): any may re-arm
        return any([self._concerns(event.wd, event.mask, event.name, during_walk) for event in events])

    def _concerns(self, descriptor: int, mask: int, name: str, during_walk: bool) -> bool:
        folder = self._folders.get(descriptor)
        if mask & _LOST or folder is None:
            self._rearm = True
            return True
        is_lock = name == LOCK_NAME and folder == self.targets.lock_folder
        if descriptor in self._outside and name == FLOCK_NAME:
            return False  # another process took the lock: it holds no data, and what was written under it has events
        if descriptor in self._outside or is_lock:
            return is_lock or not during_walk  # the cache's files count unless the walk wrote them
        if name.startswith("."):
            if name == STATE_DIR and mask & _SHAPE_CHANGED:
                self._rearm = True  # the state folder came or went: watch it (again)
            return self._rearm
        if self._shape is not None and mask & _SHAPE_CHANGED or mask & _ISDIR and mask & _ATTRIB:
            self._rearm = True  # the shape changed: look at it again; or a folder may have become readable
        elif mask & _ARRIVED:
            self._arrived(os.path.join(folder, name), bool(mask & _ISDIR))
        return True

    def _arrived(self, path: str, is_folder: bool) -> None:
        """A new entry: a folder re-arms, a link out or a hard-linked file is a doubt."""
        if is_folder:
            self._rearm = True
            return
        try:
            info = os.lstat(path)
        except OSError:
            return
        if stat_module.S_ISDIR(info.st_mode):
            self._rearm = True
        else:
            self._shape = _entry_doubt(path, info, self.targets.root) or self._shape


class WatchedRefresh:
    """``Memory.refresh()`` that answers from its last report while the watch says nothing
    changed: that report with ``scanned_at`` set to ``now``, as a refresh would give it."""

    def __init__(self, open_memory: Callable[[Callable[[str], None]], Memory]) -> None:
        """``open_memory(warn)`` makes the ``Memory`` whose warnings go to ``warn`` (they void a walk)."""
        self._warnings = 0
        memory = self.memory = open_memory(self._warn)
        self.watch = FolderWatch(WatchTargets(str(memory.root), str(memory.state_path), str(memory.lock_path.parent)))
        self._last: Report | None = None
        self.walks = 0
        """Calls not answered from the watch."""

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
    """``dataclasses.replace(report, scanned_at=now)`` spelt out: cheaper, on every call the watch answers."""
    return Report(report.root, now, report.file_count, report.edges, report.stale, report.cycles, report.problems)


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
        return cast(_Inotify, INotify(nonblocking=True))
    except OSError:
        raise _Refused(Doubt.LIMIT) from None


def _inside_tree(root: str, path: str) -> bool:
    """Whether a real path lies in the part of ``root`` a walk enters (no hidden component)."""
    prefix = root.rstrip("/") + "/"
    inside = path.startswith(prefix) and not any(part.startswith(".") for part in path[len(prefix) :].split("/"))
    return path == root or inside


def _entry_doubt(path: str, info: os.stat_result, root: str) -> Doubt | None:
    """The doubt an entry that is not a folder raises: a link out, or a hard-linked file."""
    if stat_module.S_ISLNK(info.st_mode):
        return None if _link_stays(path, root) else Doubt.LINK_OUT
    if stat_module.S_ISREG(info.st_mode) and info.st_nlink > 1:
        return Doubt.HARD_LINK
    return None


def _link_stays(path: str, root: str) -> bool:
    """Whether every step of a link's chain (at most 40), and its end, lie in watched folders of ``root``."""
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
    """A declared source in a hidden folder (but provgraph's own) is outside the watches."""
    for source in {edge.source for edge in report.edges}:
        parts = source.split("/")
        if parts[0] not in (STATE_DIR, LOCK_NAME) and any(part.startswith(".") for part in parts):
            return Doubt.HIDDEN_SOURCE
    return None


def _local(path: str) -> bool:
    """Whether ``path``'s mount (the longest prefix in ``/proc/self/mountinfo``) is local."""
    holding = [mount for mount in _mounts() if path == mount[0] or path.startswith(mount[0].rstrip("/") + "/")]
    return max(holding, key=lambda mount: len(mount[0]), default=("", ""))[1] in LOCAL_FILE_SYSTEMS


def _mounts() -> list[tuple[str, str]]:
    """(mount point, file system type) of each line of ``/proc/self/mountinfo``."""
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as lines:
            split = [line.split(" - ", 1) for line in lines if " - " in line]
    except OSError:
        return []
    return [(_unescaped(before.split(" ")[4]), after.split(" ")[0]) for before, after in split]


def _unescaped(point: str) -> str:
    for escaped, plain in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"), ("\\134", "\\")):
        point = point.replace(escaped, plain)
    return point
