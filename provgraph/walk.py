"""Looking at a memory folder without opening a file: the walk, and where a path leads.

``files.LocalFiles`` lists and stats through these functions, and so does the
command line's quick answer (``replay``), which must see exactly what a
refresh sees; that is why they import nothing of provgraph but the no-change
rule's vocabulary.  Hidden entries are skipped, symlinked folders are not
followed, a symlink that leaves the root is reported and never opened, a
name that is not UTF-8 is reported and never listed.
"""

from __future__ import annotations

import os
import stat as stat_module

from .nochange import ProblemRow, Sight, Watched

__all__ = [
    "FOLDER_FLAGS",
    "ROOT_FLAGS",
    "hand_over",
    "handed_over",
    "is_utf8",
    "place",
    "printable",
    "sight",
    "walk_in_order",
]

ROOT_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
"""The root is opened through a link, as it was named."""
FOLDER_FLAGS = ROOT_FLAGS | os.O_NOFOLLOW
Walked = tuple[list[str], list[int], list[ProblemRow]]
"""``walk_in_order``'s answer: each file's path; what stat said of it, four numbers a file
in the same order (size, mtime, ctime, inode: ``nochange.metas_of`` groups them); the problems."""

UNREADABLE = "unreadable"
OUTSIDE_ROOT = "outside-root"
"""The problem kinds the walk reports (``ProblemKind`` values)."""


def walk_in_order(root: str, real_root: str) -> Walked:
    """Every regular ``*.md`` file below ``root`` (whose resolved path is ``real_root``):
    each file's root-relative POSIX path in the order the folders listed them, the numbers
    of its stat in the same order, and the problems met.  The command's quick answer
    compares the walk's bytes in this order with the bytes of a walk it proved unchanged
    (``nochange.holds_as_proven``): no mapping, no sort.  The numbers are taken from each
    stat as it is made, and the stat let go: a walk of a large folder that kept them all
    would fill memory a stat walk never touches, and go slower for it."""
    walker = _Walker(real_root)
    walker.pending.append(("", root))
    while walker.pending:
        prefix, folder = walker.pending.pop()
        try:
            walker.folder(folder, prefix)
        except OSError as error:
            walker.problems.append((prefix.rstrip("/") or ".", UNREADABLE, _reason(error)))
    return walker.paths, walker.numbers, walker.problems


_HANDED: dict[tuple[str, str], tuple[int, Walked]] = {}
"""The walk the command's quick answer made and could not answer from, kept for the
full run that follows in the same process (it would walk the same folder again)."""


def hand_over(root: str, real_root: str, started_ns: int, walked: Walked) -> None:
    """Keep a walk of ``root`` that began at ``started_ns`` (the real clock) for ``handed_over``."""
    _HANDED.clear()
    _HANDED[(root, real_root)] = (started_ns, walked)


def handed_over(root: str, real_root: str) -> tuple[int, Walked] | None:
    """The kept walk of that very folder, once: when it began, what it found.  A scan
    that uses it records that beginning as its own, so the racy window stays on the safe
    side, and a file written since is read again by the next scan (its metadata moved)."""
    handed = _HANDED.pop((root, real_root), None)
    _HANDED.clear()
    return handed


