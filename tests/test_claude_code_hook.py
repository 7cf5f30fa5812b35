"""``provgraph hook claude-code`` end to end: the installed command, fed the JSON Claude Code sends.

Each event is written as Claude Code's hooks reference documents it
(https://code.claude.com/docs/en/hooks): ``session_id``, ``transcript_path``,
``cwd``, ``hook_event_name``, and for tool events ``tool_name``,
``tool_input`` (``file_path`` for Read, Write, Edit and MultiEdit) and
``tool_response``.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from conftest import PROVGRAPH, launch

from provgraph.integrations.claude_code import CONTEXT_LIMIT, SessionReads, installed_program
from provgraph.paths import stamp_command

T0 = datetime(2024, 3, 1, 12, 0, tzinfo=UTC)
PAGE = Path(__file__).resolve().parent.parent / "docs" / "claude-code.md"


def at(days: float) -> str:
    return (T0 + timedelta(days=days)).isoformat()


def hook(root: Path | str, event: dict | str | None, *args: str, now: str = at(1), cwd: Path | str = "/"):
    """Run the hook as Claude Code does: the event as JSON on stdin. Returns (code, stdout, stderr)."""
    data = event if isinstance(event, str) or event is None else json.dumps(event)
    environment = {key: value for key, value in os.environ.items() if key != "PROVGRAPH_NOW"}
    done = launch(
        ["hook", "claude-code", os.fspath(root), *args],
        input=(data or "").encode(),
        cwd=cwd,
        env={**environment, "PROVGRAPH_NOW": now},
    )
    return done.code, done.stdout.decode(), done.stderr.decode()


def event(name: str, session: str = "s-1", **fields) -> dict:
    return {
        "session_id": session,
        "transcript_path": f"/home/me/.claude/projects/app/{session}.jsonl",
        "cwd": "/home/me/src/app",
        "permission_mode": "default",
        "hook_event_name": name,
        **fields,
    }


def tool_use(tool: str, file: Path, session: str = "s-1", **tool_input) -> dict:
    return event(
        "PostToolUse",
        session,
        tool_name=tool,
        tool_input={"file_path": str(file), **tool_input},
        tool_response={"filePath": str(file), "success": True},
        tool_use_id="toolu_01ABC",
    )


def context(out: str, name: str = "PostToolUse") -> str:
    output = json.loads(out)["hookSpecificOutput"]
    assert output["hookEventName"] == name
    return output["additionalContext"]


def files_of(folder: Path) -> dict[str, bytes]:
    return {
        path.relative_to(folder).as_posix(): path.read_bytes()
        for path in sorted(folder.rglob("*"))
        if path.is_file() and ".provgraph" not in path.parts
    }


@pytest.fixture
def simple(memory, run):
    """facts.md -> profile.md -> digest.md under a MEMORY.md root, adopted at T0."""
    memory.write("MEMORY.md", "index\n")
    memory.write("facts.md", "v1\n")
    memory.write("prefs.md", "tea\n")
    memory.write("profile.md", "Profile.\n", derived_from="facts.md")
    memory.write("digest.md", "Digest.\n", derived_from="profile.md")
    assert run("status", memory.root, cwd="/", now=at(0))[0] == 0
    return memory


# -- SessionStart --------------------------------------------------------------------------------


def test_session_start_gives_the_block_with_or_without_its_event(simple) -> None:
    simple.write("facts.md", "v2\n")
    start = event("SessionStart", source="startup")
    code, out, err = hook(simple.root, start)
    assert (code, err) == (0, "")
    assert "profile.md: source(s) changed since derived" in context(out, "SessionStart")
    assert hook(simple.root, None) == (0, out, "")


# -- PostToolUse: writes -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("tool", "tool_input"),
    [
        ("Write", {"content": "v2\n"}),
        ("Edit", {"old_string": "v1", "new_string": "v2", "replace_all": False}),
        ("MultiEdit", {"edits": [{"old_string": "v1", "new_string": "v2"}]}),
    ],
)
def test_a_write_of_a_source_tells_what_rests_on_its_old_content(simple, tool, tool_input) -> None:
    simple.write("facts.md", "v2\n")
    code, out, err = hook(simple.root, tool_use(tool, simple.path("facts.md"), **tool_input))
    assert (code, err) == (0, "")
    lines = context(out).splitlines()
    assert lines[1:4] == [
        "- 2 memory files derived from facts.md now rest on its old content:",
        "  - profile.md",
        "  - digest.md, via facts.md -> profile.md -> digest.md",
    ]
    assert f"record it with `provgraph stamp --root {simple.root} FILE`" in lines[4]


def test_a_declaration_is_adopted_by_the_write_that_adds_it(simple) -> None:
    simple.write("summary.md", "Summary.\n", derived_from="prefs.md")
    assert hook(simple.root, tool_use("Write", simple.path("summary.md")), now=at(1)) == (0, "", "")
    simple.write("prefs.md", "coffee\n")
    code, out, _ = hook(simple.root, tool_use("Edit", simple.path("prefs.md")), now=at(1.1))
    assert "- 1 memory file derived from prefs.md now rests on its old content:" in context(out)


def test_reads_of_a_session_turn_into_a_suggested_declaration_never_written(simple, tmp_path) -> None:
    for name in ("facts.md", "prefs.md", "MEMORY.md"):
        assert hook(simple.root, tool_use("Read", simple.path(name))) == (0, "", "")
    simple.write("summary.md", "The user, in short.\n")
    before = files_of(simple.root)

    code, out, err = hook(simple.root, tool_use("Write", simple.path("summary.md")))
    other = hook(simple.root, tool_use("Write", simple.path("summary.md"), session="s-2"))

    assert (code, err) == (0, "")
    assert "  derived_from: facts.md, prefs.md" in context(out).splitlines()
    assert other == (0, "", "")  # another session read nothing
    assert files_of(simple.root) == before
    assert (simple.root / ".provgraph" / "claude-code-reads.json").is_file()


def test_with_state_elsewhere_the_reads_live_in_that_folder_and_the_root_is_untouched(memory, tmp_path) -> None:
    memory.write("facts.md", "v1\n")
    state = tmp_path / "elsewhere"
    hook(memory.root, tool_use("Read", memory.path("facts.md")), "--state", str(state))
    memory.write("summary.md", "Summary.\n")
    code, out, _ = hook(memory.root, tool_use("Write", memory.path("summary.md")), "--state", str(state))
    assert "  derived_from: facts.md" in context(out).splitlines()
    assert (tmp_path / "elsewhere" / "claude-code-reads.json").is_file()
    assert not (memory.root / ".provgraph").exists()


def test_the_printed_stamp_command_works_pasted_in_a_shell_from_anywhere(memory, run, tmp_path) -> None:
    root = tmp_path / "my memory" / "it's"
    shutil.move(memory.root, root)
    (root / "facts.md").write_text("v1\n")
    (root / "profile.md").write_text("---\nderived_from: facts.md\n---\nProfile.\n")
    assert run("status", root, cwd="/", now=at(0))[0] == 0
    (root / "facts.md").write_text("v2\n")
    hook(root, tool_use("Read", root / "facts.md"))
    (root / "profile.md").write_text("---\nderived_from: facts.md\n---\nProfile, updated.\n")

    _, out, _ = hook(root, tool_use("Write", root / "profile.md"), now=at(2))
    [command] = re.findall(r"run `(provgraph stamp [^`]*)`", context(out))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    shell = {**os.environ, "PATH": f"{PROVGRAPH.parent}:{os.environ['PATH']}", "PROVGRAPH_NOW": at(3)}
    done = subprocess.run(["sh", "-c", command], cwd=elsewhere, env=shell, capture_output=True, text=True)

    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout.startswith("stamped profile.md: re-derived from 1 source as they are now")
    assert json.loads(run("status", "--json", root, cwd="/", now=at(4))[1])["stale"] == []


def test_the_stamp_root_takes_files_relative_to_it_and_absolute_ones(simple, run, tmp_path) -> None:
    simple.write("facts.md", "v2\n")
    code, _, err = run("stamp", "--root", simple.root, "profile.md", cwd=tmp_path, now=at(1))
    assert (code, err) == (0, "")
    code, _, err = run("stamp", "--root", simple.root, simple.path("digest.md"), cwd=tmp_path, now=at(1))
    assert (code, err) == (0, "")
    assert json.loads(run("status", "--json", simple.root, cwd="/", now=at(2))[1])["stale"] == []


# -- silence and bad input ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "sent",
    [
        tool_use("Bash", Path("/tmp/x"), command="ls"),
        event("UserPromptSubmit", prompt="hello"),
        event("Stop", stop_hook_active=False),
        tool_use("Write", Path("/etc/hosts")),
        tool_use("Write", Path("notes/plan.md")),  # relative to the event's cwd, outside the root
    ],
)
def test_anything_else_gets_no_output(simple, sent) -> None:
    simple.write("facts.md", "v2\n")
    assert hook(simple.root, sent) == (0, "", "")


def test_a_write_of_a_file_nothing_rests_on_gets_no_output(simple) -> None:
    simple.write("prefs.md", "coffee\n")
    assert hook(simple.root, tool_use("Write", simple.path("prefs.md"))) == (0, "", "")


@pytest.mark.parametrize("sent", ["{not json", "[1, 2]", '"SessionStart"', '{"tool_name": "Write"}', "\xff{"])
def test_bad_input_is_one_line_on_stderr_and_never_breaks_the_session(simple, sent) -> None:
    code, out, err = hook(simple.root, sent)
    assert (code, out) == (0, "")
    assert len(err.splitlines()) == 1 and err.startswith("provgraph: hook: ") and "Traceback" not in err


# -- bounds and settings ---------------------------------------------------------------------------


def test_additional_context_stays_under_claude_codes_limit(memory, run) -> None:
    memory.write("facts.md", "v1\n")
    for index in range(400):
        memory.write(f"derived/{'a-rather-long-summary-name-' * 6}{index:03}.md", derived_from="/facts.md")
    assert run("status", memory.root, cwd="/", now=at(0))[0] == 0
    memory.write("facts.md", "v2\n")
    _, start, _ = hook(memory.root, event("SessionStart"), "--max-lines", "1000")
    _, write, _ = hook(memory.root, tool_use("Edit", memory.path("facts.md")))
    assert 5_000 < len(context(start, "SessionStart")) <= CONTEXT_LIMIT < 10_000
    assert "… and" in context(write) and len(context(write)) <= CONTEXT_LIMIT


def test_the_settings_print_every_hook_and_match_the_readme(tmp_path) -> None:
    root = "/home/me/.claude/projects/-home-me-src-app/memory"
    done = subprocess.run(
        [os.fspath(PROVGRAPH), "hook", "claude-code", "--settings", root], capture_output=True, text=True, cwd="/"
    )
    settings = json.loads(done.stdout)
    assert settings["hooks"]["PostToolUse"][0]["matcher"] == "Read|Write|Edit|MultiEdit"
    assert settings["hooks"]["SessionStart"][0]["matcher"] == "startup|resume|clear|compact"
    command = settings["hooks"]["SessionStart"][0]["hooks"][0]["command"]
    assert command == f"{shlex.quote(str(PROVGRAPH))} hook claude-code {root}"
    shown = re.search(r"<!-- claude-code-settings -->\n```json\n(.*?)```", PAGE.read_text(), re.S)
    assert shown is not None
    assert json.loads(shown.group(1).replace("/home/me/.venv/bin/provgraph", str(PROVGRAPH))) == settings


def test_the_settings_name_the_console_script_that_printed_them(tmp_path, monkeypatch) -> None:
    script = tmp_path / "venv" / "bin" / "provgraph"
    script.parent.mkdir(parents=True)
    script.write_text("#!/bin/sh\n")
    script.chmod(0o755)
    monkeypatch.setattr(sys, "argv", [str(script), "hook"])
    assert installed_program() == (str(script),)
    monkeypatch.chdir(script.parent)
    monkeypatch.setattr(sys, "argv", ["./provgraph", "hook"])
    assert installed_program() == (str(script),)


def test_without_a_console_script_the_settings_run_this_python_with_m_provgraph(simple, tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(sys, "argv", [str(tmp_path / "provgraph" / "__main__.py"), "hook"])
    assert installed_program() == (sys.executable, "-m", "provgraph")
    done = subprocess.run(
        [sys.executable, "-m", "provgraph", "hook", "claude-code", "--settings", str(simple.root)],
        capture_output=True,
        text=True,
        cwd="/",
    )
    [command] = {group[0]["hooks"][0]["command"] for group in json.loads(done.stdout)["hooks"].values()}
    assert command == f"{shlex.quote(sys.executable)} -m provgraph hook claude-code {simple.root}"
    simple.write("facts.md", "v2\n")
    bare = {**os.environ, "PATH": "/nonexistent", "PROVGRAPH_NOW": at(1)}  # a PATH without provgraph on it
    ran = subprocess.run(
        ["/bin/sh", "-c", command],
        input=json.dumps(event("SessionStart")),
        env=bare,
        text=True,
        capture_output=True,
        cwd="/",
    )
    assert (ran.returncode, ran.stderr) == (0, "")
    assert "- profile.md: source(s) changed since derived" in context(ran.stdout, "SessionStart")


def test_the_session_reads_stay_bounded(tmp_path) -> None:
    default = SessionReads.beside(tmp_path)
    assert (default.max_sessions, default.max_reads, default.max_age) == (20, 200, 7 * 86_400)
    now = [1_000_000.0]
    reads = SessionReads.beside(tmp_path, max_sessions=3, max_reads=2, max_age=100, clock=lambda: now[0])
    for session in range(5):
        for path in ("a.md", "b.md", "c.md", "a.md"):
            reads.record(f"s{session}", path)
        now[0] += 10
    assert reads.reads("s0") == frozenset()
    assert reads.reads("s4") == {"c.md", "a.md"}
    now[0] += 200
    reads.record("s9", "z.md")
    assert reads.reads("s4") == frozenset() and reads.reads("s9") == {"z.md"}
    assert sorted(path.name for path in tmp_path.iterdir()) == [
        "claude-code-reads.json",
        "claude-code-reads.json.lock",
    ]


def test_an_unreadable_reads_file_only_costs_the_suggestions(tmp_path) -> None:
    reads = SessionReads.beside(tmp_path)
    reads.path.write_bytes(b"\x00 not json")
    assert reads.reads("s1") == frozenset()
    reads.record("s1", "a.md")
    assert reads.reads("s1") == {"a.md"}


# -- one setting for the hook and the commands it prints ----------------------------------------------

DIGEST = "---\nname: digest\n---\n# Digest\n\nderived_from:: [[profile]]\n\n## Sources\n\n- [[daily/2026-11-10]]\n"


def sh(command: str, cwd: Path, now: str, stdin: str = "") -> subprocess.CompletedProcess:
    """Run a printed command as a user pastes it: through the shell, with provgraph on the PATH."""
    environment = {**os.environ, "PATH": f"{PROVGRAPH.parent}:{os.environ['PATH']}", "PROVGRAPH_NOW": now}
    return subprocess.run(["sh", "-c", command], cwd=cwd, env=environment, input=stdin, capture_output=True, text=True)


def test_the_settings_carry_the_sources_heading_and_the_state(tmp_path) -> None:
    root = tmp_path / "my memory" / "it's"
    (root / "daily").mkdir(parents=True)
    (root / "daily/2026-11-10.md").write_text("Rotate keys every 30 days.\n")
    (root / "profile.md").write_text("A profile.\n")
    (root / "digest.md").write_text(DIGEST)
    code, out, err = hook(root, None, "--settings", "--sources-heading", "--state", "state", cwd=tmp_path)
    assert (code, err) == (0, "")
    settings = json.loads(out)
    commands = {group[0]["hooks"][0]["command"] for group in settings["hooks"].values()}
    (command,) = commands
    assert "'--sources-heading=## Sources'" in command and f"--state {tmp_path}/state" in command
    start = json.dumps(event("SessionStart"))
    assert sh(command, tmp_path / "my memory", at(0), start).returncode == 0
    (root / "daily/2026-11-10.md").write_text("Rotate keys every day.\n")

    done = sh(command, Path("/"), at(1), start)

    block = context(done.stdout, "SessionStart")
    assert "- digest.md: source(s) changed since derived (2024-03-02): daily/2026-11-10.md changed" in block
    assert (tmp_path / "state" / "provgraph.lock").is_file() and not (root / ".provgraph").exists()
    default = json.loads(hook(root, None, "--settings")[1])
    assert "--sources-heading" not in json.dumps(default) and "--state" not in json.dumps(default)
    shown = re.search(r"installs\nhooks that run `(provgraph hook claude-code ROOT [^`]*)`", PAGE.read_text())
    capped = json.loads(hook(root, None, "--settings", "--max-lines", "5")[1])
    assert capped["hooks"]["SessionStart"][0]["hooks"][0]["command"].endswith(" --max-lines 5")
    heading_only = json.loads(hook(root, None, "--settings", "--sources-heading")[1])
    installed = heading_only["hooks"]["PostToolUse"][0]["hooks"][0]["command"]
    assert shown is not None
    assert installed == shown.group(1).replace("ROOT", shlex.quote(str(root))).replace("provgraph", str(PROVGRAPH), 1)


def test_the_commands_the_hook_prints_read_the_folder_as_the_hook_does(tmp_path) -> None:
    """A pasted stamp that dropped the heading would forget the heading's sources and lose their change."""
    root = tmp_path / "memory"
    (root / "daily").mkdir(parents=True)
    (root / "daily/2026-11-10.md").write_text("Rotate keys every 30 days.\n")
    (root / "profile.md").write_text("A profile.\n")
    (root / "digest.md").write_text(DIGEST)
    assert hook(root, event("SessionStart"), "--sources-heading", now=at(0)) == (0, "", "")
    (root / "daily/2026-11-10.md").write_text("Rotate keys every day.\n")
    hook(root, tool_use("Read", root / "daily/2026-11-10.md"), "--sources-heading")
    (root / "digest.md").write_text(DIGEST.replace("# Digest", "# Digest, daily rotation"))

    _, out, _ = hook(root, tool_use("Write", root / "digest.md"), "--sources-heading", now=at(2))
    [command] = re.findall(r"run `(provgraph stamp [^`]*)`", context(out))
    assert command == f"provgraph stamp --root {root} '--sources-heading=## Sources' digest.md"
    _, start, _ = hook(root, event("SessionStart"), "--sources-heading", now=at(2))
    assert f"`provgraph stamp --root {root} '--sources-heading=## Sources' FILE`" in context(start, "SessionStart")

    assert sh(command, tmp_path, at(3)).returncode == 0
    daily = root / "daily/2026-11-10.md"
    daily.write_text("Rotate keys every hour.\n")
    _, out, _ = hook(root, tool_use("Edit", daily), "--sources-heading", now=at(4))
    assert "- 1 memory file derived from daily/2026-11-10.md now rests on its old content:" in context(out)


