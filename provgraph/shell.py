"""The ``provgraph`` commands that outputs print for a person or an agent to paste into a shell.

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

import os
import shlex

__all__ = ["command_options", "hook_command", "stamp_command", "status_command"]


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
