"""Where a file named by a person or a tool lands under the memory root, and the
``provgraph`` commands that outputs print for a person or an agent to paste into a shell.

The command line, the Claude Code hook and the AgentScope tools must agree on which memory
file a path means (relative, absolute, or through a symlinked folder such as macOS's
``/tmp``): a symlinked folder is resolved, the file's own name never is, as the scan lists it.

A printed command works pasted from any folder: it names the root in full, shell-quotes
every word, and repeats ``--state`` and ``--sources-heading``, which decide what a scan
reads (the lock records the heading too: repeating it is harmless).
"""

from __future__ import annotations

import contextlib
import os
import posixpath
import shlex
from collections.abc import Sequence
from pathlib import Path, PurePosixPath

from .queries import Advice, unescaped

__all__ = [
    "candidates",
    "command_options",
    "hook_command",
    "list_hint",
    "normalized",
    "parts_under",
    "relative_to",
    "shell_advice",
    "stamp_command",
    "status_command",
]

Program = tuple[str, ...]
"""The words that start a printed command: ``provgraph``, or what runs this install from anywhere."""
PROVGRAPH: Program = ("provgraph",)


def parts_under(root: Path, file: str | os.PathLike[str]) -> tuple[str, ...] | None:
    """The parts of ``file``'s path below ``root`` (as given, else with symlinked folders
    resolved), or None when it is not below it."""
    absolute = Path(os.path.abspath(file))
    resolved = Path(os.path.realpath(absolute.parent)) / absolute.name
    for base, target in ((root, absolute), (Path(os.path.realpath(root)), resolved)):
        with contextlib.suppress(ValueError):
            parts = target.relative_to(base).parts
            if parts:
                return parts
    return None


def relative_to(memory_path: str, path: str) -> str | None:
    """The memory-folder-relative POSIX path the agent meant in a folder seen as text only (a
    sandbox's), given as the block lists it or in full; None when it points elsewhere."""
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


def candidates(memory_path: str, shown: str) -> list[str]:
    """The memory-folder-relative paths an agent may mean by ``shown``, likeliest first: names
    are shown escaped and passed back as shown, so the unescaped name, then the text as given."""
    relatives = (relative_to(memory_path, name) for name in (unescaped(shown), shown))
    return list(dict.fromkeys(relative for relative in relatives if relative is not None))


def normalized(path: str | os.PathLike[str]) -> str:
    """``path`` spelt as ``pathlib`` spells it (``a//b/./c/`` is ``a/b/c``; ``..`` stays, since
    a symlink may lie before it)."""
    return str(PurePosixPath(os.fspath(path)))


def command_options(
    state: str | os.PathLike[str] | None = None,
    sources_heading: str | None = None,
    volatile: Sequence[str] = (),
    index_files: Sequence[str] = (),
    unindexed: Sequence[str] = (),
) -> tuple[str, ...]:
    """The options every printed command repeats; a relative ``state`` is made absolute, since
    the command runs from another folder."""
    options: list[str] = []
    if state is not None:
        options += ["--state", os.path.abspath(os.path.expanduser(os.fspath(state)))]
    if sources_heading is not None:
        options.append(f"--sources-heading={sources_heading}")
    if volatile:
        options.append(f"--volatile-field={','.join(volatile)}")
    options += [f"--index={name}" for name in index_files]
    options += [f"--unindexed={pattern}" for pattern in unindexed]
    return tuple(options)


def stamp_command(root: str, path: str = "FILE", options: tuple[str, ...] = (), program: Program = PROVGRAPH) -> str:
    """``provgraph stamp`` for ``path`` (root-relative, after ``--`` if it starts with ``-``; or ``FILE``)."""
    file = path if path == "FILE" else shlex.quote(path)
    return _command(program, "stamp", "--root", root, *options) + (" -- " if path.startswith("-") else " ") + file


def status_command(root: str, options: tuple[str, ...] = (), program: Program = PROVGRAPH) -> str:
    """``provgraph status``, which lists every stale file of the root."""
    return _command(program, "status", root, *options)


def index_command(root: str, options: tuple[str, ...] = (), program: Program = PROVGRAPH) -> str:
    """``provgraph index``, which prints the root's memory index as it should be."""
    return _command(program, "index", root, *options)


def list_hint(root: str, options: tuple[str, ...] = (), program: Program = PROVGRAPH) -> str:
    """The block's last line's advice when it is cut: the command that lists every stale file."""
    return f"run `{status_command(root, options, program)}` to list them all"


def hook_command(root: str, options: tuple[str, ...] = (), program: tuple[str, ...] = ("provgraph",)) -> str:
    """``provgraph hook claude-code``, as Claude Code's settings run it with ``program``."""
    return " ".join(map(shlex.quote, (*program, "hook", "claude-code", root, *options)))


def shell_advice(root: str, options: tuple[str, ...] = (), program: Program = PROVGRAPH) -> Advice:
    """The notes' and the lineage answer's instructions as commands on ``root``, with ``options``."""
    status = f"run `{status_command(root, options, program)}`"
    return Advice(
        record_file=lambda path: f"run `{stamp_command(root, path, options, program)}`",
        record_any=f"record it with `{stamp_command(root, options=options, program=program)}`",
        list_all=lambda path: status,
        list_stale=status,
        read_when="before writing it, since your previous write",
        print_index=f"run `{index_command(root, options, program)}`",
    )


def _command(program: Program, *words: str) -> str:
    return " ".join(map(shlex.quote, (*program, *words)))
