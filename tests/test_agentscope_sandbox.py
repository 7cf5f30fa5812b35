"""The AgentScope middleware on a sandbox backend: round trips, failed listings, deadlines, non-regular files.

The sandbox is ``SandboxBackend``, a real subclass of AgentScope's
``BackendBase`` whose files live in a temporary folder: it runs real ``sh``,
``find`` and ``tar`` commands, counts its calls, and can fail or hang.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import time
from pathlib import Path

import pytest
from extras import needs
from test_agentscope import (
    EDITED,
    FILES,
    MARKER,
    MOVED,
    OLD,
    adopt,
    during_an_outage,
    indexed,
    snapshot,
    while_a_check_runs,
    write,
)

import provgraph.api
import provgraph.store.state

pytestmark = needs("agentscope")


@pytest.fixture(autouse=True, scope="module")
def agentscope_loaded() -> None:
    """Imported when this file's first test runs, not when it is collected (``extras.py``)."""
    global Agent, ask, InjectionConfig, memory_middleware, ProvenanceMiddleware, remote_workdir, RetrievalWaitingTool
    global SandboxBackend, ThinkingModel, tool_call, Toolkit, UserMsg
    from agentscope.agent import Agent, InjectionConfig
    from agentscope.message import UserMsg
    from agentscope.tool import Toolkit
    from sandbox_backend import SandboxBackend
    from scripted_agent import RetrievalWaitingTool, ThinkingModel, ask, memory_middleware, remote_workdir, tool_call

    from provgraph.integrations.agentscope import ProvenanceMiddleware


@pytest.fixture
def sandbox(tmp_path: Path) -> tuple[SandboxBackend, Path]:
    """A sandbox whose workdir holds the profile, its two sources and ``MEMORY.md``."""
    for relative, text in FILES.items():
        write(tmp_path / "work" / "Memory", relative, text, OLD)
    return SandboxBackend(), tmp_path / "work"


def middleware(backend, workdir: Path, tmp_path: Path, **options) -> ProvenanceMiddleware:
    return ProvenanceMiddleware(workdir=str(workdir), backend=backend, state=tmp_path / "state", **options)


def prompt(provenance: ProvenanceMiddleware) -> str:
    return asyncio.run(asyncio.wait_for(provenance.on_system_prompt(None, "prompt"), 60))


def add_notes(workdir: Path, count: int) -> None:
    """``count`` plain memory files more, in a subfolder."""
    for number in range(count):
        write(workdir / "Memory", f"notes/note-{number}.md", f"---\nname: note {number}\n---\nbody\n", OLD)


def read_one_by_one(backend: SandboxBackend) -> list[str]:
    """The files read through ``read_file`` (by full path), not in a batch through the shell."""
    return [path for path in backend.read_paths if path.startswith("/")]


def made_stale(backend, workdir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, **options):
    """A middleware that adopted the sandbox's profile, whose source then changed: the profile is marked."""
    provenance = middleware(backend, workdir, tmp_path, **options)
    asyncio.run(adopt(provenance, monkeypatch))
    write(workdir / "Memory", "user-facts.md", MOVED, EDITED)
    assert MARKER in prompt(provenance).splitlines()
    return provenance


# -- round trips -----------------------------------------------------------------------

YEAR_NS = 365 * 24 * 3600 * 10**9


@pytest.fixture
def a_year_later(monkeypatch: pytest.MonkeyPatch) -> None:
    """Files written by a test are younger than the racy window, so every check would
    read them again; a negative window is what a check a year later sees."""
    for module in (provgraph.api, provgraph.store.state, provgraph.integrations.agentscope_backend):
        monkeypatch.setattr(module, "RACY_WINDOW_NS", -YEAR_NS)


