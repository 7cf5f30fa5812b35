"""Changes that mean something: a source whose only change is a volatile frontmatter field
(``updated:``...), trailing whitespace or line endings marks nothing derived from it; any
other change marks every descendant.  A stamp made before the rule keeps comparing bytes,
so an upgrade makes no mark appear or disappear."""

from __future__ import annotations

import hashlib
import random
from datetime import UTC, datetime, timedelta

import orjson
from depth import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from provgraph import Memory
from provgraph.frontmatter import BOM
from provgraph.meaning import VOLATILE_FIELDS, Meaning, meaning_hash, volatile_lines
from provgraph.model import HashRule
from provgraph.store.lock import decode_lock, decode_options

NOW = datetime(2026, 11, 20, 9, 30, tzinfo=UTC)
FACTS = "---\nname: Facts\nupdated: 2026-11-01\ntags:\n  - keys\n---\nRotate keys monthly.\n"


def stale(report) -> list[str]:
    return [entry.path for entry in report.stale]


def chain(memory) -> None:
    """facts.md -> profile.md -> digest.md."""
    memory.write("facts.md", FACTS)
    memory.write("profile.md", "Profile.\n", derived_from="facts.md")
    memory.write("digest.md", "Digest.\n", derived_from="profile.md")


def later(days: int) -> datetime:
    return NOW + timedelta(days=days)


def test_editing_only_a_volatile_field_marks_nothing_before_and_after_a_restamp(memory) -> None:
    chain(memory)
    api = memory.open()
    api.refresh(now=NOW)
    for field in VOLATILE_FIELDS:
        memory.write("facts.md", FACTS.replace("updated: 2026-11-01", f"{field}: 2026-11-0{len(field) % 9}"))
        assert stale(api.refresh(now=later(1))) == []
    memory.write("facts.md", FACTS.replace("Rotate keys monthly.", "Rotate keys weekly."))
    assert stale(api.refresh(now=later(2))) == ["digest.md", "profile.md"]
    api.stamp(["profile.md"], now=later(3))
    memory.write("facts.md", FACTS.replace("Rotate keys monthly.", "Rotate keys weekly.").replace("11-01", "12-24"))
    assert stale(api.refresh(now=later(4))) == []


def test_editing_the_body_of_a_source_marks_every_descendant(memory) -> None:
    chain(memory)
    api = memory.open()
    api.refresh(now=NOW)
    memory.write("facts.md", FACTS.replace("updated: 2026-11-01", "updated: 2026-11-02").replace("monthly", "daily"))
    report = api.refresh(now=later(1))
    assert stale(report) == ["digest.md", "profile.md"]
    assert [cause.source for cause in report.entry("digest.md").causes] == ["facts.md"]


def test_line_endings_trailing_spaces_and_blank_lines_alone_mark_nothing(memory) -> None:
    chain(memory)
    api = memory.open()
    api.refresh(now=NOW)
    memory.write_bytes("facts.md", FACTS.replace("\n", "\r\n").encode())
    assert stale(api.refresh(now=later(1))) == []
    memory.write("facts.md", FACTS.replace("\n", "  \n").replace("Facts", "Facts\t") + "\n\n")
    assert stale(api.refresh(now=later(2))) == []
    memory.write("facts.md", FACTS.replace("tags:\n", "tags: []\n").replace("  - keys\n", ""))
    assert stale(api.refresh(now=later(3))) == ["digest.md", "profile.md"]


def test_a_block_value_under_a_volatile_field_goes_with_it(memory) -> None:
    memory.write("facts.md", "---\nname: Facts\nupdated:\n  - 2026-11-01\n  - 2026-11-02\n---\nTea.\n")
    memory.write("profile.md", derived_from="facts.md")
    api = memory.open()
    api.refresh(now=NOW)
    memory.write("facts.md", "---\nname: Facts\nupdated:\n- 2026-11-03\n---\nTea.\n")
    assert stale(api.refresh(now=later(1))) == []
    memory.write("facts.md", "---\nname: Facts\nupdated: 2026-11-03\nreviewed: no\n---\nTea.\n")
    assert stale(api.refresh(now=later(2))) == ["profile.md"]


def test_a_large_source_read_in_chunks_has_the_same_meaning_rule(memory) -> None:
    body = "".join(f"line {number} of the log\n" for number in range(20_000))  # past the frontmatter's limit
    memory.write("log.md", "---\nlast_accessed: 1\n---\n" + body)
    memory.write("summary.md", derived_from="log.md")
    api = memory.open()
    api.refresh(now=NOW)
    memory.write_bytes("log.md", ("---\nlast_accessed: 2\n---\n" + body).replace("\n", " \r\n").encode())
    assert stale(api.refresh(now=later(1))) == []
    memory.write("log.md", "---\nlast_accessed: 3\n---\n" + body.replace("line 19999", "line 20000"))
    assert stale(api.refresh(now=later(2))) == ["summary.md"]


