"""Throwaway folders for the tests, in memory where the system offers it.

provgraph syncs every state file it writes but the cache (fsync), as a tool that must survive a crash
does.  A property test writes state thousands of times, and on a busy disk it then
waits on the disk, not on provgraph: several times its own run time.  On a
memory-backed file system (Linux's ``/dev/shm``) a sync returns at once, while
everything the tests look at (contents, names, nanosecond times, inode numbers,
renames, the kernel's change events) behaves as on a disk.  Elsewhere, or when that
file system has little room left (a container's is often 64 MB), the folder is an
ordinary temporary one.
"""

from __future__ import annotations

import os
import tempfile

MEMORY_BACKED = "/dev/shm"
ROOM_NEEDED = 1 << 30
"""Free bytes the memory-backed file system must have: a property test's folder is small,
but that space is the machine's memory, shared with everything else running."""


def scratch_folder(prefix: str | None = None) -> tempfile.TemporaryDirectory[str]:
    """A temporary folder (a context manager giving its path) for one example of a
    property test, in the run's temporary folder: memory-backed when
    ``temporary_folders_in_memory`` could make it so."""
    return tempfile.TemporaryDirectory(prefix=prefix)


def _memory_backed_usable() -> bool:
    if not (os.path.isdir(MEMORY_BACKED) and os.access(MEMORY_BACKED, os.W_OK | os.X_OK)):
        return False
    room = os.statvfs(MEMORY_BACKED)
    return room.f_bavail * room.f_frsize >= ROOM_NEEDED


def temporary_folders_in_memory() -> None:
    """Make the memory-backed file system the home of every temporary folder of the run
    (``TMPDIR``): pytest's ``tmp_path``, ``tempfile`` and every process a test starts,
    unless the user chose a ``TMPDIR`` or that file system is missing or nearly full."""
    if "TMPDIR" not in os.environ and _memory_backed_usable():
        os.environ["TMPDIR"] = MEMORY_BACKED
        tempfile.tempdir = None  # asked again on next use