@pytest.mark.parametrize("extra_files", [0, 500])
@pytest.mark.usefixtures("a_year_later")
def test_an_unchanged_check_costs_one_backend_call_whatever_the_number_of_files(
    extra_files: int, sandbox: tuple[SandboxBackend, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    backend, workdir = sandbox
    add_notes(workdir, extra_files)
    provenance = middleware(backend, workdir, tmp_path)
    asyncio.run(adopt(provenance, monkeypatch))
    cold_calls = backend.calls

    backend.calls = 0
    unchanged = prompt(provenance)
    unchanged_calls = backend.calls

    write(workdir / "Memory", "user-facts.md", MOVED, EDITED)
    backend.calls = 0
    edited = prompt(provenance)
    edited_calls = backend.calls

    assert cold_calls <= 4  # one listing, one batch of reads, the new lock written back in two
    assert unchanged == "prompt"
    assert unchanged_calls == 1
    assert MARKER in edited.splitlines()
    assert edited_calls <= 5  # the listing, the one file that changed, the lock written back


@pytest.mark.parametrize("names_per_command", [None, 2_000])
@pytest.mark.usefixtures("a_year_later")
def test_a_lost_cache_costs_one_batch_of_reads_whatever_the_number_of_files(
    names_per_command: int | None,
    sandbox: tuple[SandboxBackend, Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Without the host's cache, the files are read in one call after the listing, also when
    their names would not fit in one command (a limit lowered here to 2,000 bytes)."""
    backend, workdir = sandbox
    if names_per_command is not None:
        monkeypatch.setattr(provgraph.integrations.agentscope_backend, "_ARGUMENT_BYTES", names_per_command)
    add_notes(workdir, 300)
    provenance = made_stale(backend, workdir, tmp_path, monkeypatch)
    expected = prompt(provenance)
    shutil.rmtree(tmp_path / "state")  # the host's cache and lock mirror are gone; the workspace's lock is not

    backend.calls = 0
    cold = prompt(provenance)
    cold_calls = backend.calls
    backend.calls = 0
    warm = prompt(provenance)

    assert cold == warm == expected
    assert cold_calls <= 3
    assert backend.calls == 1
    assert not read_one_by_one(backend)


@pytest.mark.usefixtures("a_year_later")
def test_a_source_gone_missing_costs_a_few_calls_not_a_read_per_file(
    sandbox: tuple[SandboxBackend, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A missing source makes the scan hash every memory file (to find where its content went)."""
    backend, workdir = sandbox
    add_notes(workdir, 200)
    provenance = middleware(backend, workdir, tmp_path)
    asyncio.run(adopt(provenance, monkeypatch))
    prompt(provenance)
    (workdir / "Memory" / "preferences.md").unlink()

    backend.calls = 0
    shown = prompt(provenance)

    assert "preferences.md" in shown
    assert backend.calls <= 5  # the listing, two batches of reads, the lock written back
    assert not read_one_by_one(backend)


@pytest.mark.usefixtures("a_year_later")
def test_a_tar_that_cannot_take_names_from_its_input_reads_them_as_arguments(
    sandbox: tuple[SandboxBackend, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A ``tar`` without ``--null -T -`` (BusyBox's) gets the names in commands of its own instead."""
    backend, workdir = sandbox
    backend_module = provgraph.integrations.agentscope_backend
    monkeypatch.setattr(backend_module, "_ARGUMENT_BYTES", 200)
    monkeypatch.setattr(backend_module, "_READ_ALL_SCRIPT", "echo 'tar: unrecognized option: null' >&2; exit 1\n")
    add_notes(workdir, 30)

    provenance = made_stale(backend, workdir, tmp_path, monkeypatch)

    assert provenance.files is not None and provenance.files.has_shell
    assert not read_one_by_one(backend)


@pytest.mark.usefixtures("a_year_later")
def test_one_failed_spawn_costs_its_check_only_the_next_is_back_to_the_shell(
    sandbox: tuple[SandboxBackend, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog
) -> None:
    backend, workdir = sandbox
    for number in range(50):
        write(workdir / "Memory", f"notes/note-{number}.md", "body\n", OLD)
    provenance = made_stale(backend, workdir, tmp_path, monkeypatch)
    before = prompt(provenance)

    backend.spawn_failures = 1  # AgentScope's answer to EAGAIN at spawn: exit status 127
    with caplog.at_level(logging.WARNING):
        assert prompt(provenance) == during_an_outage(before)
    backend.calls = 0
    shown = prompt(provenance)

    assert "could not check the memory folder" in caplog.text
    assert MARKER in shown.splitlines()
    assert backend.calls <= 2
    assert not [path for path in backend.read_paths if "note-" in path and path.startswith("/")]  # none one by one


@pytest.mark.usefixtures("a_year_later")
def test_a_failed_spawn_at_the_first_check_does_not_make_the_backend_shell_less(
    sandbox: tuple[SandboxBackend, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    backend, workdir = sandbox
    backend.spawn_failures = 1
    provenance = made_stale(backend, workdir, tmp_path, monkeypatch)
    prompt(provenance)

    backend.calls = 0
    assert MARKER in prompt(provenance).splitlines()
    assert backend.calls == 1


def shell_less_and_stale(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A backend without a shell whose profile was adopted, then its source changed."""
    backend = remote_workdir()
    provenance = ProvenanceMiddleware(workdir="/sandbox/work", backend=backend, state=tmp_path / "state")
    asyncio.run(adopt(provenance, monkeypatch))
    backend.put("/sandbox/work/Memory/user-facts.md", MOVED, EDITED)
    return backend, provenance


def test_a_backend_without_a_shell_is_still_read_file_by_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    backend, provenance = shell_less_and_stale(tmp_path, monkeypatch)

    assert MARKER in prompt(provenance).splitlines()
    assert MARKER in prompt(provenance).splitlines()
    assert provenance.files is not None and not provenance.files.has_shell


def test_a_sandbox_gives_the_local_result(
    sandbox: tuple[SandboxBackend, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    backend, workdir = sandbox
    local = ProvenanceMiddleware(workdir=str(workdir), state=tmp_path / "local.json")
    remote = middleware(backend, workdir, tmp_path)
    asyncio.run(adopt(local, monkeypatch))
    asyncio.run(adopt(remote, monkeypatch))
    write(workdir / "Memory", "user-facts.md", MOVED, EDITED)
    write(workdir / "Memory", "notes/new.md", "---\nderived_from: ../profile.md\n---\nnew\n", EDITED)
    before = snapshot(workdir / "Memory")

    assert prompt(remote) == prompt(local)
    assert MARKER in prompt(remote).splitlines()
    assert snapshot(workdir / "Memory") == before


# -- a failed listing is not an empty folder ---------------------------------------------------


def test_a_failed_listing_keeps_the_prompt_and_every_stamp(
    sandbox: tuple[SandboxBackend, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog
) -> None:
    backend, workdir = sandbox
    provenance = made_stale(backend, workdir, tmp_path, monkeypatch)
    lock = tmp_path / "state" / "provgraph.lock"
    before = prompt(provenance)
    state_before = (snapshot(tmp_path / "state"), lock.read_bytes())

    backend.failing = True
    with caplog.at_level(logging.WARNING):
        during = [prompt(provenance) for _ in range(3)]
    backend.failing = False

    assert during == [during_an_outage(before)] * 3
    assert "could not check the memory folder" in caplog.text
    assert (snapshot(tmp_path / "state"), lock.read_bytes()) == state_before
    assert MARKER in prompt(provenance).splitlines()  # not re-adopted as fresh


def test_a_truly_empty_folder_is_empty_and_a_missing_one_is_a_warning(
    sandbox: tuple[SandboxBackend, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog
) -> None:
    backend, workdir = sandbox
    provenance = made_stale(backend, workdir, tmp_path, monkeypatch)
    before = prompt(provenance)

    (workdir / "Memory").rename(workdir / "Elsewhere")
    with caplog.at_level(logging.WARNING):
        missing = prompt(provenance)
    (workdir / "Elsewhere").rename(workdir / "Memory")
    assert missing == during_an_outage(before)
    assert "does not exist" in caplog.text
    assert MARKER in prompt(provenance).splitlines()

    for path in (workdir / "Memory").glob("*.md"):  # every memory file; the lineage lock stays
        path.unlink()
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        assert prompt(provenance) == "prompt"  # an empty folder has nothing stale
    assert "could not check" not in caplog.text  # and is no failure
    for relative, text in FILES.items():
        write(workdir / "Memory", relative, text if relative != "user-facts.md" else MOVED, EDITED)
    # The profile came back: its stamps were kept while it was gone, so it is still stale.
    assert MARKER in prompt(provenance).splitlines()


def test_a_listing_without_a_shell_that_fails_is_not_an_empty_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog
) -> None:
    backend, provenance = shell_less_and_stale(tmp_path, monkeypatch)

    backend.listing_fails = True  # AgentScope's list_dir answers a failed listing with []
    with caplog.at_level(logging.WARNING):
        during = prompt(provenance)
    backend.listing_fails = False

    assert during == "prompt"
    assert "came back empty" in caplog.text
    assert MARKER in prompt(provenance).splitlines()


def test_an_empty_listing_twice_of_a_folder_whose_files_are_still_there_is_a_failed_listing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog
) -> None:
    backend, provenance = shell_less_and_stale(tmp_path, monkeypatch)
    before = prompt(provenance)

    backend.listing_fails = "twice"  # a backend without a shell: the plain listing is empty too
    with caplog.at_level(logging.WARNING):
        during = prompt(provenance)
    warnings = [record for record in caplog.records if "came back empty" in record.getMessage()]
    backend.files = {path: file for path, file in backend.files.items() if not path.endswith(".md")}  # truly empty
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        emptied = prompt(provenance)

    assert during == during_an_outage(before) and len(warnings) == 1
    assert emptied == "prompt" and not caplog.records


# -- nothing in a sandbox can hang the agent ------------------------------------------------


def test_a_fifo_in_the_memory_folder_is_never_read(
    sandbox: tuple[SandboxBackend, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    backend, workdir = sandbox
    os.mkfifo(workdir / "Memory" / "notes.md")
    indexed(workdir / "Memory", "digest.md", "---\nderived_from: notes.md, profile.md\n---\ndigest\n", OLD)
    provenance = middleware(backend, workdir, tmp_path)
    asyncio.run(adopt(provenance, monkeypatch))
    write(workdir / "Memory", "user-facts.md", MOVED, EDITED)

    shown = prompt(provenance)
    asyncio.run(asyncio.wait_for(provenance.memory_lineage("notes.md"), 60))

    assert MARKER in shown.splitlines()
    assert not [path for path in backend.read_paths if path.endswith("notes.md")]


def test_a_backend_call_that_never_answers_holds_no_model_call_and_no_tool(
    sandbox: tuple[SandboxBackend, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    backend, workdir = sandbox
    provenance = made_stale(backend, workdir, tmp_path, monkeypatch, backend_timeout=0.2)
    before = prompt(provenance)

    backend.hanging = True
    during = prompt(provenance)
    answer = asyncio.run(asyncio.wait_for(provenance.record_memory_rederivation("profile.md"), 60))
    backend.hanging = False

    assert during == while_a_check_runs(before)
    assert answer.startswith("Could not record the re-derivation of profile.md")
    assert "did not answer within 0.2 s" in answer
    assert MARKER in prompt(provenance).splitlines()


def test_a_file_whose_read_hangs_in_a_backend_without_a_shell_is_abandoned(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    backend = remote_workdir()
    provenance = ProvenanceMiddleware(
        workdir="/sandbox/work", backend=backend, state=tmp_path / "state", backend_timeout=0.2
    )
    asyncio.run(adopt(provenance, monkeypatch))
    backend.put("/sandbox/work/Memory/notes.md", "", OLD)
    backend.hanging_paths = {"/sandbox/work/Memory/notes.md"}  # a FIFO: reading it waits for a writer

    assert prompt(provenance) == "prompt"


def test_the_agent_works_through_a_sandbox(
    sandbox: tuple[SandboxBackend, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    backend, workdir = sandbox
    memory = memory_middleware(workdir, backend)
    provenance = ProvenanceMiddleware.from_memory_middleware(memory, state=tmp_path / "state")
    asyncio.run(adopt(provenance, monkeypatch))
    write(workdir / "Memory", "user-facts.md", MOVED, EDITED)

    model = asyncio.run(ask([memory, provenance]))

    assert MARKER in model.system_prompts[0].splitlines()


# -- a slow backend: the check goes on in the background -------------------------------------

BUDGET = 0.2
"""How long a model call waits for a check (``backend_timeout``)."""
SLOW_CALL = 0.4
"""Each backend call of the slow sandbox, and of the model: a check after an edit (a listing, then a read) takes two."""


async def thinking_reply(provenance: ProvenanceMiddleware, workdir: Path, steps: int) -> ThinkingModel:
    """One reply of a real Agent that reasons ``steps`` times, each model call taking a while."""
    model = ThinkingModel([tool_call(RetrievalWaitingTool.name)] * (steps - 1), latency=SLOW_CALL)
    agent = Agent(
        name="assistant",
        system_prompt="You are helpful.",
        model=model,
        toolkit=Toolkit(tools=[RetrievalWaitingTool(memory_middleware(workdir))]),  # answers at once
        middlewares=[provenance],
        injection_config=InjectionConfig(inject_runtime_state=False),
    )
    model.calls.append((0.0, time.monotonic()))  # the reply's start, as the end of a call before it
    await agent.reply(UserMsg(name="user", content="What do you remember?"))
    del model.calls[0]
    return model


def waits(model: ThinkingModel, started: float) -> list[float]:
    """How long each model call waited after the previous one (or the reply's start): the tool answers at once."""
    ends = [started] + [ended for _, ended in model.calls]
    return [began - ended for (began, _), ended in zip(model.calls, ends, strict=False)]


def slow_and_stale(sandbox: tuple[SandboxBackend, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A middleware with a small budget that adopted the sandbox's profile, whose source then changed,
    and the sandbox made slower than the budget."""
    backend, workdir = sandbox
    provenance = middleware(backend, workdir, tmp_path, backend_timeout=BUDGET)
    asyncio.run(adopt(provenance, monkeypatch))
    write(workdir / "Memory", "user-facts.md", MOVED, EDITED)
    backend.delay = SLOW_CALL
    return provenance


@pytest.mark.usefixtures("a_year_later")
def test_a_check_slower_than_the_budget_goes_on_in_the_background_and_its_mark_appears(
    sandbox: tuple[SandboxBackend, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    provenance = slow_and_stale(sandbox, tmp_path, monkeypatch)
    listings: list[float] = []
    list_or_run = sandbox[0].exec_shell

    async def exec_shell(command: list[str], **options):
        if "-mindepth" in command[2]:  # the listing that opens every check
            listings.append(time.monotonic())
        return await list_or_run(command, **options)

    monkeypatch.setattr(sandbox[0], "exec_shell", exec_shell)

    async def run() -> tuple[ThinkingModel, float]:
        started = time.monotonic()
        return await thinking_reply(provenance, sandbox[1], steps=5), started

    model, started = asyncio.run(run())
    marked = [MARKER in shown.splitlines() for shown in model.system_prompts]
    first_marked = marked.index(True)

    assert not marked[0]  # the first check could not end within the budget
    assert max(waits(model, started)) < BUDGET + SLOW_CALL  # no model call waited for a whole check
    assert first_marked <= 3 and all(marked[first_marked:])
    assert len([at for at in listings if at < model.calls[first_marked][0]]) == 1  # the first check's result


@pytest.mark.usefixtures("a_year_later")
def test_a_check_still_running_when_the_reply_ends_is_finished_for_the_next_reply(
    sandbox: tuple[SandboxBackend, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog
) -> None:
    provenance = slow_and_stale(sandbox, tmp_path, monkeypatch)

    async def two_replies() -> tuple[ThinkingModel, ThinkingModel, int]:
        first = await thinking_reply(provenance, sandbox[1], steps=1)
        await asyncio.sleep(3 * SLOW_CALL)  # the service waits for the next chat turn
        pending = len(asyncio.all_tasks()) - 1
        return first, await thinking_reply(provenance, sandbox[1], steps=1), pending

    with caplog.at_level(logging.WARNING):
        first, second, pending = asyncio.run(two_replies())

    assert MARKER not in first.system_prompts[0].splitlines()
    assert pending == 0  # the check's last backend call ended on its own; nothing else was left
    assert MARKER in second.system_prompts[0].splitlines()
    assert not caplog.records
