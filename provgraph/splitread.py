"""A first scan of a large folder, read by two processes: the command's own, and one it
forks while its heap is still small.

A first scan (no state yet) reads, hashes and parses every memory file, each on its own:
work two cores do side by side.  The command's quick answer (``replay``) has walked the
folder by then and imported almost nothing; it forks there (``start``), and the child, at
the lowest priority, imports only what reading needs and reads the sorted listing from its
end, exactly as the scan reads a file (``reading.read_one``), sending what each file gave
through a pipe as plain values, a batch at a time.  The parent meanwhile imports the rest of provgraph and scans
as always, from the listing's start; every few files it takes the batches that have come
(``Shared.reading``), and where it reaches the files the child has read, the two have met:
the child is stopped, and the parent takes the child's reading of each file still to go
whose metadata is the one the child read it under.  Where they meet needs no guess: when
the parent's imports take long, or the second core is busy with something else, the child
has read more, or less (forked later, inside the scan, both processes paid to copy the
pages of a large heap, and the command was not faster).

Whatever goes wrong with the child (no fork, a crash, a signal, a short or garbled
answer, another listing) leaves the parent to read those files itself: the answer is
always the one a single process gives.  The parent always reaps the child, killing it
when the scan never meets it (``release``).  Only the command forks: a library in someone
else's process may hold threads, and locks the child would find held forever.
``PROVGRAPH_PROCESSES=1`` turns it off; ``PROVGRAPH_PROCESSES=2`` forks for any number of
files on any number of cores (what the tests use on small folders).

Imported by the quick answer, so it imports nothing of its own at first.
"""

from __future__ import annotations

import marshal
import os

from .walk import SETTING, child_sends, fork_child, reap, second_process

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Mapping, Sequence
    from typing import Any, NoReturn

    from .declarations import Declaration
    from .model import FileMeta, ProblemKind
    from .reading import Reading
    from .walk import Walked

__all__ = ["FILES_FOR_TWO", "SETTING", "Shared", "release", "shared_reading", "start"]

FILES_FOR_TWO = 2000
"""Memory files from which a first scan forks.  Measured on 2 cores, side by side, with the
other core busy (load average 2): a first scan of 1,000 files took 158 ms with the second
process and 168 ms without, of 2,000 files 128 and 140 ms; on a quiet machine, with the
split fixed in advance, 131 and 111 ms at 1,000 files, 186 and 194 ms at 2,000.  Below
2,000 files the gain is within the noise, and the child's work is spent for little."""
BATCH = 128
"""Files the child reads between two messages: the parent takes the child's readings a
batch at a time, and the files of the batch in hand when they meet are read twice."""
LOOK_EVERY = 32
"""Files the parent reads between two looks at the pipe (a look that finds nothing costs
a system call that fails)."""
PIPE_BYTES = 1 << 20
"""The pipe's capacity asked for (Linux), about 25,000 files' readings: the child does not
wait for the parent, which takes nothing while it imports, nor while it builds its tables
before its reading loop."""

_SHARED: list[Shared] = []
"""The child started for this command's first scan, until the scan meets or lets go of it."""
_DIGEST_SIZE = 32
_READ_BYTES = 1 << 16
_HEADER = 4
"""Bytes of a message's length, before the message."""


