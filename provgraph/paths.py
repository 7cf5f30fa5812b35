"""Where a file named by a person or a tool lands under the memory root, and the
``provgraph`` commands that outputs print for a person or an agent to paste into a shell.

The command line, the Claude Code hook and the AgentScope tools are all
handed paths (relative to a working folder, absolute, through a symlinked
folder such as macOS's ``/tmp``) and must agree on which memory file each
one means.  A symlinked folder is resolved, the file's own name never is:
a symlinked memory file counts under its own name, as the scan lists it.

A printed command must do, pasted from any folder, what the output says it
does.  So it names the memory root in full, every word is shell-quoted (a
root like ``my memory/it's`` works), and it repeats the options that decide
what a scan reads: the state it records in (``--state``) and the sources
heading (``--sources-heading``).  A command that dropped the heading would
read the heading's sources as removed, forget their stamps, and adopt them
afresh on the next run with the heading: the change it was about to report
would be lost.
"""

from __future__ import annotations

import contextlib
import os
import posixpath
import shlex
from pathlib import Path, PurePosixPath

__all__ = [
    "command_options",
    "hook_command",
    "normalized",
    "parts_under",
    "relative_to",
    "stamp_command",
    "status_command",
]


def parts_under(root: Path, file: str | os.PathLike[str]) -> tuple[str, ...] | None:
    """The parts of ``file``'s path below ``root``, or None when it is not below it.

    Tried as given first, then with both sides' symlinked folders resolved.
    """
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
    """``path`` spelt as ``pathlib`` spells it (``a//b/./c/`` is ``a/b/c``; ``..`` stays, since
    a symlink may lie before it)."""
    return str(PurePosixPath(os.fspath(path)))


def command_options(state: str | os.PathLike[str] | None = None, sources_heading: str | None = None) -> tuple[str, ...]:
    """The options every printed command repeats; a relative ``state`` is made absolute, since
    the command runs from another folder."""
    options: list[str] = []
    if state is not None:
        options += ["--state", os.path.abspath(os.path.expanduser(os.fspath(state)))]
    if sources_heading is not None:
        options.append(f"--sources-heading={sources_heading}")
    return tuple(options)


def stamp_command(root: str, path: str = "FILE", options: tuple[str, ...] = ()) -> str:
    """``provgraph stamp`` for ``path`` (root-relative; ``FILE`` is left as a placeholder)."""
    file = path if path == "FILE" else shlex.quote(path)
    return _command("stamp", "--root", root, *options) + f" {file}"


def status_command(root: str, options: tuple[str, ...] = ()) -> str:
    """``provgraph status``, which lists every stale file of the root."""
    return _command("status", root, *options)


def hook_command(root: str, options: tuple[str, ...] = ()) -> str:
    """``provgraph hook claude-code``, as Claude Code's settings run it."""
    return _command("hook", "claude-code", root, *options)


def _command(*words: str) -> str:
    return " ".join(["provgraph", *map(shlex.quote, words)])
