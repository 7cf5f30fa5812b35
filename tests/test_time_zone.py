"""Every output shows a change on the same day: the day of the machine's local time zone.

A source edited at 23:30 UTC was edited on the next day at UTC+14
(``Pacific/Kiritimati``).  Whatever prints that date (the status, its JSON,
``why``, ``lineage``, the prompt block, the Claude Code hook, the graph
exports, the AgentScope middleware) must name the same day, or a person and
an agent reading two outputs would see one change on two dates.  The same
folder read at UTC names the other day, which shows the zone is what decides.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
from conftest import MemoryFolder, Runner, launch

from provgraph.cli import cli

STAMPED = datetime(2026, 11, 10, 5, 0, tzinfo=UTC)
"""The profile is derived on 2026-11-10 in both zones (19:00 at UTC+14)."""
CHANGED = datetime(2026, 11, 16, 23, 30, tzinfo=UTC)
"""The source's edit: 2026-11-16 at UTC, 2026-11-17 at 13:30 at UTC+14."""
CHECKED = datetime(2026, 11, 20, 12, 0, tzinfo=UTC)

ZONES = [
    pytest.param("Pacific/Kiritimati", "2026-11-17", "2026-11-16", id="utc+14"),
    pytest.param("UTC", "2026-11-16", "2026-11-17", id="utc"),
]

COMMANDS = {
    "status": ("status",),
    "status --json": ("status", "--json"),
    "why": ("why", "digest.md"),
    "why --json": ("why", "digest.md", "--json"),
    "lineage": ("lineage", "facts.md"),
    "lineage --json": ("lineage", "facts.md", "--json"),
    "prompt": ("prompt",),
    "graph json": ("graph", "--format", "json"),
    "graph dot": ("graph", "--format", "dot"),
    "graph mermaid": ("graph", "--format", "mermaid"),
}


@pytest.fixture
def changed_late(memory: MemoryFolder, run: Runner) -> MemoryFolder:
    """facts.md -> profile.md -> digest.md, stamped on 2026-11-10; facts.md edited at 23:30 UTC on 2026-11-16."""
    memory.write("MEMORY.md", "index\n")
    memory.write("facts.md", "v1\n")
    memory.write("profile.md", "Profile.\n", derived_from="facts.md")
    memory.write("digest.md", "Digest.\n", derived_from="profile.md")
    assert run("status", cwd=memory.root, now=STAMPED)[0] == 0
    memory.write("facts.md", "v2\n", mtime=CHANGED)
    return memory


def hook_block(root: Path, zone: str) -> str:
    """What the Claude Code hook adds to a new session's context."""
    event = {"session_id": "s-1", "transcript_path": "/t.jsonl", "cwd": str(root), "hook_event_name": "SessionStart"}
    done = launch(
        ["hook", "claude-code", root],
        input=json.dumps(event).encode(),
        env={**os.environ, "TZ": zone, "PROVGRAPH_NOW": CHECKED.isoformat()},
    )
    assert (done.code, done.stderr) == (0, b"")
    return json.loads(done.stdout)["hookSpecificOutput"]["additionalContext"]


def agentscope_prompt(root: Path) -> dict[str, str]:
    """The system prompt with what the AgentScope middleware appends (nothing without AgentScope)."""
    try:
        from provgraph.integrations.agentscope import ProvenanceMiddleware
    except ImportError:
        return {}
    provenance = ProvenanceMiddleware(workdir=str(root.parent), memory_dir=root.name)
    return {"agentscope": asyncio.run(provenance.on_system_prompt(None, "prompt"))}


@pytest.mark.parametrize(("zone", "day", "other_day"), ZONES)
def test_every_output_names_a_change_on_the_same_local_day(
    changed_late: MemoryFolder,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    zone: str,
    day: str,
    other_day: str,
) -> None:
    monkeypatch.setenv("TZ", zone)
    time.tzset()  # the autouse fixture of conftest.py sets TZ back and calls it again
    monkeypatch.setenv("PROVGRAPH_NOW", CHECKED.isoformat())
    monkeypatch.chdir(changed_late.root)
    outputs = {}
    for name, arguments in COMMANDS.items():
        code = cli(*arguments)
        out, err = capsys.readouterr()
        assert (code, err) == (0, ""), name
        outputs[name] = out
    outputs["hook claude-code"] = hook_block(changed_late.root, zone)
    outputs.update(agentscope_prompt(changed_late.root))

    assert [name for name, out in outputs.items() if day not in out] == []
    assert [name for name, out in outputs.items() if other_day in out] == []
    assert f"source(s) changed since derived ({day})" in outputs["hook claude-code"]
