"""The AgentScope middleware on a local folder learns of changes from the operating system.

An unchanged folder is answered from the watch (``provgraph.watch``) without
walking it; the answer must always be the one a walk gives.  The property
test replays random edits on real files and compares, after each, the
middleware's check with a fresh ``Memory(...).refresh()`` at the same time.
The other tests cover each doubt that makes the middleware walk instead.
Every middleware made here is closed: no inotify descriptor outlives a test.
"""

from __future__ import annotations

import asyncio
import gc
import hashlib
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from depth import examples
from extras import needs
from hypothesis import given, settings
from hypothesis import strategies as st
from scratch import scratch_folder

from provgraph import Memory
from provgraph import watch as watch_module
from provgraph.model import Report
from provgraph.watch import Doubt

pytestmark = [
    needs("agentscope", "inotify_simple"),
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="inotify is Linux's"),
]


@pytest.fixture(autouse=True, scope="module")
def agentscope_loaded() -> None:
    """Imported when this file's first test runs, not when it is collected (``extras.py``)."""
    global ProvenanceMiddleware
    from provgraph.integrations.agentscope import ProvenanceMiddleware


START = datetime(2026, 11, 10, 9, 0, tzinfo=UTC)
PROMPT = "You are a helpful assistant."

NAMES = ("a.md", "b.md", "sub/c.md", "data.txt", "e.md", "deep/er/f.md", "fresh-0/inner/g.md", "moved-1/nested/i.md")
"""The files edited: some of them in the folders that the folder edits make."""
CONTENTS = (
    "plain one\n",
    "plain two, longer\n",
    "---\nderived_from: a.md, data.txt\n---\nderived\n",
    "---\nderived_from: [[e]], /b.md\n---\nwiki\n",
    "---\nderived_from: ../outside.md, /a.md\n---\nrooted\n",
    "---\nderived_from: /sub/c.md\n---\nchained\n",
)
INITIAL = {
    "a.md": CONTENTS[0],
    "b.md": CONTENTS[2],
    "sub/c.md": CONTENTS[3],
    "data.txt": CONTENTS[1],
    "e.md": CONTENTS[0],
}


# -- the folder and the two ways of checking it --------------------------------------


class Folder:
    """A memory folder checked two ways at each step: the middleware, and a walk with its own state."""

    def __init__(self, base: Path, *, state_outside: bool) -> None:
        self.base = base
        self.root = base / "work" / "Memory"
        self.reference_state = base / "reference-state"
        self.watched_state = base / "watched-state" if state_outside else None
        for name, text in INITIAL.items():
            self.write(name, text)
        (base / "work" / "outside.md").write_text("outside\n")
        self.middleware = ProvenanceMiddleware(workdir=str(self.root.parent), state=self.watched_state)
        self.loop = asyncio.new_event_loop()
        self.now = START

    def close(self) -> None:
        self.middleware.close()
        self.loop.close()

    def write(self, name: str, text: str) -> None:
        path = self.root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)

    def check(self) -> Report:
        """The middleware's check, as its hooks make it (on the event loop, clock pinned)."""
        with mock.patch.dict(os.environ, {"PROVGRAPH_NOW": self.now.isoformat()}):
            report = self.loop.run_until_complete(self.middleware._checked())
        assert report is not None
        return report

    def walked(self) -> Report:
        """A fresh walk of the folder at the same time, with state of its own."""
        return Memory(self.root, state=self.reference_state).refresh(now=self.now)

    @property
    def walks(self) -> int:
        watched = self.middleware._watched
        return 0 if watched is None else watched.walks

    @property
    def doubt(self) -> Doubt | None:
        watched = self.middleware._watched
        return None if watched is None else watched.watch.doubt

    def locks(self) -> list[Path]:
        watched_lock = (self.watched_state or self.root) / "provgraph.lock"
        return [watched_lock, self.reference_state / "provgraph.lock"]


@contextmanager
def folder(*, state_outside: bool = False) -> Iterator[Folder]:
    with scratch_folder() as base:
        made = Folder(Path(base), state_outside=state_outside)
        try:
            yield made
        finally:
            made.close()