def test_a_write_that_extends_a_declaration_adopts_the_new_source_and_never_restamps(simple) -> None:
    simple.write("profile.md", "Profile, with tastes.\n", derived_from="facts.md, prefs.md")
    assert hook(simple.root, tool_use("Write", simple.path("profile.md")), now=at(1))[0] == 0
    simple.write("prefs.md", "coffee\n")
    code, out, _ = hook(simple.root, tool_use("Edit", simple.path("prefs.md")), now=at(1.1))
    assert "- 2 memory files derived from prefs.md now rest on its old content:" in context(out)
    simple.write("profile.md", "Profile, reworded.\n", derived_from="facts.md, prefs.md")
    _, out, _ = hook(simple.root, tool_use("Write", simple.path("profile.md")), now=at(1.2))
    assert "- 1 memory file derived from profile.md now rests on its old content:" in context(out)
    _, start, _ = hook(simple.root, event("SessionStart"), now=at(1.3))
    assert "- profile.md: source(s) changed since derived (2024-03-02): prefs.md changed" in context(
        start, "SessionStart"
    )


def test_an_edit_never_gets_a_suggestion_and_a_write_names_only_the_reads_since_the_previous_write(simple) -> None:
    """Adding a fact after reading a file is no derivation; a file written whole after reads may be."""
    hook(simple.root, tool_use("Read", simple.path("facts.md")))
    simple.write("prefs.md", "coffee\n")
    assert hook(simple.root, tool_use("Edit", simple.path("prefs.md"))) == (0, "", "")
    hook(simple.root, tool_use("Read", simple.path("digest.md")))
    simple.write("summary.md", "Summary.\n")
    _, out, _ = hook(simple.root, tool_use("Write", simple.path("summary.md")))
    assert "  derived_from: digest.md" in context(out).splitlines() and "facts.md" not in context(out)
    assert hook(simple.root, tool_use("Write", simple.path("other.md"))) == (0, "", "")  # nothing read since
    reads = SessionReads.beside(simple.root / ".provgraph")
    assert reads.reads("s-1") == frozenset() and reads.seen("s-1") >= {"facts.md", "prefs.md", "summary.md"}


