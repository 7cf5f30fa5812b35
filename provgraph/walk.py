"""Looking at a memory folder without opening a file: the walk, and where a path leads.

``files.LocalFiles`` lists and stats through these functions, and so does the
command line's quick answer (``replay``), which must see exactly what a
refresh sees; that is why they import nothing of provgraph but the no-change
rule's vocabulary.  Hidden entries are skipped, symlinked folders are not
followed, a symlink that leaves the root is reported and never opened, a
name that is not UTF-8 is reported and never listed.  The command's quick answer walks a
large folder in two processes (``walk_in_two``), to the same answer.
"""

from __future__ import annotations

import marshal
import os
import stat as stat_module
import sys

from .nochange import ProblemRow, Sight, Watched

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator
    from typing import NoReturn

__all__ = [
    "FILES_BEFORE_SPLIT",
    "FOLDER_FLAGS",
    "ROOT_FLAGS",
    "SETTING",
    "child_sends",
    "fork_child",
    "hand_over",
    "handed_over",
    "is_utf8",
    "place",
    "printable",
    "reap",
    "second_process",
    "sight",
    "split_after",
    "usable_cores",
    "walk_in_order",
    "walk_in_two",
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
    walker.walk([("", root)])
    return walker.paths, walker.numbers, walker.problems


def walk_in_two(root: str, real_root: str) -> Walked:
    """``walk_in_order``'s very answer, the folders it would walk last walked by a child
    forked for them when a second process pays (``split_after``).  Only the command's quick
    answer calls it: a library in someone else's process may hold threads, whose locks a
    child would find held forever.

    The walk goes depth first with a last-in first-out stack, so the folders at the bottom
    of the stack, and everything below them, come out last, in one piece: the child takes
    some of them (``_share``) and walks them the same way while this process walks the
    rest, and the answer is this process's followed by the child's.  Whatever goes wrong
    with the child (no fork, a crash, a signal, a short or garbled answer), this process
    walks those folders itself: the answer is always the one a single walk gives."""
    files = split_after()
    if files is None:
        return walk_in_order(root, real_root)
    walker = _Walker(real_root)
    walker.pending.append(("", root))
    while walker.pending and (len(walker.paths) < files or len(walker.pending) < 2):
        walker.next_folder()
    child = _fork(walker) if walker.pending else None
    try:
        walker.walk(walker.pending)
        if child is not None:
            _join(walker, child)
    finally:
        if child is not None:
            child.reap(kill=True)  # an exception came first; nothing to do once reaped
    return walker.paths, walker.numbers, walker.problems


SETTING = "PROVGRAPH_PROCESSES"
"""``1``: one process, always; ``2``: a second one whenever there is work to share (what the
tests use on small folders); else a second one where it pays, on a second core."""
FILES_BEFORE_SPLIT = 1000
"""Files a quick answer's walk has found before it forks, if it still has two folders to
go.  The walk's own count is the cheapest sign of a large folder: it costs nothing, and a
first scan has no record to tell how large the folder was.  A smaller folder never forks;
a larger one forks with the rest of its walk still to share.  Measured on 2 cores, walks
alone in fresh processes, side by side (medians of 15, ms; one process / forked after the
root's listing / after 1,000 files): 1,000 files 5.0 / 5.9 / 5.0; 2,000 files 10.1 / 9.0 /
10.4; 5,000 files 22.6 / 18.6 / 19.1; 10,000 files 48.3 / 33.4 / 38.9."""


def split_after() -> int | None:
    """The files a quick answer's walk finds before it forks (``walk_in_two``), or None
    when it never forks (``second_process``)."""
    if not second_process(large=True):
        return None
    return 0 if os.environ.get(SETTING) == "2" else FILES_BEFORE_SPLIT


def second_process(*, large: bool) -> bool:
    """Whether the command forks a second process for work ``large`` enough to pay for it:
    the setting allows it, the system forks, the process has one thread (a child gets only
    the forking one, with the locks the others held still held: without ``threading``
    imported there is no other), and, unless ``PROVGRAPH_PROCESSES=2``, the work is large
    and a second core is there to run it."""
    setting = os.environ.get(SETTING)
    if setting == "1" or not hasattr(os, "fork"):
        return False
    threading = sys.modules.get("threading")
    if threading is not None and threading.active_count() != 1:
        return False
    return setting == "2" or (large and usable_cores() >= 2)


def usable_cores() -> int:
    """The cores this process may run on."""
    affinity = getattr(os, "sched_getaffinity", None)
    return len(affinity(0)) if affinity is not None else os.cpu_count() or 1


class _Child:
    """A child walking ``folders`` (taken from the bottom of the stack) and sending what it
    found through ``pipe``, until it is reaped."""

    __slots__ = ("folders", "pid", "pipe")

    def __init__(self, pid: int, pipe: int, folders: list[tuple[str, str]]) -> None:
        self.pid: int | None = pid
        self.pipe: int | None = pipe
        self.folders = folders

    def answer(self) -> Walked | None:
        """What the child found, read to its end, the child reaped; None unless it left
        as it does after sending all of it, and sent a walk's answer."""
        chunks = []
        try:
            while chunk := os.read(self.pipe, _READ_BYTES):  # type: ignore[arg-type]
                chunks.append(chunk)
        except OSError:
            self.reap(kill=True)
            return None
        if self.reap(kill=False) != 0:
            return None
        try:
            walked = marshal.loads(b"".join(chunks))
        except (EOFError, ValueError, TypeError):
            return None
        return walked if _whole(walked) else None

    def reap(self, *, kill: bool) -> int | None:
        """Wait for the child to leave (killed first with ``kill``): its wait status, or
        None when it was reaped before.  The pipe is closed first, so that a child still
        writing stops."""
        if self.pipe is not None:
            pipe, self.pipe = self.pipe, None
            os.close(pipe)
        if self.pid is None:
            return None
        pid, self.pid = self.pid, None
        return reap(pid, kill=kill)


_SIGKILL = 9
"""The one signal a child is ever sent (``signal`` would import ``enum``)."""
_READ_BYTES = 1 << 20
_MARSHAL_VERSION = 2
"""Without the references of later versions: the child's answer shares no object, and
version 2 writes 5,000 files' answer in half the time (about 0.7 ms against 1.7)."""


def _fork(walker: _Walker) -> _Child | None:
    """A child forked to walk the folders ``_share`` takes off the bottom of the stack; None
    (the stack untouched) when the system gives no pipe or no process."""
    theirs = walker.pending[: _share(walker.pending)]
    forked = fork_child(lambda pipe: _child(pipe, walker.real_root, theirs))
    if forked is None:
        return None
    del walker.pending[: len(theirs)]
    return _Child(*forked, theirs)


def fork_child(
    child: Callable[[int], NoReturn], prepare: Callable[[int], object] | None = None
) -> tuple[int, int] | None:
    """A child forked to run ``child`` on the writing end of a new pipe (``prepare`` sees that
    end first): the child's pid and the reading end, which only this process keeps; None
    when the system gives no pipe or no process (nothing is left open then)."""
    try:
        reading, writing = os.pipe()
    except OSError:
        return None
    if prepare is not None:
        prepare(writing)
    try:
        pid = os.fork()
    except OSError:
        os.close(reading)
        os.close(writing)
        return None
    if pid == 0:
        os.close(reading)
        child(writing)
    os.close(writing)
    return pid, reading


def reap(pid: int, *, kill: bool) -> int:
    """Wait for a forked child to leave, killed first with ``kill`` (a child not yet reaped
    can be signalled even once it has left): its wait status."""
    if kill:
        import contextlib  # a full run has it already; the quick answer kills only on an error

        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, _SIGKILL)
    return os.waitpid(pid, 0)[1]


