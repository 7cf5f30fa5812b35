"""The options that change what is read are set once per folder: the lock records them,
every later run reads the folder as the lock says, and a run asking for other options
is refused rather than dropping a stamp."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from provgraph import Memory, OptionsDiffer, StateError
from provgraph.model import Stamp
from provgraph.store.lock import Record, decode_lock, decode_options, decode_stamps, encode_lock

NOW = datetime(2026, 11, 20, 9, 30, tzinfo=UTC)
LATER = datetime(2026, 11, 21, 9, 30, tzinfo=UTC)
HEADING = "## Sources"


def digest_folder(memory) -> None:
    memory.write("daily.md", "Rotate keys monthly.\n")
    memory.write("digest.md", "# Digest\n\n## Sources\n\n- [[daily]]\n")


def stale(report) -> list[str]:
    return [entry.path for entry in report.stale]


def test_a_run_without_options_reads_the_folder_as_the_lock_says(memory) -> None:
    digest_folder(memory)
    Memory(memory.root, sources_heading=HEADING).refresh(now=NOW)
    assert decode_options((memory.root / "provgraph.lock").read_bytes()) == {"sources_heading": HEADING}
    memory.write("daily.md", "Rotate keys daily.\n")
    plain = Memory(memory.root)
    assert stale(plain.refresh(now=LATER)) == ["digest.md"]
    assert plain.sources_heading == HEADING
    assert stale(Memory(memory.root, sources_heading=HEADING).refresh(now=LATER)) == ["digest.md"]


def test_a_run_with_other_options_never_drops_a_stamp_silently(memory) -> None:
    digest_folder(memory)
    Memory(memory.root, sources_heading=HEADING).refresh(now=NOW)
    lock = (memory.root / "provgraph.lock").read_bytes()
    with pytest.raises(OptionsDiffer) as refused:
        Memory(memory.root, sources_heading="## Notes").refresh(now=LATER)
    assert (refused.value.recorded, refused.value.asked) == (
        {"sources_heading": HEADING},
        {"sources_heading": "## Notes"},
    )
    assert (memory.root / "provgraph.lock").read_bytes() == lock
    memory.write("daily.md", "Rotate keys daily.\n")
    assert stale(Memory(memory.root).refresh(now=LATER)) == ["digest.md"]


def test_the_command_line_refuses_other_options_in_one_line_naming_the_lock_s(memory, run) -> None:
    digest_folder(memory)
    assert run("status", "--sources-heading", cwd=memory.root)[0] == 0
    code, out, err = run("status", "--sources-heading=## Notes", cwd=memory.root)
    assert (code, out, err.count("\n")) == (2, "", 1)
    assert "--sources-heading='## Sources'" in err


def test_a_lock_without_an_options_line_records_none_until_a_run_asks_for_one(memory) -> None:
    digest_folder(memory)
    memory.write("profile.md", derived_from="daily.md")
    Memory(memory.root).refresh(now=NOW)
    lock = memory.root / "provgraph.lock"
    assert decode_options(lock.read_bytes()) == {} and b"# options:" not in lock.read_bytes()
    Memory(memory.root, sources_heading=HEADING).refresh(now=NOW)
    assert decode_options(lock.read_bytes()) == {"sources_heading": HEADING}
    assert {edge for edge in decode_lock(lock.read_bytes()).records} == {
        ("digest.md", "daily.md"),
        ("profile.md", "daily.md"),
    }


def test_an_option_this_provgraph_does_not_know_is_refused_not_dropped(memory) -> None:
    digest_folder(memory)
    Memory(memory.root, sources_heading=HEADING).refresh(now=NOW)
    lock = memory.root / "provgraph.lock"
    data = lock.read_bytes().replace(b'{"sources_heading"', b'{"future_option":"on","sources_heading"')
    lock.write_bytes(data)
    with pytest.raises(StateError, match="future_option"):
        Memory(memory.root).refresh(now=LATER)
    assert lock.read_bytes() == data


def test_the_first_lock_records_the_options_whichever_path_writes_it(memory, tmp_path) -> None:
    memory.write("daily.md", "Rotate keys monthly.\n")
    memory.write("digest.md", "Nothing derived yet.\n", mtime=NOW.timestamp() - 3600)
    with_heading = Memory(memory.root, state=tmp_path / "state", sources_heading=HEADING)
    with_heading.refresh(now=NOW)
    memory.write("digest.md", "# Digest\n\n## Sources\n\n- [[daily]]\n")  # a small change: a patch
    assert with_heading.refresh(now=NOW).derived == ("digest.md",)
    assert decode_options((tmp_path / "state" / "provgraph.lock").read_bytes()) == {"sources_heading": HEADING}


# -- a folder where nothing is derived -------------------------------------------------------


def test_a_folder_where_nothing_is_derived_gets_nothing_written_in_it(memory, run) -> None:
    memory.write("MEMORY.md", "# Memory\nFacts live in facts.md.\n")
    memory.write("facts.md", "Lives in Lyon.\n")
    before = sorted(path.name for path in memory.root.iterdir())
    for command in ("status", "check", "prompt", "graph"):
        assert run(command, cwd=memory.root)[0] == 0, command
    lived = Memory(memory.root)
    assert lived.refresh(now=NOW).file_count == 2 and lived.refresh(now=NOW).derived == ()
    assert sorted(path.name for path in memory.root.iterdir()) == before
    memory.write("profile.md", derived_from="facts.md")
    assert lived.refresh(now=NOW).derived == ("profile.md",)
    assert (memory.root / "provgraph.lock").is_file() and (memory.root / ".provgraph").is_dir()
    memory.write("facts.md", "Lives in Paris.\n")
    assert stale(Memory(memory.root).refresh(now=LATER)) == ["profile.md"]


# -- the options line in the lock ------------------------------------------------------------


def test_the_options_line_reads_back_in_a_clean_lock_and_in_a_merged_one() -> None:
    stamp = Stamp("a" * 64, 1_700_000_000.0, None)
    records = [Record("digest.md", "daily.md", stamp, None), Record("week.md", "digest.md", stamp, None)]
    data = encode_lock(records, {"sources_heading": HEADING})
    assert data.split(b"\n")[1] == b'# options: {"sources_heading":"## Sources"}'
    assert decode_options(data) == {"sources_heading": HEADING}
    assert decode_stamps(data) is not None and set(decode_lock(data).records) == {
        ("digest.md", "daily.md"),
        ("week.md", "digest.md"),
    }
    lines = data.split(b"\n")
    conflicted = b"\n".join([*lines[:2], b"<<<<<<< ours", lines[2], b"=======", lines[3], b">>>>>>> theirs", b""])
    read = decode_lock(conflicted)
    assert (len(read.records), read.damaged) == (2, 0)


def test_a_lock_of_a_newer_provgraph_is_refused_for_its_version_not_its_options(memory, run) -> None:
    digest_folder(memory)
    Memory(memory.root, sources_heading=HEADING).refresh(now=NOW)
    lock = memory.root / "provgraph.lock"
    data = lock.read_bytes().replace(b"# provgraph lock 2:", b"# provgraph lock 3:")
    lock.write_bytes(data.replace(b'{"sources_heading"', b'{"future_option":"on","sources_heading"'))
    code, _, err = run("status", cwd=memory.root)
    assert code == 2 and "newer provgraph" in err and "future_option" not in err
