"""Through a sandbox, the lineage lock lives in the workspace; only the disposable cache stays on the host.

Every workspace of AgentScope's agent service is seen at ``/workspace``:
``Workspace`` is the test sandbox (``SandboxBackend``, real ``sh``, ``find``
and ``tar``) with its files in a folder of its own, mapped to that path.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from extras import needs
from test_agentscope import ADOPTED, CHECKED, EDITED, FILES, MARKER, MOVED, OLD, during_an_outage, indexed, write

from provgraph.model import Stamp
from provgraph.store.lock import LOCK_NAME, Record, decode_lock, decode_options, encode_lock

pytestmark = needs("agentscope")


@pytest.fixture(autouse=True, scope="module")
def agentscope_loaded() -> None:
    """Imported when this file's first test runs, not when it is collected (``extras.py``)."""
    global ProvenanceMiddleware, WORKDIR, Workspace, merged_locks
    from scripted_agent import WORKDIR, Workspace

    from provgraph.integrations.agentscope import ProvenanceMiddleware
    from provgraph.integrations.agentscope_lock import _merged as merged_locks


WORKDIR = "/workspace"


def workspace(folder: Path, facts: str = FILES["user-facts.md"]) -> Workspace:
    """A workspace holding the profile, its two sources (the facts as given) and ``MEMORY.md``."""
    for relative, text in FILES.items():
        write(folder / "Memory", relative, facts if relative == "user-facts.md" else text, OLD)
    return Workspace(folder)


def replica(backend: Workspace, state: Path | None = None) -> ProvenanceMiddleware:
    """The middleware one replica of the service builds for the workspace (its own host state)."""
    return ProvenanceMiddleware(workdir=WORKDIR, backend=backend, state=state)


def prompt(provenance: ProvenanceMiddleware) -> str:
    return asyncio.run(asyncio.wait_for(provenance.on_system_prompt(None, "prompt"), 60))


def check(provenance: ProvenanceMiddleware, monkeypatch: pytest.MonkeyPatch, when=CHECKED) -> str:
    monkeypatch.setenv("PROVGRAPH_NOW", when.isoformat())
    return prompt(provenance)


def made_stale(folder: Path, provenance: ProvenanceMiddleware, monkeypatch: pytest.MonkeyPatch) -> None:
    """The middleware adopts the workspace in ``folder``, whose facts then change: the profile is marked."""
    check(provenance, monkeypatch, ADOPTED)
    write(folder / "Memory", "user-facts.md", MOVED, EDITED)
    assert MARKER in check(provenance, monkeypatch).splitlines()


def stale_workspace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Workspace, ProvenanceMiddleware, Path]:
    """The workspace in ``tmp_path / "a"``, made stale through one replica: both, and its lock's path."""
    backend = workspace(tmp_path / "a")
    provenance = replica(backend, tmp_path / "host")
    made_stale(tmp_path / "a", provenance, monkeypatch)
    return backend, provenance, tmp_path / "a" / "Memory" / LOCK_NAME


def lock_records(folder: Path) -> dict:
    return dict(decode_lock((folder / "Memory" / LOCK_NAME).read_bytes()).records)


@pytest.fixture(autouse=True)
def cache_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The default host state goes under the user's cache folder: here, a temporary one."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


def test_the_lock_in_the_workspace_is_what_the_command_line_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    backend, provenance, lock = stale_workspace(tmp_path, monkeypatch)
    written = lock.read_bytes()

    command = [sys.executable, "-m", "provgraph", "status", "--json", str(tmp_path / "a" / "Memory")]
    clock = {**os.environ, "PROVGRAPH_NOW": CHECKED.isoformat()}
    status = subprocess.run(command, capture_output=True, text=True, env=clock, check=False)

    assert status.returncode == 0, status.stderr
    assert '"profile.md"' in status.stdout and "2026-11-18" in status.stdout
    assert lock.read_bytes() == written  # the command line had nothing to change in it
    assert (tmp_path / "host" / LOCK_NAME).read_bytes() == written  # the host keeps a mirror


