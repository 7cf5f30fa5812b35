"""Where a file named by a person or a tool lands under the memory root.

The command line, the Claude Code hook and the AgentScope tools are all
handed paths (relative to a working folder, absolute, through a symlinked
folder such as macOS's ``/tmp``) and must agree on which memory file each
one means.  A symlinked folder is resolved, the file's own name never is:
a symlinked memory file counts under its own name, as the scan lists it.
"""

from __future__ import annotations

import contextlib
import os
import posixpath

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path

__all__ = ["normalized", "parts_under", "relative_to"]


def parts_under(root: Path, file: str | os.PathLike[str]) -> tuple[str, ...] | None:
    """The parts of ``file``'s path below ``root``, or None when it is not below it.

    Tried as given first, then with both sides' symlinked folders resolved.
    """
    from pathlib import Path  # a command that names a file; a refresh needs none

    absolute = Path(os.path.abspath(file))
    resolved = Path(os.path.realpath(absolute.parent)) / absolute.name
    for base, target in ((root, absolute), (Path(os.path.realpath(root)), resolved)):
        with contextlib.suppress(ValueError):
            parts = target.relative_to(base).parts
            if parts:
                return parts
    return None


def relative_to(memory_path: str, path: str) -> str | None:
    """The memory-folder-relative POSIX path the agent meant, or None when it points elsewhere.

    For a folder seen as text only (a sandbox's): accepts the path as the
    block lists it, or the full path that retrieval hints show.
    """
    windows = "\\" in memory_path  # there a backslash separates folders; elsewhere it may be in a name
    text = path.strip().replace("\\", "/") if windows else path.strip()
    folder = memory_path.replace("\\", "/").rstrip("/") + "/"
    if text.startswith(folder):
        text = text[len(folder) :]
    elif posixpath.isabs(text):
        return None
    relative = posixpath.normpath(text)
    if relative in (".", "..") or relative.startswith("../"):
        return None
    return relative


def normalized(path: str | os.PathLike[str]) -> str:
    """``path`` spelt as ``pathlib`` spells it (``a//b/./c/`` is ``a/b/c``; ``..`` stays, a
    symlink may lie before it), without importing ``pathlib``, which a refresh never needs
    otherwise: a folder given by the user (``--state``) is then split into its parent and
    its name, and named in messages, exactly as before."""
    text = os.fspath(path)
    head = "//" if text.startswith("//") and not text.startswith("///") else "/" if text.startswith("/") else ""
    return head + "/".join(part for part in text.split("/") if part not in ("", ".")) or "."