# -- the edits -------------------------------------------------------------------------


def edit(memory: Folder, step: tuple[Any, ...]) -> None:
    """Apply one edit to the folder (and to both locks, for a pulled lock)."""
    kind, *arguments = step
    EDITS[kind](memory, *arguments)


def _write(memory: Folder, name: str, content: int) -> None:
    memory.write(name, CONTENTS[content])


def _write_keeping_mtime(memory: Folder, name: str, content: int) -> None:
    path = memory.root / name
    if not path.is_file():
        return
    before = path.stat()
    path.write_text(CONTENTS[content])
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))


def _delete(memory: Folder, name: str, _content: int) -> None:
    (memory.root / name).unlink(missing_ok=True)


def _rename(memory: Folder, name: str, content: int) -> None:
    path = memory.root / name
    if path.is_file():
        target = memory.root / NAMES[content % len(NAMES)]
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(path, target)


def _new_folder_filled(memory: Folder, name: str, content: int) -> None:
    """A folder created empty, then filled at once (before any check could watch it)."""
    folder = memory.root / f"fresh-{content % 2}"
    folder.mkdir(exist_ok=True)
    (folder / "inner").mkdir(exist_ok=True)
    (folder / "inner" / "g.md").write_text(CONTENTS[content])
    (folder / "h.md").write_text(f"---\nderived_from: /{name}\n---\nnew folder\n")


def _folder_moved_in(memory: Folder, name: str, content: int) -> None:
    """A whole folder, files and subfolders, moved into the memory folder."""
    staged = memory.base / "staging" / f"moved-{content % 2}"
    if (memory.root / staged.name).exists():
        shutil.rmtree(memory.root / staged.name)
    (staged / "nested").mkdir(parents=True, exist_ok=True)
    (staged / "nested" / "i.md").write_text(f"---\nderived_from: /{name}\n---\nmoved in\n")
    (staged / "j.md").write_text(CONTENTS[content])
    os.rename(staged, memory.root / staged.name)


def _folder_removed(memory: Folder, _name: str, _content: int) -> None:
    for child in sorted(memory.root.iterdir()):
        if child.is_dir() and not child.name.startswith("."):
            shutil.rmtree(child)
            return


def _outside_edited(memory: Folder, _name: str, content: int) -> None:
    (memory.base / "work" / "outside.md").write_text(CONTENTS[content])


def _lock_pulled(memory: Folder, _name: str, content: int) -> None:
    """Another clone's lock arrives (a pull): its stamps name other content.  Both locks get
    the same lines, written as git writes a file (a new file renamed over the old)."""
    other = hashlib.sha256(f"elsewhere {content}".encode()).hexdigest()
    for lock in memory.locks():
        if not lock.is_file():
            continue
        header, *lines = lock.read_text().splitlines(keepends=True)
        pulled = []
        for index, line in enumerate(lines):
            record = json.loads(line)
            if index % 2 == content % 2:
                record[2] = other
            pulled.append(json.dumps(record, separators=(",", ":")) + "\n")
        temporary = lock.with_name("provgraph.lock.pulled")
        temporary.write_text(header + "".join(pulled))
        os.replace(temporary, lock)


def _stamped_elsewhere(memory: Folder, name: str, _content: int) -> None:
    """Another process records a re-derivation (``provgraph stamp``), in both states."""
    if not name.endswith(".md"):
        return
    for state in (memory.watched_state, memory.reference_state):
        target = Memory(memory.root, state=state)
        try:
            target.stamp([name], now=memory.now)
        except Exception:  # not a derived file now: nothing is recorded, in either state
            continue


EDITS = {
    "write": _write,
    "write keeping mtime": _write_keeping_mtime,
    "delete": _delete,
    "rename": _rename,
    "new folder, then filled": _new_folder_filled,
    "folder moved in": _folder_moved_in,
    "folder removed": _folder_removed,
    "outside source edited": _outside_edited,
    "lock pulled": _lock_pulled,
    "stamped by another process": _stamped_elsewhere,
    "nothing": lambda memory, name, content: None,
}