def test_two_replicas_on_one_workspace_see_the_same_stamps_and_the_same_dates(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    backend = workspace(tmp_path / "a")
    first, second = replica(backend, tmp_path / "host-1"), replica(backend, tmp_path / "host-2")
    check(first, monkeypatch, ADOPTED)
    write(tmp_path / "a" / "Memory", "user-facts.md", MOVED, EDITED)

    assert MARKER in check(second, monkeypatch).splitlines()  # stamped by the first, dated the same
    assert check(first, monkeypatch) == check(second, monkeypatch)

    monkeypatch.setenv("PROVGRAPH_NOW", CHECKED.isoformat())
    assert asyncio.run(first.record_memory_rederivation("profile.md")).startswith("Recorded")
    assert check(second, monkeypatch) == "prompt"


def test_two_replicas_writing_at_once_keep_each_others_stamps(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    backend = workspace(tmp_path / "a")
    first, second = replica(backend, tmp_path / "host-1"), replica(backend, tmp_path / "host-2")
    check(first, monkeypatch, ADOPTED)
    check(second, monkeypatch, ADOPTED)
    write(tmp_path / "a" / "Memory", "user-facts.md", MOVED, EDITED)
    assert MARKER in check(first, monkeypatch).splitlines()

    async def the_other_replica_adopts_a_new_file() -> None:
        indexed(tmp_path / "a" / "Memory", "notes.md", "---\nderived_from: profile.md\n---\nnotes\n", EDITED)
        assert await second.on_system_prompt(None, "prompt")

    backend.before_temporary_write = the_other_replica_adopts_a_new_file  # between the first's read and rename
    monkeypatch.setenv("PROVGRAPH_NOW", CHECKED.isoformat())
    assert asyncio.run(first.record_memory_rederivation("profile.md")).startswith("Recorded")

    records = lock_records(tmp_path / "a")
    assert ("notes.md", "profile.md") in records  # the second replica's stamp
    assert records["profile.md", "user-facts.md"].stamp.mismatch_since is None  # the first's re-derivation
    assert check(replica(backend, tmp_path / "host-3"), monkeypatch) == "prompt"


def test_two_workspaces_with_the_same_workdir_never_share_stamps(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    one = workspace(tmp_path / "one")
    check(replica(one), monkeypatch, ADOPTED)
    write(tmp_path / "one" / "Memory", "user-facts.md", MOVED, EDITED)
    other = workspace(tmp_path / "other", facts=MOVED)  # derived from the new facts from the start

    assert MARKER in check(replica(one), monkeypatch).splitlines()
    assert check(replica(other), monkeypatch) == "prompt"
    assert MARKER in check(replica(one), monkeypatch).splitlines()
    assert lock_records(tmp_path / "one") != lock_records(tmp_path / "other")


def test_a_workspace_never_gets_the_last_result_of_another_with_the_same_workdir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    one = workspace(tmp_path / "one")
    provenance = replica(one)
    made_stale(tmp_path / "one", provenance, monkeypatch)
    shutil.copytree(tmp_path / "one", tmp_path / "copy", ignore=shutil.ignore_patterns(LOCK_NAME))

    assert check(replica(Workspace(tmp_path / "copy")), monkeypatch) == "prompt"  # the same files, no stamps yet
    assert MARKER in check(provenance, monkeypatch).splitlines()


def test_a_failed_write_back_loses_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog) -> None:
    backend = workspace(tmp_path / "a")
    check(replica(backend, tmp_path / "host"), monkeypatch, ADOPTED)
    write(tmp_path / "a" / "Memory", "user-facts.md", MOVED, EDITED)
    provenance = replica(backend, tmp_path / "host")
    assert MARKER in check(provenance, monkeypatch).splitlines()
    before = (tmp_path / "a" / "Memory" / LOCK_NAME).read_bytes()

    backend.failing_writes = True
    monkeypatch.setenv("PROVGRAPH_NOW", CHECKED.isoformat())
    with caplog.at_level(logging.WARNING):
        answer = asyncio.run(provenance.record_memory_rederivation("profile.md"))
        during = check(provenance, monkeypatch)
    backend.failing_writes = False

    assert answer.startswith("Recorded")
    assert during == "prompt"
    assert "could not write provgraph.lock" in caplog.text
    assert (tmp_path / "a" / "Memory" / LOCK_NAME).read_bytes() == before
    assert check(replica(backend, tmp_path / "host"), monkeypatch) == "prompt"  # the next check writes it back
    assert check(replica(backend, tmp_path / "elsewhere"), monkeypatch) == "prompt"


@pytest.mark.parametrize("failure", ["write", "rename"])
def test_a_write_back_that_fails_midway_leaves_no_temporary_file(
    failure: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog
) -> None:
    backend, provenance, lock = stale_workspace(tmp_path, monkeypatch)
    before = lock.read_bytes()

    async def rename_fails_to_spawn() -> None:
        backend.spawn_failures = 1

    if failure == "write":
        backend.answer_lost = True  # the temporary file lands, the answer is lost
    else:
        backend.before_temporary_write = rename_fails_to_spawn
    monkeypatch.setenv("PROVGRAPH_NOW", CHECKED.isoformat())
    with caplog.at_level(logging.WARNING):
        answer = asyncio.run(provenance.record_memory_rederivation("profile.md"))

    assert answer.startswith("Recorded")
    assert "could not write provgraph.lock" in caplog.text
    assert lock.read_bytes() == before
    assert not [path.name for path in lock.parent.iterdir() if path.name.endswith(".tmp")]
    left = lock.parent / f".{LOCK_NAME}.0123456789ab.tmp"  # by a write-back that died 11 minutes ago
    left.write_bytes(before)
    os.utime(left, (left.stat().st_mtime - 660,) * 2)
    assert check(provenance, monkeypatch) == "prompt"  # the next check writes it back
    assert lock.read_bytes() != before
    assert not [path.name for path in lock.parent.iterdir() if path.name.endswith(".tmp")]


def test_a_lock_that_cannot_be_read_leaves_the_prompt_and_loses_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog
) -> None:
    backend, provenance, lock = stale_workspace(tmp_path, monkeypatch)
    kept = lock.read_bytes()
    mirror = (tmp_path / "host" / LOCK_NAME).read_bytes()
    before = check(provenance, monkeypatch)

    lock.unlink()
    os.mkfifo(lock)  # reading it would wait forever
    with caplog.at_level(logging.WARNING):
        during = check(provenance, monkeypatch)
    lock.unlink()
    lock.write_bytes(kept)

    assert during == during_an_outage(before)
    assert "provgraph.lock" in caplog.text and "not a regular file" in caplog.text
    assert (tmp_path / "host" / LOCK_NAME).read_bytes() == mirror
    assert MARKER in check(provenance, monkeypatch).splitlines()


def test_a_merged_write_back_keeps_the_reading_options_the_lock_records() -> None:
    stamp = Stamp("a" * 64, 1_700_000_000.0, None)
    ours = encode_lock([Record("digest.md", "daily.md", stamp, None)], {"sources_heading": "## Sources"})
    theirs = encode_lock([Record("notes.md", "daily.md", stamp, None)])
    merged = merged_locks(theirs, ours)
    assert decode_options(merged) == {"sources_heading": "## Sources"} and len(decode_lock(merged).records) == 2