def test_a_renamed_source_is_found_by_its_meaning(memory) -> None:
    chain(memory)
    api = memory.open()
    api.refresh(now=NOW)
    memory.path("facts.md").unlink()
    memory.write_bytes("notes/facts.md", FACTS.replace("11-01", "11-20").replace("\n", "\r\n").encode())
    (cause,) = api.refresh(now=later(1)).entry("profile.md").causes
    assert (cause.source, cause.kind.value, cause.moved_to) == ("facts.md", "missing", "notes/facts.md")


FORMAT_1 = (
    b"# provgraph lock 1: [derived file, source, sha256, stamped at, changed since, derived_at] per line; commit it\n"
)


def test_an_old_lock_keeps_its_marks_exactly_across_the_upgrade(memory) -> None:
    """A lock of the format written before the rule: its stamps are of bytes, and stay so."""
    memory.write("facts.md", FACTS.replace("2026-11-01", "2026-11-05"))  # only `updated:` moved since the stamp
    memory.write("notes.md", "Notes.  ")  # its meaning is not its bytes: its stamp must compare bytes
    memory.write("profile.md", derived_from="facts.md")
    memory.write("digest.md", derived_from="notes.md")
    stamped, since = NOW.timestamp(), later(1).timestamp()
    rows = [
        ["digest.md", "notes.md", hashlib.sha256(b"Notes.  ").hexdigest(), stamped, None, None],
        ["profile.md", "facts.md", hashlib.sha256(FACTS.encode()).hexdigest(), stamped, since, None],
    ]
    lock = memory.path("provgraph.lock")
    lock.write_bytes(FORMAT_1 + b"".join(orjson.dumps(row) + b"\n" for row in rows))

    report = memory.open().refresh(now=later(2))

    assert stale(report) == ["profile.md"] and report.entry("profile.md").since == since
    records = decode_lock(lock.read_bytes()).records
    assert {key: record.stamp.rule for key, record in records.items()} == {
        ("digest.md", "notes.md"): HashRule.BYTES,
        ("profile.md", "facts.md"): HashRule.BYTES,
    }
    assert [record.stamp.sha256 for _, record in sorted(records.items())] == [row[2] for row in rows]
    memory.open().stamp(["profile.md"], now=later(3))
    assert decode_lock(lock.read_bytes()).records["profile.md", "facts.md"].stamp.rule is HashRule.MEANING
    memory.write("facts.md", FACTS.replace("2026-11-01", "2026-11-09"))
    assert stale(memory.open().refresh(now=later(4))) == []


def test_a_union_of_an_old_lock_and_a_new_one_reads_as_one(memory) -> None:
    """Two clones, one before the upgrade and one after, merged line by line (git's union)."""
    memory.write("facts.md", FACTS)
    memory.write("profile.md", derived_from="facts.md")
    memory.open().refresh(now=NOW)
    lock = memory.path("provgraph.lock")
    new = lock.read_bytes()
    old = [["profile.md", "facts.md", hashlib.sha256(b"older").hexdigest(), NOW.timestamp() - 60, None, None]]
    lock.write_bytes(FORMAT_1 + b"".join(orjson.dumps(row) + b"\n" for row in old) + new)
    memory.write("facts.md", FACTS.replace("2026-11-01", "2026-11-30"))

    assert stale(memory.open().refresh(now=later(1))) == []
    (record,) = decode_lock(lock.read_bytes()).records.values()
    assert record.stamp.rule is HashRule.MEANING and lock.read_bytes() == new


def test_a_volatile_field_option_extends_the_list_and_is_recorded_in_the_lock(memory, run) -> None:
    memory.write("facts.md", "---\nreviewed: 2026-11-01\n---\nTea.\n")
    memory.write("profile.md", derived_from="facts.md")
    code, _, err = run("status", "--volatile-field", "reviewed,seen", memory.root, cwd=memory.root, now=NOW)
    assert (code, err) == (0, "")
    assert decode_options(memory.path("provgraph.lock").read_bytes()) == {"volatile_field": "reviewed,seen"}
    memory.write("facts.md", "---\nreviewed: 2026-11-02\nseen: yes\n---\nTea.\n")
    assert stale(Memory(memory.root).refresh(now=later(1))) == []
    memory.write("facts.md", "---\nreviewed: 2026-11-02\n---\nCoffee.\n")
    assert stale(Memory(memory.root).refresh(now=later(2))) == ["profile.md"]
    settings = ("hook", "claude-code", "--settings", "--volatile-field=reviewed,seen", memory.root)
    code, out, _ = run(*settings, cwd=memory.root)
    assert code == 0 and "--volatile-field=reviewed,seen" in out  # the hooks it installs read the folder so too
    code, out, err = run("status", "--volatile-field", "bad name", memory.root, cwd=memory.root, now=NOW)
    assert (code, out, err.count("\n")) == (2, "", 1) and "frontmatter key" in err