def _share(pending: list[tuple[str, str]]) -> int:
    """How many folders from the bottom of a stack of two or more the child walks: half of
    the shallowest ones there (the stack's depth only grows towards its top), rounded up
    when deeper ones lie above them for this process to walk too.  The shallowest folders
    hold the largest subtrees as a rule; a lopsided folder is split less evenly, never
    wrongly."""
    depth = pending[0][0].count("/")
    level = next((at for at, (prefix, _) in enumerate(pending) if prefix.count("/") != depth), len(pending))
    return (level + 1) // 2 if level < len(pending) else level // 2


def _child(pipe: int, real_root: str, folders: list[tuple[str, str]]) -> NoReturn:
    """Walk ``folders`` as the parent would have, send what was found, leave."""

    def answer() -> Iterator[bytes]:
        walker = _Walker(real_root)
        walker.walk(folders)
        yield marshal.dumps((walker.paths, walker.numbers, walker.problems), _MARSHAL_VERSION)

    child_sends(pipe, answer)


def child_sends(pipe: int, messages: Callable[[], Iterable[bytes]]) -> NoReturn:
    """In a forked child: write each of ``messages()`` to ``pipe``, then leave, with a
    status of 0 only when all were written.  ``os._exit`` flushes none of the parent's
    buffered output and runs none of its exit handlers.  The child holds none of the
    command's streams, so that a reader waiting for the end of the command's output waits
    for the command alone."""
    status = 1
    try:
        quiet = os.open(os.devnull, os.O_RDWR)
        for stream in (0, 1, 2):
            os.dup2(quiet, stream)
        for message in messages():
            view = memoryview(message)
            while view:
                view = view[os.write(pipe, view) :]
        status = 0
    except BaseException:  # noqa: BLE001, S110 - any failure means: the parent does this work itself
        pass
    finally:
        os._exit(status)


def _join(walker: _Walker, child: _Child) -> None:
    """The child's answer after this process's, or the child's folders walked here."""
    walked = child.answer()
    if walked is None:
        walker.walk(child.folders)
        return
    paths, numbers, problems = walked
    walker.paths += paths
    walker.numbers += numbers
    walker.problems += problems


def _whole(walked: object) -> bool:
    """Whether ``walked`` has a walk's shape (its parts' items are what ``marshal`` made of
    the child's)."""
    return (
        type(walked) is tuple
        and len(walked) == 3
        and all(type(part) is list for part in walked)
        and len(walked[1]) == 4 * len(walked[0])
    )


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

    def walk(self, folders: list[tuple[str, str]]) -> None:
        """Walk ``folders`` (the stack, as ``(prefix, folder)``) and everything below them."""
        self.pending = folders
        while self.pending:
            self.next_folder()

    def next_folder(self) -> None:
        """List the folder on top of ``pending``: the last one found is walked first, so
        the folders found first (at the bottom) come last, each subtree in one piece."""
        prefix, folder = self.pending.pop()
        try:
            self.folder(folder, prefix)
        except OSError as error:
            self.problems.append((prefix.rstrip("/") or ".", UNREADABLE, _reason(error)))

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
