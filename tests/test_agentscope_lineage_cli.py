"""``provgraph lineage`` says what the agent's ``memory_lineage`` tool says, line for line.

The tool is the real AgentScope one, called through its toolkit as an agent
calls it; the command is the installed script, on the same folder, at the
same pinned clock.  Where the tool names the agent's tools, the command names
the ``provgraph`` commands a person runs; everything else is word for word.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import test_agentscope
from extras import needs
from test_agentscope import CHECKED, OLD, write

pytestmark = needs("agentscope")


@pytest.fixture(autouse=True, scope="module")
def agentscope_loaded() -> None:
    """Imported when this file's first test runs, not when it is collected (``extras.py``)."""
    global lineage, LINEAGE_MAX_CHARS, ProvenanceMiddleware
    from scripted_agent import lineage

    from provgraph.integrations.agentscope import LINEAGE_MAX_CHARS, ProvenanceMiddleware


workdir = test_agentscope.workdir
family = test_agentscope.family
"""The fixtures of the tool's own tests: a derived profile, its sources, a digest and a drinks note."""


def command_answer(run, workdir: Path, path: str, *options: str) -> str:
    """The command's answer, its commands put back into the tool's words."""
    root = workdir / "Memory"
    code, out, err = run("lineage", path, "--root", root, *options, cwd=workdir, now=CHECKED)
    assert (code, err) == (0, "")
    assert out.endswith("\n") and "record_memory_rederivation" not in out and "list_stale_derived" not in out
    return (
        out[:-1]
        .replace(
            f"record it with `provgraph stamp --root {root} FILE`", "call `record_memory_rederivation` with its path"
        )
        .replace(f"run `provgraph status {root}`", "call `list_stale_derived_memories`")
    )


@pytest.mark.parametrize(
    "path",
    ["user-facts.md", "preferences.md", "profile.md", "digest.md", "drinks.md", "MEMORY.md", "no-such-file.md"],
)
def test_the_lineage_command_prints_what_the_lineage_tool_answers(
    family: ProvenanceMiddleware, workdir: Path, run, path: str
) -> None:
    assert command_answer(run, workdir, path) == lineage(family, path)


def test_the_lineage_command_and_tool_agree_on_a_cycle_and_a_missing_source(workdir: Path, run) -> None:
    folder = workdir / "Memory"
    write(folder, "draft.md", "---\nderived_from: outline.md\n---\ndraft\n", OLD)
    write(folder, "outline.md", "---\nderived_from: draft.md, gone.md\n---\noutline\n", OLD)
    provenance = ProvenanceMiddleware(workdir=str(workdir))

    answers = {path: lineage(provenance, path) for path in ("draft.md", "outline.md", "gone.md")}

    assert "In a cycle (files derived from each other): draft.md -> outline.md -> draft.md" in answers["draft.md"]
    assert answers["gone.md"].startswith("gone.md: missing")
    for path, answer in answers.items():
        assert command_answer(run, workdir, path) == answer


def test_the_lineage_command_keeps_the_tools_bounds(workdir: Path, run, monkeypatch: pytest.MonkeyPatch) -> None:
    few, many = test_agentscope.sixty_one_stale_descendants(workdir, monkeypatch)

    short, long = lineage(few, "user-facts.md"), lineage(many, "user-facts.md")

    assert "- … and 56 more derived files (56 stale)" in short
    assert command_answer(run, workdir, "user-facts.md", "--max-lines", "5") == short
    assert len(long) <= LINEAGE_MAX_CHARS
    assert "more derived files" in long.splitlines()[-2]  # the characters ran out first
    assert command_answer(run, workdir, "user-facts.md") == long


def test_a_bad_clock_reads_the_same_in_the_command_and_the_tool(
    family: ProvenanceMiddleware, workdir: Path, run, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PROVGRAPH_NOW", "next tuesday")

    answer = lineage(family, "profile.md")
    code, out, err = run("lineage", "profile.md", "--root", workdir / "Memory", cwd=workdir, now="next tuesday")

    sentence = "PROVGRAPH_NOW='next tuesday' is not an ISO 8601 date or timestamp"
    assert answer == f"Could not check the lineage of profile.md: {sentence}"
    assert (code, out, err) == (2, "", f"provgraph: error: {sentence}\n")