# -- the meaning itself --------------------------------------------------------------------------

_WORD = st.text("abcxyz-_ 019:#", min_size=1, max_size=8).filter(lambda word: word.strip() == word)
_KEY = st.text("abcdefgh_", min_size=1, max_size=6).filter(lambda key: key not in VOLATILE_FIELDS)
_BODY_LINE = st.text("abc xyz-#*:\t.", max_size=12).map(str.rstrip)
_FIELD = st.tuples(_KEY, _WORD).map(lambda field: f"{field[0]}: {field[1]}")
_VOLATILE = st.tuples(st.sampled_from(VOLATILE_FIELDS), _WORD, st.lists(_WORD, max_size=2)).map(
    lambda field: "\n".join([f"{field[0]}: {field[1]}", *(f"  - {item}" for item in field[2])])
)
_DOCUMENT = st.tuples(st.lists(_FIELD, max_size=4), st.lists(_BODY_LINE, min_size=1, max_size=6))


def text_of(fields: list[str], body: list[str]) -> str:
    block = "---\n" + "".join(f"{field}\n" for field in fields) + "---\n" if fields else ""
    return block + "".join(f"{line}\n" for line in body)


def meaning(data: bytes) -> str:
    """The hash a meaning stamp holds: that of the bytes when nothing is left out."""
    return meaning_hash(data, volatile_lines()) or hashlib.sha256(data).hexdigest()


def loosened(text: str, chance: random.Random) -> bytes:
    """``text`` with trailing spaces, tabs, ``\\r`` and blank lines sprinkled over it."""
    lines = [line + chance.choice(["", " ", "\t", "  \t", "\r"]) for line in text.split("\n")]
    return ("\n".join(lines) + "\n" * chance.randint(0, 3)).encode()


@settings(max_examples=examples(300), deadline=None)
@given(_DOCUMENT, st.lists(st.tuples(st.integers(0, 4), _VOLATILE), max_size=3), st.randoms(use_true_random=False))
def test_volatile_lines_and_trailing_whitespace_never_change_the_meaning(document, inserted, chance) -> None:
    fields, body = document
    plain = text_of(fields, body)
    if not fields:
        fields = ["name: x"]  # a frontmatter to put volatile fields in
        plain = text_of(fields, body)
    noisy = list(fields)
    for at, field in inserted:
        noisy.insert(min(at, len(noisy)), field)
    assert meaning(loosened(text_of(noisy, body), chance)) == meaning(plain.encode())


@settings(max_examples=examples(300), deadline=None)
@given(_DOCUMENT, st.data())
def test_any_other_change_changes_the_meaning(document, data) -> None:
    fields, body = document
    before = text_of(fields, body)
    where = data.draw(st.sampled_from(["field", "body"] if fields else ["body"]))
    if where == "field":
        at = data.draw(st.integers(0, len(fields) - 1))
        changed = text_of([*fields[:at], fields[at] + "z", *fields[at + 1 :]], body)
    else:
        at = data.draw(st.integers(0, len(body)))
        changed = text_of(fields, [*body[:at], data.draw(_WORD), *body[at:]])
    assert meaning(changed.encode()) != meaning(before.encode())


_PIECES = st.lists(st.sampled_from([b"---", b"\n", b"\r", b" ", b"\t", b"updated: 1", b"a: b", b"- x", b"  y", BOM]))


@settings(max_examples=examples(400), deadline=None)
@given(
    st.one_of(st.tuples(_DOCUMENT, st.randoms(use_true_random=False)), _PIECES.map(b"".join)),
    st.lists(st.integers(1, 40), min_size=1, max_size=30),
)
def test_the_meaning_of_a_file_read_in_chunks_is_that_of_the_whole_file(made, sizes) -> None:
    data = made if isinstance(made, bytes) else loosened(text_of(*made[0]), made[1])
    streamed = Meaning(volatile_lines())
    at = 0
    for size in sizes:
        streamed.update(data[at : at + size])
        at += size
    streamed.update(data[at:])
    whole = hashlib.sha256(data).hexdigest()
    assert (streamed.hexdigest(whole) or whole) == meaning(data)