class Shared:
    """A forked child reading the sorted listing of one walk (the one the quick answer
    handed over, begun at ``started_ns``) from its end, batch by batch; ``reached`` is the
    first file of the listing whose reading has come."""

    __slots__ = ("buffer", "heading", "metas", "numbers", "paths", "pid", "pipe", "reached", "readings", "started_ns")

    def __init__(
        self, pid: int, pipe: int, started_ns: int, walked: tuple[list[str], list[int]], heading: str | None
    ) -> None:
        self.pid: int | None = pid
        self.pipe: int | None = pipe
        self.started_ns = started_ns
        self.paths, self.numbers = walked
        self.heading = heading
        self.reached = len(self.paths)
        self.readings: list[Reading | None] = []
        self.metas: list[tuple[int, ...]] = []
        """Each file's metadata in the walk, made when the first batch comes."""
        self.buffer = bytearray()

    def reading(self, rank: int, ordered: Sequence[str], listing: Mapping[str, FileMeta]) -> Reading | None:
        """The child's reading of ``ordered[rank]``, once the parent has come to the files
        the child read (the child is then stopped); None while the parent reads on, or for
        a file whose metadata in ``listing`` is not the one the child read it under."""
        if rank < self.reached and self.pipe is not None and rank % LOOK_EVERY == 0:
            self._take(ordered, listing)
        if rank < self.reached:
            return None
        if self.pid is not None:
            self.release()  # met: the files left were read by the child
        return self.readings[rank]

    def release(self) -> None:
        """The child gone and reaped: killed when it still runs; the readings that came stay."""
        if self in _SHARED:
            _SHARED.remove(self)
        if self.pipe is not None:
            os.close(self.pipe)
            self.pipe = None
        if self.pid is not None:
            pid, self.pid = self.pid, None
            reap(pid, kill=True)

    def _take(self, ordered: Sequence[str], listing: Mapping[str, FileMeta]) -> None:
        """Every whole message that has come; the child's readings are all let go of when
        one is not what the child sends, and the parent then reads every file."""
        if self.pipe is None:
            return
        try:
            while chunk := os.read(self.pipe, _READ_BYTES):
                self.buffer += chunk
            self.release()  # the child has left, and all it wrote is here
        except BlockingIOError:
            pass
        buffer, at = self.buffer, 0
        try:
            while len(buffer) - at >= _HEADER:
                end = at + _HEADER + int.from_bytes(buffer[at : at + _HEADER], "little")
                if len(buffer) < end:
                    break
                self._apply(marshal.loads(memoryview(buffer)[at + _HEADER : end]), ordered, listing)
                at = end
        except (EOFError, ValueError, TypeError, IndexError, KeyError):
            self.reached = len(ordered)
            self.release()
        del buffer[:at]

    def _apply(self, message: Any, ordered: Sequence[str], listing: Mapping[str, FileMeta]) -> None:
        """One batch of readings, the next one before ``reached``; raises on a message of
        another shape, or about other files.  A file's reading is kept only when the file
        has the metadata the child read it under: its place in the same walk."""
        start, order, digests, unusual = message
        if type(order) is not list or type(digests) is not list or type(unusual) is not dict:
            raise TypeError("not a batch of readings")
        if start + len(order) != self.reached or len(digests) != len(order) or start < 0:
            raise ValueError("not the next batch")
        if not set(map(len, filter(None, digests))) <= {_DIGEST_SIZE}:
            raise ValueError("not sha256 digests")
        read = list(map(self.paths.__getitem__, order))
        if read != ordered[start : self.reached]:
            raise ValueError("a batch about other files")
        readings = _readings(digests, unusual)
        if not self.metas:
            from .nochange import metas_of  # loaded with the quick answer already

            self.metas = list(metas_of(self.numbers))
        under, now = list(map(self.metas.__getitem__, order)), list(map(listing.__getitem__, read))
        if under != now:  # never for the listing of the walk the child read under
            for rank, meta in enumerate(under):
                if meta != now[rank]:
                    readings[rank] = None
        if not self.readings:
            self.readings = [None] * len(ordered)
        self.readings[start : self.reached] = readings
        self.reached = start


def start(root: str, started_ns: int, walked: Walked, heading: str | None) -> None:
    """Fork a child to read a first scan's files from the end, when it pays
    (``_worth_it``); the walk ``walked`` of ``root``, begun at ``started_ns``, is the one
    handed over to the full run (``walk.hand_over``), and the child reads under it."""
    release()
    paths, numbers, _ = walked
    if not _worth_it(len(paths)):
        return
    forked = fork_child(lambda pipe: _child(pipe, (root, started_ns), heading, paths), _widen)
    if forked is None:
        return
    pid, reading = forked
    os.set_blocking(reading, False)
    _SHARED.append(Shared(pid, reading, started_ns, (paths, numbers), heading))


def shared_reading(files: object, listing: Mapping[str, FileMeta], heading: str | None) -> Shared | None:
    """The child reading this scan's files, when there is one for this very walk (the one
    ``files`` took over) read with the same ``heading``; a child started for another scan
    is let go of.  Never one in a library's process: only the command forks."""
    if not _SHARED:
        return None
    shared = _SHARED[0]
    walked_ns = getattr(files, "walked_ns", None)
    if walked_ns != shared.started_ns or shared.heading != heading or len(listing) != len(shared.paths):
        shared.release()
        return None
    return shared


def release() -> None:
    """Let go of a child that no scan met (an error came first): killed, reaped."""
    for shared in list(_SHARED):
        shared.release()


