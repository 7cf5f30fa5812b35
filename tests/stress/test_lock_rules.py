"""A lock or a declaration that cannot be read whole is never rewritten from less.

- A lock of a newer format is refused, and nothing is written.
- A byte-order mark before the lock's header hides no stamp.
- A derived file whose frontmatter holds a merge conflict keeps every stamp it has.
- A date that some time zone cannot show is damage, set aside, never a traceback.
- Every sync tool's conflict copy of the lock is merged, like the ones already known.
- Whatever the environment holds, a command answers as it does without it.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
from datetime import timedelta
from pathlib import Path

import orjson
import pytest

from provgraph import Memory, NewerLock
from provgraph.model import LATEST_DATE

from .helpers import NOW, assert_clean, assert_one_error_line, derived, provgraph, write
from .test_state_rules import READERS, _tree

NEWER = "provgraph.lock was written by a newer provgraph (lock format 3); upgrade provgraph"


def _stale(root: Path) -> None:
    """``d.md`` derived from ``a.md``, stamped, then ``a.md`` changed: ``check`` says 1."""
    write(root, "MEMORY.md", "# index\n")
    write(root, "a.md", "a\n")
    write(root, "d.md", derived("a.md"))
    assert_clean(provgraph("status", root), 0)
    write(root, "a.md", "a changed\n")
    assert_clean(provgraph("check", root), 1)


def _stale_paths(root: Path, **env: str) -> list[str]:
    done = provgraph("status", "--json", root, **env)
    assert_clean(done, 0)
    return [entry["path"] for entry in orjson.loads(done.stdout)["stale"]]


# -- a lock of a newer provgraph --------------------------------------------------------------


def _newer(root: Path) -> dict[str, tuple]:
    _stale(root)
    lock = root / "provgraph.lock"
    lock.write_bytes(lock.read_bytes().replace(b"# provgraph lock 2:", b"# provgraph lock 3:", 1))
    return _tree(root)


@pytest.mark.parametrize("command", [*READERS[:-1], ("stamp",), ("why",)], ids=" ".join)
def test_a_lock_of_a_newer_provgraph_is_refused_and_nothing_is_written(root: Path, command: tuple[str, ...]) -> None:
    before = _newer(root)
    target = root / "d.md" if command[0] in ("stamp", "why") else root

    line = assert_one_error_line(provgraph(*command, target))

    assert line == f"provgraph: error: {NEWER}"
    assert _tree(root) == before


def test_a_lock_of_a_newer_provgraph_is_an_error_of_the_api_with_its_version(root: Path) -> None:
    before = _newer(root)
    with pytest.raises(NewerLock) as raised:
        Memory(root).refresh(now=NOW)
    assert raised.value.version == 3 and str(raised.value) == NEWER
    assert _tree(root) == before


def test_a_lock_of_a_newer_provgraph_never_breaks_a_session(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    memory = tmp_path / "work" / "Memory"
    memory.mkdir(parents=True)
    before = _newer(memory)

    hooked = provgraph("hook", "claude-code", memory)
    assert_clean(hooked, 0)
    assert hooked.stdout == "" and hooked.stderr == f"provgraph: hook: {NEWER}\n"

    from provgraph.integrations.agentscope import ProvenanceMiddleware  # AgentScope: only where this runs

    monkeypatch.setenv("PROVGRAPH_NOW", NOW.isoformat())
    with caplog.at_level(logging.WARNING):
        prompt = asyncio.run(ProvenanceMiddleware(workdir=str(memory.parent)).on_system_prompt(None, "prompt"))
    assert prompt == "prompt"
    assert any(NEWER in record.getMessage() for record in caplog.records)
    assert _tree(memory) == before


# -- a byte-order mark -------------------------------------------------------------------------


def test_a_byte_order_mark_before_the_lock_hides_no_stamp(root: Path) -> None:
    _stale(root)
    lock = root / "provgraph.lock"
    lock.write_bytes(b"\xef\xbb\xbf" + lock.read_bytes())

    done = provgraph("check", root)

    assert_clean(done, 1)
    assert "d.md" in done.stdout and done.stderr == ""
    assert not [path for path in (root / ".provgraph").iterdir() if ".corrupt-" in path.name]


# -- a merge conflict in a frontmatter ---------------------------------------------------------

CONFLICT = """---
<<<<<<< HEAD
derived_from: [a.md, b.md]
=======
derived_from: [a.md, c.md]
>>>>>>> other
---
derived
"""


def _lock_with(root: Path, *sources: str) -> list[bytes]:
    """The lock's lines once ``d.md`` was derived from ``sources`` on a clone of its own."""
    shutil.rmtree(root / ".provgraph", ignore_errors=True)
    (root / "provgraph.lock").unlink(missing_ok=True)
    write(root, "d.md", derived(*sources))
    assert_clean(provgraph("status", root), 0)
    return (root / "provgraph.lock").read_bytes().splitlines()