def test_the_suggestion_speaks_of_the_reads_since_the_previous_write(simple) -> None:
    assert hook(simple.root, tool_use("Read", simple.path("prefs.md"))) == (0, "", "")
    simple.write("summary.md", "Summary.\n")
    _, out, _ = hook(simple.root, tool_use("Write", simple.path("summary.md")))
    assert "summary.md declares no sources, but you read prefs.md before writing it, since your previous write." in (
        context(out)
    )


@pytest.mark.parametrize("sent", [None, event("SessionStart"), "tool-use"])
def test_a_memory_folder_that_does_not_exist_yet_gets_no_output_and_is_not_created(tmp_path, sent) -> None:
    root = tmp_path / "projects" / "memory"
    if sent == "tool-use":
        sent = tool_use("Write", root / "profile.md")
    assert hook(root, sent) == (0, "", "")
    assert not (tmp_path / "projects").exists()


def test_the_documented_example_command_is_what_the_hook_prints() -> None:
    [example] = re.findall(r"`(provgraph stamp --root '/home/me/my memory'[^`]*)`", PAGE.read_text())
    assert example == stamp_command("/home/me/my memory", "profile.md")


# -- the memory index --------------------------------------------------------------------------


def test_both_hooks_name_the_index_problems_and_the_command_that_prints_the_index(memory) -> None:
    memory.write("MEMORY.md", "- [Facts](facts.md) — facts\n")
    memory.write("facts.md", "---\nname: Facts\ndescription: facts\n---\nv1\n")
    assert hook(memory.root, event("SessionStart", source="startup"), now=at(0)) == (0, "", "")
    new = memory.write("travel.md", "---\nname: Travel\ndescription: trips\n---\nRome\n")

    notes = context(hook(memory.root, tool_use("Write", new, content="x"))[1])
    block = context(hook(memory.root, event("SessionStart", source="startup"))[1], "SessionStart")

    assert "- The memory index: travel.md: orphan: no line of MEMORY.md links it." in notes.splitlines()
    assert f"provgraph index {memory.root}" in notes
    assert "- travel.md: orphan: no line of MEMORY.md links it" in block.splitlines()
    assert f"provgraph index {memory.root}" in block
    (memory.root / "MEMORY.md").write_text("- [Facts](facts.md) — facts\n- [Gone](gone.md) — x\n")
    index_notes = context(hook(memory.root, tool_use("Write", memory.root / "MEMORY.md", content="x"))[1])
    assert (
        "- The memory index: gone.md: dangling-entry: MEMORY.md line 2 links it, and it does not exist." in index_notes
    )