steps = st.lists(
    st.tuples(
        st.sampled_from(sorted(EDITS)),
        st.sampled_from(NAMES),
        st.integers(min_value=0, max_value=len(CONTENTS) - 1),
    ),
    min_size=1,
    max_size=10,
)


# -- the guarantee -------------------------------------------------------------------


@settings(max_examples=examples(30), deadline=None)
@given(steps=steps, state_outside=st.booleans(), checks=st.integers(min_value=1, max_value=4))
def test_the_watch_answers_what_a_fresh_walk_answers_after_any_edits(
    steps: list[tuple[str, str, int]], state_outside: bool, checks: int
) -> None:
    """After each edit, every check of the middleware (walked or answered from the watch)
    equals a fresh walk at the same time; and an unchanged folder is answered from the watch."""
    with folder(state_outside=state_outside) as memory:
        assert memory.check() == memory.walked()
        for step in steps:
            memory.now += timedelta(hours=1)
            edit(memory, step)
            walked = memory.walked()
            for _ in range(checks):
                assert memory.check() == walked, step
        _assert_settles_on_the_watch(memory)
        _every_file_edited_in_turn(memory)


def _every_file_edited_in_turn(memory: Folder) -> None:
    """Each file the folder holds now, edited alone once the folder is answered from the watch:
    a folder the edits made and the watch missed gives itself away."""
    for path in sorted(memory.root.rglob("*")):
        relative = path.relative_to(memory.root)
        hidden = any(part.startswith(".") for part in relative.parts)
        if not path.is_file() or path.is_symlink() or hidden or path.name == "provgraph.lock":
            continue
        for _ in range(3):
            memory.check()
        with open(path, "a") as appended:
            appended.write("edited at the end\n")
        assert memory.check() == memory.walked(), relative


def _assert_settles_on_the_watch(memory: Folder) -> None:
    """Left alone, the folder is answered from the watch within three checks (a walk, then
    one more when the walk itself rewrote the lock), and from then on without any walk."""
    for _ in range(3):
        memory.check()
    assert memory.doubt is None
    walks = memory.walks
    for _ in range(5):
        assert memory.check() == memory.walked()
    assert memory.walks == walks


def _assert_walks_in_doubt(memory: Folder, doubt: Doubt) -> None:
    """Check after check, the folder is walked (every answer a walk's), for ``doubt``."""
    walks = memory.walks
    for number in range(4):
        assert memory.check() == memory.walked()
        assert memory.walks == walks + number + 1
    assert memory.doubt is doubt


def _stale_at_the_next_check(memory: Folder) -> list[str]:
    """The next check, which must be a fresh walk's answer: its stale files."""
    report = memory.check()
    assert report == memory.walked()
    return [entry.path for entry in report.stale]


def test_an_unchanged_folder_is_answered_without_a_walk_and_an_edit_is_seen_by_the_next_check() -> None:
    with folder() as memory:
        first = memory.check()
        _assert_settles_on_the_watch(memory)
        walks = memory.walks
        memory.write("a.md", "the user moved to Oslo\n")
        report = memory.check()  # no wait: the write's event is queued when write() returns
        assert memory.walks == walks + 1
        assert report == memory.walked() != first
        assert [entry.path for entry in report.stale] == ["b.md", "sub/c.md"]


def test_a_new_folder_is_watched_with_what_it_held_when_it_arrived() -> None:
    """A folder made and filled between two checks, and one moved in whole: the files
    they held are edited later, with no other event to give them away."""
    with folder() as memory:
        _assert_settles_on_the_watch(memory)
        _new_folder_filled(memory, "a.md", 0)
        _folder_moved_in(memory, "a.md", 1)
        assert memory.check() == memory.walked()
        _assert_settles_on_the_watch(memory)
        for name in ("fresh-0/inner/g.md", "moved-1/nested/i.md"):
            memory.write(name, "---\nderived_from: /data.txt\n---\nnow derived\n")
            report = memory.check()
            assert report == memory.walked()
            assert any(edge.derived == name for edge in report.edges)
            _assert_settles_on_the_watch(memory)