def test_a_frontmatter_that_cannot_be_read_keeps_every_stamp_of_its_file(root: Path) -> None:
    """Two branches changed ``d.md``'s sources; git merged the lock (its union attribute)
    and left markers in the frontmatter.  Neither side is the whole declaration: every
    stamp stays, so a source changed meanwhile is still reported once it is resolved."""
    for name in "abc":
        write(root, f"{name}.md", f"{name}\n")
    ours, theirs = _lock_with(root, "a.md", "b.md"), _lock_with(root, "a.md", "c.md")
    (root / "provgraph.lock").write_bytes(b"\n".join([*ours, *theirs[1:]]) + b"\n")
    write(root, "d.md", CONFLICT)
    write(root, "c.md", "c changed\n")

    done = provgraph("status", "--json", root)
    assert_clean(done, 0)
    report = orjson.loads(done.stdout)
    assert {"path": "d.md", "kind": "bad-frontmatter", "detail": "unresolved merge conflict"} in report["problems"]
    assert [entry["path"] for entry in report["stale"]] == ["d.md"]
    stamped = {tuple(orjson.loads(line)[:2]) for line in (root / "provgraph.lock").read_bytes().splitlines()[1:]}
    assert stamped == {("d.md", "a.md"), ("d.md", "b.md"), ("d.md", "c.md")}

    write(root, "d.md", derived("a.md", "b.md", "c.md"))  # the conflict resolved
    assert _stale_paths(root) == ["d.md"]


# -- a date no time zone can hold --------------------------------------------------------------


@pytest.mark.parametrize("column", [3, 4], ids=["stamped-at", "changed-since"])
def test_a_date_that_a_time_zone_cannot_show_is_damage_set_aside(root: Path, column: int) -> None:
    _stale(root)
    lock = root / "provgraph.lock"
    header, line = lock.read_bytes().splitlines()
    row = orjson.loads(line)
    row[column] = LATEST_DATE + 86399  # the last second of year 9999 in UTC: year 10000 in Tokyo
    lock.write_bytes(header + b"\n" + orjson.dumps(row) + b"\n")

    for command in READERS:
        assert_clean(provgraph(*command, root, TZ="Asia/Tokyo"), 0, 1)
    assert len([path for path in (root / ".provgraph").iterdir() if ".corrupt-" in path.name]) == 1
    assert_clean(provgraph("status", root, TZ="Pacific/Kiritimati"), 0)


# -- sync tools' conflict copies ---------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    [
        "provgraph (SFConflict user@host 2026-11-20-09-30-00).lock",
        "provgraph (Case Conflict).lock",
        "provgraph (Case Conflict 1).lock",
        "provgraph-DESKTOP-1234.lock",
        "provgraph-LAPTOP-ABCD.lock",
    ],
)
def test_every_sync_tools_conflict_copy_of_the_lock_is_merged_and_kept_aside(
    root: Path, tmp_path: Path, name: str
) -> None:
    """Another machine stamped ``d.md``; its lock came back as a conflict copy."""
    _stale(root)
    other = tmp_path / "other"
    shutil.copytree(root, other)
    assert_clean(provgraph("stamp", other / "d.md", PROVGRAPH_NOW=(NOW + timedelta(days=1)).isoformat()), 0)
    copy = root / name
    copy.write_bytes((other / "provgraph.lock").read_bytes())

    done = provgraph("status", "--json", root)

    assert_clean(done, 0)
    assert orjson.loads(done.stdout)["stale"] == []
    assert not copy.exists()
    (kept,) = [path for path in (root / ".provgraph").iterdir() if path.name.startswith(name + ".merged-")]
    assert kept.read_bytes() == (other / "provgraph.lock").read_bytes()
    assert done.stderr.startswith("provgraph: warning: merged ") and len(done.stderr.splitlines()) == 1


# -- the environment ---------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["abc", "0", "-1"])
def test_every_environment_the_system_gives_is_handled(root: Path, value: str) -> None:
    """``PROVGRAPH_PROCESSES`` chose a forked walk once; provgraph reads no such variable
    now, and an odd value changes no answer."""
    _stale(root)
    plain = {command: provgraph(*command, root) for command in READERS}
    for command, expected in plain.items():
        done = provgraph(*command, root, PROVGRAPH_PROCESSES=value)
        assert_clean(done, expected.code)
        assert (done.stdout, done.stderr) == (expected.stdout, expected.stderr)
