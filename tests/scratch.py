"""Throwaway folders for the property tests, in memory where the system offers it.

provgraph syncs every state file it writes (fsync), as a tool that must survive a crash
does.  A property test writes state thousands of times, and on a busy disk it then
waits on the disk, not on provgraph: several times its own run time.  On a
memory-backed file system (Linux's ``/dev/shm``) a sync returns at once, while
everything the tests look at (contents, names, nanosecond times, inode numbers,
renames, the kernel's change events) behaves as on a disk.  Elsewhere the folder is
an ordinary temporary one.
"""

from __future__ import annotations

import os
import tempfile

MEMORY_BACKED = "/dev/shm"


def scratch_folder(prefix: str | None = None) -> tempfile.TemporaryDirectory[str]:
    """A temporary folder (a context manager giving its path), memory-backed when possible."""
    usable = os.path.isdir(MEMORY_BACKED) and os.access(MEMORY_BACKED, os.W_OK | os.X_OK)
    return tempfile.TemporaryDirectory(prefix=prefix, dir=MEMORY_BACKED if usable else None)
