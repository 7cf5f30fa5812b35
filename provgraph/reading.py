"""Reading one memory file for a scan: its hash and its declaration, as plain values.

The one way a file is read for a scan, by the scan's own process (``scan``) and by the
one a first scan of a large folder forks (``splitread``): a module of its own, below both,
so that neither imports the other to read a file.
"""

from __future__ import annotations

import hashlib

from .declarations import FRONTMATTER_LIMIT, NOTHING, Declaration, frontmatter_incomplete, read_declaration
from .files import FileSource, NotRegular, OutsideRoot

__all__ = ["Reading", "describe", "read_one"]

Reading = tuple[bytes | None, Declaration, str | None, bool | None]
"""What reading one file for its declaration gave (``read_one``), as plain values: the
sha256 of a file read whole (None for one longer than the frontmatter's limit), its
declaration, why it could not be read (None when it could), and whether a frontmatter that
declares nothing looks cut short (None when that was not worked out).  A process forked for
a first scan (``splitread``) sends these for its part of the files; the reader records them
with the same step as its own."""


def read_one(files: FileSource, path: str, sources_heading: str | None, remembered: bool) -> Reading:
    """Read ``path`` for its declaration and its hash, changing nothing: the one way a file
    is read for a scan, by the scan's own process or by the one it forked (``splitread``).
    Whether a frontmatter that declares nothing looks cut short is worked out only for a
    ``remembered`` derived file, the one reading that needs it (it costs a search of the
    frontmatter's end in every memory file that declares nothing, most of them)."""
    try:
        head = files.read(path, FRONTMATTER_LIMIT + 1)
    except (OSError, NotRegular, OutsideRoot) as error:
        return None, NOTHING, describe(error), None
    truncated = len(head) > FRONTMATTER_LIMIT
    digest = None if truncated else hashlib.sha256(head).digest()
    declaration = read_declaration(head[:FRONTMATTER_LIMIT] if truncated else head, truncated, sources_heading)
    if remembered and not declaration.entries and not declaration.problems:
        return digest, declaration, None, frontmatter_incomplete(head)
    return digest, declaration, None, None


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
