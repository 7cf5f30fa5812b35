"""``provgraph lineage FILE``: one file's status and sources, and what derives from it, end to end."""

from __future__ import annotations

import json
import re
import shlex
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from provgraph.clock import BadClock, pinned_now
from provgraph.demo import A_WEEK_LATER, DAY_ONE, build_demo_memory
from provgraph.render import LINEAGE_MAX_CHARS

T0 = datetime(2024, 3, 1, 12, 0, tzinfo=UTC)
LATER = T0 + timedelta(days=2)
STALE = "stale, source(s) changed since derived (2024-03-02)"


@pytest.fixture
def chain(memory, run):
    """facts.md -> profile.md -> digest.md, prefs.md -> drinks.md; adopted at T0, facts.md edited a day later."""
    memory.write("MEMORY.md", "index\n")
    memory.write("facts.md", "v1\n")
    memory.write("prefs.md", "tea\n")
    memory.write("profile.md", derived_from="facts.md, prefs.md")
    memory.write("digest.md", derived_from="profile.md")
    memory.write("drinks.md", derived_from="prefs.md")
    assert run("status", cwd=memory.root, now=T0)[0] == 0
    memory.write("facts.md", "v2\n", mtime=T0 + timedelta(days=1))
    return memory


def snapshot(memory) -> dict[str, bytes]:
    return {
        path.relative_to(memory.root).as_posix(): path.read_bytes()
        for path in sorted(memory.root.rglob("*"))
        if path.is_file() and ".provgraph" not in path.parts and path.name != "provgraph.lock"
    }


def test_lineage_of_a_source_lists_what_derives_from_it_stale_first(chain, run) -> None:
    before = snapshot(chain)

    code, out, err = run("lineage", "prefs.md", cwd=chain.root, now=LATER)

    assert (code, err) == (0, "")
    assert out.splitlines() == [
        "prefs.md: a source; it is not derived from other memory files",
        "3 memory files are derived from it, directly or through others; 2 stale:",
        f"- profile.md: {STALE}; chain: prefs.md -> profile.md",
        f"- digest.md: {STALE}; chain: prefs.md -> profile.md -> digest.md",
        "- drinks.md: fresh; chain: prefs.md -> drinks.md",
        "After you update a stale file from its sources, or check that it still holds, "
        f"record it with `provgraph stamp --root {chain.root} FILE`.",
    ]
    assert snapshot(chain) == before


def test_the_lineage_command_tells_a_person_the_command_to_run_not_the_agents_tool(chain, run, tmp_path) -> None:
    """The command line names ``provgraph`` commands, which work as printed; the tools are the agent's."""
    out = run("lineage", "--root", chain.root, "facts.md", "--max-lines", "1", cwd=tmp_path, now=LATER)[1]
    assert "record_memory_rederivation" not in out and "list_stale_derived_memories" not in out
    assert f"; run `provgraph status {chain.root}` to list every stale file." in out
    [command] = re.findall(r"`(provgraph stamp [^`]*)`", out)
    code, stamped, _ = run(*shlex.split(command.replace("FILE", "profile.md"))[1:], cwd=tmp_path, now=LATER)
    assert (code, stamped.splitlines()[0]) == (0, "stamped profile.md: re-derived from 2 sources as they are now")


def test_lineage_of_a_derived_file_gives_its_status_and_sources(chain, run, tmp_path) -> None:
    code, out, _ = run("lineage", "--root", chain.root, "digest.md", cwd=tmp_path, now=LATER)

    assert code == 0
    assert out.splitlines()[:3] == [
        "digest.md: stale: source(s) changed since derived (2024-03-02): via profile.md <- facts.md",
        "Sources: profile.md (unchanged, itself stale)",
        "No memory file is derived from it.",
    ]


def test_lineage_json_gives_the_same_facts_as_data(chain, run) -> None:
    code, out, _ = run("lineage", "prefs.md", "--json", cwd=chain.root, now=LATER)
    document = json.loads(out)
    profile = json.loads(run("lineage", "profile.md", "--json", cwd=chain.root, now=LATER)[1])
    missing = json.loads(run("lineage", "nowhere.md", "--json", cwd=chain.root, now=LATER)[1])

    assert code == 0
    assert (document["path"], document["status"], document["exists"]) == ("prefs.md", "source", True)
    assert document["derived"] == [
        {"path": "profile.md", "status": "stale", "since": "2024-03-02", "chain": ["prefs.md", "profile.md"]},
        {
            "path": "digest.md",
            "status": "stale",
            "since": "2024-03-02",
            "chain": ["prefs.md", "profile.md", "digest.md"],
        },
        {"path": "drinks.md", "status": "fresh", "since": None, "chain": ["prefs.md", "drinks.md"]},
    ]
    assert [(source["source"], source["status"]) for source in profile["sources"]] == [
        ("facts.md", "changed"),
        ("prefs.md", "clean"),
    ]
    assert (missing["status"], missing["exists"], missing["derived"]) == (None, False, [])