def test_the_middleware_prompt_follows_the_watched_folder() -> None:
    """Through ``on_system_prompt``, the hook an agent calls: the block appears with the edit."""
    with folder() as memory:

        def prompt() -> str:
            with mock.patch.dict(os.environ, {"PROVGRAPH_NOW": memory.now.isoformat()}):
                return memory.loop.run_until_complete(memory.middleware.on_system_prompt(None, PROMPT))

        for _ in range(4):
            assert prompt() == PROMPT
        memory.write("data.txt", "other data\n")
        assert "- b.md: source(s) changed since derived" in prompt()
        memory.write("data.txt", CONTENTS[1])
        assert prompt() == PROMPT


# -- every doubt walks -----------------------------------------------------------------


def _overflow(memory: Folder) -> None:
    """More events than the kernel queues (two files touched in turn, so none merge)."""
    limit = int(Path("/proc/sys/fs/inotify/max_queued_events").read_text())
    if limit > 100_000:
        pytest.skip(f"an event queue of {limit} takes too long to fill")
    first, second = memory.root / "a.md", memory.root / "data.txt"
    for number in range(limit // 2 + 64):
        os.utime(first, ns=(number, number))
        os.utime(second, ns=(number, number))


def test_an_overflowing_event_queue_walks_then_watches_again() -> None:
    with folder() as memory:
        _assert_settles_on_the_watch(memory)
        memory.write("a.md", "changed before the flood\n")
        _overflow(memory)
        walks = memory.walks
        assert memory.check() == memory.walked()
        assert memory.walks == walks + 1
        _assert_settles_on_the_watch(memory)


def test_without_inotify_every_check_walks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "inotify_simple", None)  # the watch extra is not installed
    with folder() as memory:
        _assert_walks_in_doubt(memory, Doubt.UNSUPPORTED)
        memory.write("a.md", "changed\n")
        assert _stale_at_the_next_check(memory) == ["b.md", "sub/c.md"]


def test_a_file_system_inotify_cannot_see_walks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(watch_module, "_mounts", lambda: [("/", "nfs4")])
    with folder() as memory:
        _assert_walks_in_doubt(memory, Doubt.FILE_SYSTEM)


