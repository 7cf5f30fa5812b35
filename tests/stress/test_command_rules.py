"""The command always ends cleanly: exit codes mean one thing each (0 fresh, 1 stale or
broken, 2 could not run, 130 interrupted), with one line on stderr and no traceback,
whatever the terminal, the environment or the spelling of an option."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from provgraph import Memory
from provgraph.cli import cli

from .helpers import assert_clean, derived, provgraph, write


def _stale_folder(root: Path, name: str = "メモ.md") -> Path:
    write(root, "facts.md", "v1\n")
    write(root, name, derived("facts.md"))
    assert_clean(provgraph("status", root), 0)
    write(root, "facts.md", "v2\n")
    return root


def test_a_terminal_that_cannot_show_a_name_gets_it_escaped_not_a_traceback(tmp_path: Path) -> None:
    root = _stale_folder(tmp_path / "memory")
    done = provgraph("status", root, PYTHONIOENCODING="latin-1")
    assert_clean(done, 0)
    assert "\\u30e1\\u30e2.md" in done.stdout and "1 stale" in done.stdout
    check = provgraph("check", root, PYTHONIOENCODING="ascii")
    assert_clean(check, 1)
    assert "\\u30e1\\u30e2.md" in check.stdout


def test_an_interrupted_command_exits_130_with_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    root = _stale_folder(tmp_path / "memory")

    def interrupted(*args: object, **options: object) -> None:
        raise KeyboardInterrupt

    for command in (("status", str(root)), ("check", str(root)), ("stamp", "--root", str(root), "メモ.md")):
        monkeypatch.setattr(Memory, "refresh", interrupted)
        monkeypatch.setattr(Memory, "stamp", interrupted)
        assert cli(*command) == 130
        captured = capsys.readouterr()
        assert captured.out == "" and captured.err == "provgraph: interrupted\n"


def test_exit_codes_mean_one_thing_each(tmp_path: Path) -> None:
    """0 for a fresh folder, 1 for a stale one (``check``), 2 for a command that could not
    run (a missing folder, a bad option): never a traceback, never one code for two meanings."""
    root = tmp_path / "memory"
    write(root, "facts.md", "v1\n")
    write(root, "profile.md", derived("facts.md"))
    assert_clean(provgraph("check", root), 0)
    write(root, "facts.md", "v2\n")
    assert_clean(provgraph("check", root), 1)
    assert_clean(provgraph("status", root), 0)
    missing = provgraph("status", tmp_path / "nowhere")
    assert_clean(missing, 2)
    assert missing.stderr.count("\n") == 1
    bad = provgraph("status", "--no-such-option", root)
    assert_clean(bad, 2)
    assert bad.stderr.count("\n") == 1


def test_a_state_folder_named_with_a_tilde_is_the_one_the_printed_commands_name(tmp_path: Path) -> None:
    """``--state=~/pgs`` (no shell expands a tilde after ``=``) is ``$HOME/pgs``, as the
    commands provgraph prints for the agent say: stamps and checks use one lock."""
    home, root = tmp_path / "home", tmp_path / "memory"
    home.mkdir()
    write(root, "facts.md", "v1\n")
    write(root, "profile.md", derived("facts.md"))
    done = provgraph("status", "--json", "--state=~/pgs", root, cwd=tmp_path, HOME=str(home))
    assert_clean(done, 0)
    assert (home / "pgs" / "provgraph.lock").is_file()
    assert not (tmp_path / "~").exists()
    assert json.loads(done.stdout)["counts"]["derived"] == 1
    write(root, "facts.md", "v2\n")
    prompt = provgraph("prompt", "--state=~/pgs", "--max-lines", "0", root, HOME=str(home))
    assert_clean(prompt, 0)
    assert f"--state {home / 'pgs'}" in prompt.stdout