class _Walker:
    """What one walk has found so far, and the folders it has still to list."""

    __slots__ = ("inside", "numbers", "paths", "pending", "problems", "real_root")

    def __init__(self, real_root: str) -> None:
        self.real_root, self.inside = real_root, real_root.rstrip("/") + "/"
        self.paths: list[str] = []
        self.numbers: list[int] = []
        """Four numbers for each file of ``paths``, in the same order (``Walked``)."""
        self.problems: list[ProblemRow] = []
        self.pending: list[tuple[str, str]] = []

    def folder(self, folder: str, prefix: str) -> None:
        """One folder's entries.  The common one, a regular ``.md`` file with an ASCII name,
        is taken in the loop itself (a large folder has thousands); ``visit`` sorts out the rest.

        The folder is listed through a descriptor, so that each file is stat'ed by its name
        in it rather than by a path the system resolves again from the root; a subfolder
        (never the root) that became a symlink since it was listed is not followed."""
        add_path, add_numbers = self.paths.append, self.numbers.extend
        descriptor = os.open(folder, FOLDER_FLAGS if prefix else ROOT_FLAGS)
        try:
            with os.scandir(descriptor) as entries:
                for entry in entries:
                    name = entry.name
                    if name[0] == ".":  # a name is never empty; cheaper than startswith
                        continue
                    if name.endswith(".md") and name.isascii():
                        try:
                            if entry.is_file(follow_symlinks=False):
                                info = entry.stat(follow_symlinks=False)
                                add_numbers((info.st_size, info.st_mtime_ns, info.st_ctime_ns, info.st_ino))
                                add_path(prefix + name)
                                continue
                        except OSError:
                            pass  # visited again below, where the problem is reported
                    self.visit(entry, prefix + name, os.path.join(folder, name))
        finally:
            os.close(descriptor)

    def found(self, path: str, info: os.stat_result) -> None:
        self.numbers.extend((info.st_size, info.st_mtime_ns, info.st_ctime_ns, info.st_ino))
        self.paths.append(path)

    def visit(self, entry: os.DirEntry[str], path: str, full_path: str) -> None:
        """Any entry but a plain memory file: ``path`` is root-relative, ``full_path`` as
        the root was named."""
        name = entry.name
        try:
            if not (name.isascii() or is_utf8(name)):
                if name.endswith(".md") or entry.is_dir(follow_symlinks=False):
                    self.problems.append((printable(path), UNREADABLE, "its name is not valid UTF-8"))
            elif entry.is_symlink():
                self.visit_link(entry, path, full_path)
            elif entry.is_dir(follow_symlinks=False):
                self.pending.append((path + "/", full_path))
            elif name.endswith(".md") and entry.is_file(follow_symlinks=False):
                self.found(path, entry.stat(follow_symlinks=False))
        except OSError as error:
            self.problems.append((path, UNREADABLE, _reason(error)))

    def visit_link(self, entry: os.DirEntry[str], path: str, full_path: str) -> None:
        """Symlinked files inside the root count; folders are not followed (no loops)."""
        resolved = os.path.realpath(full_path)
        if not (resolved == self.real_root or resolved.startswith(self.inside)):
            if entry.name.endswith(".md"):
                self.problems.append((path, OUTSIDE_ROOT, "symlink to a path outside the root"))
            return
        if entry.name.endswith(".md"):
            try:
                info = os.stat(full_path)
            except OSError:
                return  # dangling link: skipped, never opened
            if stat_module.S_ISREG(info.st_mode):
                self.found(path, info)


def place(root: str, real_root: str, path: str) -> tuple[Sight | None, str]:
    """Where the root-relative ``path`` leads, resolved through every symlink, and the
    refusal it meets: ``Sight.OUTSIDE_ROOT`` out of the root, ``Sight.NOT_REGULAR`` for
    provgraph's own lock or state folder (never a source, whatever link leads there)."""
    real = os.path.realpath(os.path.join(root, *path.split("/")))
    if not (real == real_root or real.startswith(real_root.rstrip("/") + "/")):
        return Sight.OUTSIDE_ROOT, real
    folder, lock = os.path.join(real_root, ".provgraph"), os.path.join(real_root, "provgraph.lock")
    if real in (lock, folder) or real.startswith(folder + "/"):
        return Sight.NOT_REGULAR, real
    return None, real


def sight(root: str, real_root: str, path: str) -> Watched | None:
    """What a refresh's ``LocalFiles.stat`` says of ``path``, as the no-change rule records it."""
    refusal, real = place(root, real_root, path)
    if refusal is not None:
        return Watched(path, refusal)
    try:
        info = os.stat(real)
    except (FileNotFoundError, NotADirectoryError):
        return Watched(path, Sight.MISSING)
    except OSError:
        return None
    if not stat_module.S_ISREG(info.st_mode):
        return Watched(path, Sight.NOT_REGULAR)
    return Watched(path, Sight.FILE, (info.st_size, info.st_mtime_ns, info.st_ctime_ns, info.st_ino))


def _reason(error: OSError) -> str:
    return error.strerror or type(error).__name__


def is_utf8(name: str) -> bool:
    """False for a name holding bytes that are not UTF-8 (decoded as lone surrogates):
    such a name cannot be written to JSON, so the file is reported, not listed."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def printable(path: str) -> str:
    """``path`` with each byte that is not UTF-8 shown as ``\\xNN``."""
    return os.fsencode(path).decode("utf-8", "backslashreplace")