def test_too_many_folders_walk(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(watch_module, "MAX_FOLDERS", 2)
    with folder() as memory:
        _assert_walks_in_doubt(memory, Doubt.TOO_MANY_FOLDERS)


def test_a_link_through_a_path_outside_the_folder_walks() -> None:
    """``alias.md`` leads through a link outside the folder back to a memory file:
    re-pointing that outer link changes what ``alias.md`` holds without an event inside."""
    with folder() as memory:
        hop = memory.base / "hop.md"
        hop.symlink_to(memory.root / "a.md")
        (memory.root / "alias.md").symlink_to(hop)
        memory.write("derived.md", "---\nderived_from: alias.md\n---\nfrom the alias\n")
        _assert_walks_in_doubt(memory, Doubt.LINK_OUT)
        hop.unlink()
        hop.symlink_to(memory.root / "data.txt")
        assert _stale_at_the_next_check(memory) == ["derived.md"]


def test_a_link_to_a_hidden_file_walks() -> None:
    """Hidden names are not watched: a memory file that is a link to one could change unseen."""
    with folder() as memory:
        memory.write(".secret.md", "hidden content\n")
        (memory.root / "shown.md").symlink_to(".secret.md")
        memory.write("derived.md", "---\nderived_from: shown.md\n---\nfrom the shown file\n")
        _assert_walks_in_doubt(memory, Doubt.LINK_OUT)
        memory.write(".secret.md", "hidden content, edited\n")
        assert _stale_at_the_next_check(memory) == ["derived.md"]


def test_a_link_inside_the_folder_is_watched() -> None:
    with folder() as memory:
        (memory.root / "alias.md").symlink_to("sub/c.md")
        _assert_settles_on_the_watch(memory)


def test_a_file_written_through_another_hard_link_is_seen() -> None:
    with folder() as memory:
        elsewhere = memory.base / "elsewhere.md"
        os.link(memory.root / "a.md", elsewhere)
        _assert_walks_in_doubt(memory, Doubt.HARD_LINK)
        with open(elsewhere, "a") as through_the_other_name:
            through_the_other_name.write("appended elsewhere\n")
        assert "b.md" in _stale_at_the_next_check(memory)
        elsewhere.unlink()  # one name again: the folder is watched once its shape changes
        memory.write("unrelated.md", "a new file\n")
        _assert_settles_on_the_watch(memory)


def test_a_source_in_a_hidden_folder_walks() -> None:
    with folder() as memory:
        memory.write(".hidden/source.md", "hidden\n")
        memory.write("derived.md", "---\nderived_from: .hidden/source.md\n---\nx\n")
        _assert_walks_in_doubt(memory, Doubt.HIDDEN_SOURCE)
        memory.write(".hidden/source.md", "hidden, edited\n")
        assert _stale_at_the_next_check(memory) == ["derived.md"]


def test_a_pulled_lock_in_a_state_folder_outside_the_memory_folder_is_seen() -> None:
    with folder(state_outside=True) as memory:
        _assert_settles_on_the_watch(memory)
        _lock_pulled(memory, "a.md", 0)
        assert _stale_at_the_next_check(memory)


def test_a_memory_folder_reached_through_a_link_that_is_re_pointed_is_walked_where_it_leads() -> None:
    """``work`` is a link to one release of the memory; re-pointing it to another one sends no
    event into either folder: the check sees the path lead elsewhere, and walks there."""
    with tempfile.TemporaryDirectory() as base:
        releases = [Path(base) / name / "Memory" for name in ("one", "two")]
        for number, release in enumerate(releases):
            release.mkdir(parents=True)
            (release / "a.md").write_text(f"release {number}\n")
            (release / "b.md").write_text("---\nderived_from: a.md\n---\nb\n")
        link = Path(base) / "work"
        link.symlink_to(releases[0].parent)
        middleware = ProvenanceMiddleware(workdir=str(link))
        loop = asyncio.new_event_loop()
        try:

            def check() -> Report | None:
                return loop.run_until_complete(middleware._checked())

            for _ in range(4):
                check()
            Memory(releases[1]).refresh(now=START)
            (releases[1] / "a.md").write_text("release 1, edited\n")  # stale there, and only there
            before = check()
            assert before is not None and not before.stale
            (Path(base) / "next").symlink_to(releases[1].parent)
            os.replace(Path(base) / "next", link)
            report = check()
            assert report is not None and [entry.path for entry in report.stale] == ["b.md"]
            assert report == Memory(link / "Memory").refresh(now=report.scanned_at)
        finally:
            middleware.close()
            loop.close()


def test_a_memory_folder_removed_and_made_again_is_watched_again() -> None:
    with folder() as memory:
        _assert_settles_on_the_watch(memory)
        saved = memory.base / "saved"
        os.rename(memory.root, saved)
        memory.root.mkdir()
        memory.write("a.md", "a new folder\n")
        assert memory.check() == memory.walked()
        _assert_settles_on_the_watch(memory)


# -- descriptors -----------------------------------------------------------------------


def _watches() -> set[str]:
    """This process's inotify descriptors (after collecting what earlier tests left behind)."""
    gc.collect()
    found = set()
    for descriptor in os.listdir("/proc/self/fd"):
        try:
            if "inotify" in os.readlink(f"/proc/self/fd/{descriptor}"):
                found.add(descriptor)
        except OSError:
            continue  # the listing's own descriptor, closed by now
    return found


def test_closing_the_middleware_releases_the_watch_and_a_later_check_watches_anew() -> None:
    with folder() as memory:
        before = _watches()
        _assert_settles_on_the_watch(memory)
        assert len(_watches() - before) == 1
        memory.middleware.close()
        assert _watches() == before
        memory.write("a.md", "changed while closed\n")
        assert memory.check() == memory.walked()
        _assert_settles_on_the_watch(memory)


def test_leaving_the_middleware_as_a_context_manager_releases_the_watch() -> None:
    async def checked_inside(middleware: Any) -> None:
        async with middleware:
            await middleware._checked()
            assert len(_watches() - before) == 1

    with folder() as memory:
        before = _watches()
        with memory.middleware:
            _assert_settles_on_the_watch(memory)
            assert len(_watches() - before) == 1
        assert _watches() == before
        memory.write("a.md", "changed while closed\n")
        assert memory.check() == memory.walked()
        memory.loop.run_until_complete(checked_inside(memory.middleware))
        assert _watches() == before


def test_a_middleware_made_per_chat_turn_holds_no_watch_once_its_reply_ends(monkeypatch: pytest.MonkeyPatch) -> None:
    """AgentScope's service makes the middlewares afresh for every chat turn: 100 turns in one
    process leave no watch behind, although every middleware is still referenced (as when the
    collector has not run), and each turn is answered from the watch after its first check."""
    from scripted_agent import memory_middleware, reply
    from test_agentscope import EDITED, FILES, MARKER, MOVED, OLD, adopt, write
    from test_agentscope_edits import read

    with tempfile.TemporaryDirectory() as base:
        workdir, before = Path(base) / "work", _watches()
        for relative, text in FILES.items():
            write(workdir / "Memory", relative, text, OLD)
        with ProvenanceMiddleware(workdir=str(workdir)) as first:
            asyncio.run(adopt(first, monkeypatch))
            write(workdir / "Memory", "user-facts.md", MOVED, EDITED)
            asyncio.run(first._checked())  # the change is dated in the lock
        turns, calls = [], [read(workdir / "Memory", "profile.md")]
        for _ in range(100):
            turns.append(ProvenanceMiddleware(workdir=str(workdir)))
            model = asyncio.run(reply([memory_middleware(workdir), turns[-1]], calls))
            assert len(model.system_prompts) == 2 and all(MARKER in prompt for prompt in model.system_prompts)
            assert turns[-1]._watched is not None and turns[-1]._watched.walks == 1
        assert _watches() == before


def test_a_middleware_garbage_collected_releases_its_watch() -> None:
    with tempfile.TemporaryDirectory() as base:
        root = Path(base) / "Memory"
        root.mkdir()
        (root / "a.md").write_text("a\n")
        before = _watches()
        middleware = ProvenanceMiddleware(workdir=base)
        loop = asyncio.new_event_loop()
        try:
            loop.run_until_complete(middleware.on_system_prompt(None, PROMPT))
        finally:
            loop.close()
        assert len(_watches() - before) == 1
        del middleware
        assert _watches() == before


# -- through an agent ------------------------------------------------------------------


def test_an_agents_write_reaches_the_next_model_call_and_a_quiet_reply_is_answered_from_the_watch(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A real ``Agent`` with the memory middleware and a scripted model: the model's ``Write``
    of a source is in the system prompt of its very next call; a later reply that changes
    nothing walks at its first model call (the watch was released when the last reply ended)
    and gets the same block from the watch at the others."""
    from scripted_agent import memory_middleware, reply
    from test_agentscope import FILES, MOVED, OLD, write
    from test_agentscope_edits import read, written

    monkeypatch.setenv("PROVGRAPH_NOW", START.isoformat())
    with tempfile.TemporaryDirectory() as base:
        workdir = Path(base) / "work"
        memory_folder = workdir / "Memory"
        for relative, text in FILES.items():
            write(memory_folder, relative, text, OLD)
        provenance = ProvenanceMiddleware(workdir=str(workdir))
        try:
            middlewares = [memory_middleware(workdir), provenance]
            edit = [read(memory_folder, "user-facts.md"), written(memory_folder, "user-facts.md", MOVED)]
            model = asyncio.run(reply(middlewares, edit))
            marker = "- profile.md: source(s) changed since derived"
            assert [marker in prompt for prompt in model.system_prompts] == [False, False, True]
            for _ in range(3):
                asyncio.run(reply(middlewares, []))  # the walks after the write settle
            walks = provenance._watched.walks if provenance._watched is not None else -1
            reads = [read(memory_folder, "profile.md"), read(memory_folder, "preferences.md")]
            quiet = asyncio.run(reply(middlewares, reads))
            assert len(quiet.system_prompts) == 3 and all(marker in prompt for prompt in quiet.system_prompts)
            assert provenance._watched is not None and provenance._watched.walks == walks + 1
        finally:
            provenance.close()