def test_lineage_is_bounded_in_lines_and_characters(chain, run) -> None:
    for number in range(40):
        chain.write(f"notes/{'n' * 200}-{number:02}.md", derived_from="../facts.md")
    assert run("status", cwd=chain.root, now=LATER)[0] == 0
    chain.write("facts.md", "v3\n")

    few = run("lineage", "facts.md", "--max-lines", "3", cwd=chain.root, now=LATER)[1].splitlines()
    many = run("lineage", "facts.md", cwd=chain.root, now=LATER)[1]
    every = json.loads(run("lineage", "facts.md", "--json", cwd=chain.root, now=LATER)[1])["derived"]

    assert sum(line.startswith("- ") and "chain:" in line for line in few) == 3
    assert "- … and 39 more derived files (39 stale); run `provgraph status " in few[-2]
    assert len(many) <= LINEAGE_MAX_CHARS
    assert sum(line.startswith("- ") and "chain:" in line for line in many.splitlines()) < 20
    assert len(every) == 42  # data is not cut: every derived file


def test_why_and_lineage_word_a_file_outside_any_lineage_alike(chain, run) -> None:
    for path in ("MEMORY.md", "nowhere.md"):
        why, lineage = (
            run("why", path, cwd=chain.root, now=LATER)[1],
            run("lineage", path, cwd=chain.root, now=LATER)[1],
        )
        assert why == lineage and why.count("\n") == 1


def test_lineage_answers_in_one_line_for_a_file_outside_any_derivation(chain, run) -> None:
    assert run("lineage", "MEMORY.md", cwd=chain.root, now=LATER)[:2] == (
        0,
        "MEMORY.md takes no part in any derivation: it declares no sources and no memory file is derived from it.\n",
    )
    assert run("lineage", "nowhere.md", cwd=chain.root, now=LATER)[:2] == (
        0,
        "nowhere.md does not exist in the memory folder, and no memory file names it as a source.\n",
    )


def test_lineage_of_a_file_outside_the_root_is_a_one_line_error(chain, run, tmp_path) -> None:
    code, out, err = run("lineage", "--root", chain.root, "../elsewhere.md", cwd=tmp_path, now=LATER)

    assert (code, out) == (2, "")
    assert err.startswith("provgraph: error: ") and err.count("\n") == 1


def test_a_bad_clock_is_a_one_line_error_in_every_command(chain, run) -> None:
    for command in (["status"], ["lineage", "facts.md"], ["why", "profile.md"], ["prompt"]):
        code, out, err = run(*command, cwd=chain.root, now="next tuesday")
        assert (code, out) == (2, "")
        assert err == "provgraph: error: PROVGRAPH_NOW='next tuesday' is not an ISO 8601 date or timestamp\n"


def test_the_clock_reads_an_offset_and_takes_a_bare_time_as_local(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PROVGRAPH_NOW", "2024-03-01T12:00:00+02:00")
    assert pinned_now() == datetime(2024, 3, 1, 10, 0, tzinfo=UTC)
    monkeypatch.setenv("PROVGRAPH_NOW", "2024-03-01T12:00:00")
    assert pinned_now() == datetime(2024, 3, 1, 12, 0).astimezone()
    monkeypatch.setenv("PROVGRAPH_NOW", "")
    assert pinned_now() is None
    monkeypatch.setenv("PROVGRAPH_NOW", "soon")
    with pytest.raises(BadClock) as raised:
        pinned_now()
    assert raised.value.value == "soon"


def test_the_documented_lineage_example_is_what_the_command_prints(tmp_path, run) -> None:
    page = (Path(__file__).resolve().parent.parent / "docs" / "command-line.md").read_text(encoding="utf-8")
    example = re.search(r"```text\n\$ provgraph lineage user-facts.md\n(.*?)```", page, re.S)
    root = tmp_path / "Memory"
    root.mkdir()
    build_demo_memory(root)
    assert run("status", cwd=root, now=DAY_ONE)[0] == 0
    facts = root / "user-facts.md"
    facts.write_text(facts.read_text().replace("Lives in Lyon", "Moved to Paris in November"), encoding="utf-8")

    code, out, _ = run("lineage", "user-facts.md", cwd=root, now=A_WEEK_LATER)

    assert example is not None
    assert (code, out.replace(str(root), "/home/me/Memory")) == (0, example.group(1))