def _worth_it(count: int) -> bool:
    """Whether a first scan of ``count`` files forks (``walk.second_process``): enough files
    for it to pay, unless ``PROVGRAPH_PROCESSES=2``."""
    return count >= 1 and second_process(large=count >= FILES_FOR_TWO)


def _widen(pipe: int) -> None:
    """Ask for a pipe of ``PIPE_BYTES`` where the system lets one (Linux); else it stays."""
    try:
        import fcntl

        fcntl.fcntl(pipe, fcntl.F_SETPIPE_SZ, PIPE_BYTES)
    except (ImportError, AttributeError, OSError):
        pass


def _child(pipe: int, walk: tuple[str, int], heading: str | None, paths: list[str]) -> NoReturn:
    """Read and send, a batch at a time, at the lowest priority (``walk.child_sends``)."""

    def messages() -> Iterator[bytes]:
        _yield_to_others()
        for message in _batches(walk, heading, paths):
            yield len(message).to_bytes(_HEADER, "little") + message

    child_sends(pipe, messages)


def _yield_to_others() -> None:
    """Run only on a core nothing else wants: the lowest priority.  On a machine whose other
    cores are busy, the child would otherwise take half of the command's own core (measured
    on 2 cores with the other one busy: the command's imports took twice as long, and a first
    scan of 1,000 files 50 ms longer); at the lowest priority it reads little then, and the
    command reads the rest."""
    import contextlib

    with contextlib.suppress(OSError):
        os.nice(19)


def _batches(walk: tuple[str, int], heading: str | None, paths: list[str]) -> Iterator[bytes]:
    """The sorted listing read from its end, a batch at a time: each batch marshalled as its
    first file's place in the sorted listing, each file's place in the walk and digest,
    and, by their rank in the batch, the readings that say more than a digest (a
    declaration, why the file could not be read), each problem's kind as its value."""
    from .declarations import NOTHING
    from .files import LocalFiles
    from .reading import read_one

    root, started_ns = walk
    files = LocalFiles(root)
    files.walk()  # the handed-over walk, as the parent's scan takes it: each file read under its metadata
    if files.walked_ns != started_ns:
        raise LookupError("not the walk handed over")
    order = sorted(range(len(paths)), key=paths.__getitem__)
    with files.reading():
        for end in range(len(order), 0, -BATCH):
            first = max(0, end - BATCH)
            digests: list[bytes | None] = []
            unusual: dict[int, tuple[object, ...]] = {}
            for rank, index in enumerate(order[first:end]):
                digest, declaration, unreadable, _ = read_one(files, paths[index], heading, False)
                digests.append(digest)
                if declaration is not NOTHING or unreadable is not None:
                    unusual[rank] = (None if declaration is NOTHING else _fields(declaration), unreadable)
            yield marshal.dumps((first, order[first:end], digests, unusual))


def _fields(declaration: Declaration) -> tuple[object, ...]:
    """A declaration as values ``marshal`` writes: each problem's kind as its value."""
    problems = tuple((kind.value, detail) for kind, detail in declaration.problems)
    return declaration.entries, declaration.derived_at, problems


def _declaration(fields: Any, make: Callable[..., Declaration], kind: Callable[[str], ProblemKind]) -> Declaration:
    """A declaration sent as its fields (``_fields``), made with ``make``; raises on fields
    of another shape."""
    entries, derived_at, problems = fields
    if type(entries) is not tuple or not (derived_at is None or type(derived_at) is str):
        raise TypeError("not a declaration's fields")
    found = tuple([(kind(value), str(detail)) for value, detail in problems]) if problems else ()
    return make(entries, derived_at, found)


def _readings(digests: list[bytes | None], unusual: dict[int, Any]) -> list[Reading | None]:
    """A batch's readings, by rank: most files gave only a digest."""
    from .declarations import NOTHING, Declaration
    from .model import ProblemKind

    readings: list[Reading | None] = [(digest, NOTHING, None, None) for digest in digests]
    for rank, (fields, unreadable) in unusual.items():
        if not 0 <= rank < len(digests) or not (unreadable is None or type(unreadable) is str):
            raise ValueError("not a reading of the batch's files")
        declaration = NOTHING if fields is None else _declaration(fields, Declaration, ProblemKind)
        readings[rank] = (digests[rank], declaration, unreadable, None)
    return readings
