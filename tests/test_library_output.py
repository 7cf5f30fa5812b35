"""A library does not print: its warnings go to the ``provgraph`` logger; the command shows them."""

from __future__ import annotations

import gc

import pytest

import provgraph.cli
from provgraph import Memory
from provgraph.log import log_warning


@pytest.fixture
def damaged(memory, clock):
    """A memory root whose lock was overwritten with bytes that are not a lock."""
    memory.write("MEMORY.md", "index\n")
    memory.write("facts.md", "v1\n")
    memory.write("profile.md", derived_from="facts.md")
    Memory(memory.root).refresh(now=clock.now)
    (memory.root / "provgraph.lock").write_bytes(b"{not a lock at all")
    return memory


def test_the_library_writes_nothing_on_stderr_and_logs_the_warning(damaged, clock, capfd, logged):
    capfd.readouterr()
    Memory(damaged.root).refresh(now=clock.advance(days=1))
    (warning,) = logged.take()
    assert "could not be read" in warning and "provgraph.lock" in warning
    assert capfd.readouterr().err == ""


def test_a_caller_that_passes_warn_gets_the_warning_instead(damaged, clock, logged):
    heard = []
    Memory(damaged.root, warn=heard.append).refresh(now=clock.advance(days=1))
    assert len(heard) == 1 and "could not be read" in heard[0]
    assert logged.take() == []


def test_the_command_shows_the_same_warning_as_one_line(damaged, run):
    code, _, err = run("status", damaged.root, cwd=damaged.root)
    assert code == 0
    (line,) = err.splitlines()
    assert line.startswith(f"provgraph: warning: {damaged.root / 'provgraph.lock'} could not be read")


def test_the_console_script_shows_logged_warnings_as_lines_and_only_while_it_runs(monkeypatch, capsys):
    def command(*args):
        log_warning("the lock was set aside")
        return 0

    monkeypatch.setattr(provgraph.cli, "cli", command)
    monkeypatch.setattr("sys.argv", ["provgraph", "status"])
    with pytest.raises(SystemExit) as exit_:
        provgraph.cli.main()
    assert exit_.value.code == 0
    assert capsys.readouterr().err == "provgraph: warning: the lock was set aside\n"
    log_warning("after the command")
    assert capsys.readouterr().err == ""


def test_the_library_leaves_the_garbage_collector_alone(memory, clock):
    memory.write("facts.md", "v1\n")
    memory.write("profile.md", derived_from="facts.md")
    seen = []

    def walk_and_look(original):
        def walk():
            seen.append(gc.isenabled())
            return original()

        return walk

    api = Memory(memory.root)
    api.files.walk = walk_and_look(api.files.walk)
    assert gc.isenabled()
    api.refresh(now=clock.now)
    assert seen == [True]


def test_the_watch_gives_back_its_last_report_as_of_now_with_every_other_field_kept(memory, clock):
    """What the watch answers an unchanged folder with is the last report with only its
    time moved: ``dataclasses.replace``, spelt out field by field for speed."""
    from dataclasses import fields, replace
    from datetime import timedelta

    from provgraph.watch import _as_of

    memory.write("facts.md", "v1\n")
    memory.write("profile.md", derived_from=["facts.md", "missing.md"])
    memory.write("a.md", derived_from="b.md")
    memory.write("b.md", derived_from="a.md")
    api = Memory(memory.root)
    api.refresh(now=clock.now)
    memory.write("facts.md", "v2\n")
    report = api.refresh(now=clock.now)
    assert report.stale and report.cycles and report.edges  # every field holds something
    later = report.scanned_at + timedelta(hours=1)
    assert _as_of(report, later) == replace(report, scanned_at=later)
    kept = [field.name for field in fields(report) if field.name != "scanned_at"]
    assert all(getattr(_as_of(report, later), name) is getattr(report, name) for name in kept)
