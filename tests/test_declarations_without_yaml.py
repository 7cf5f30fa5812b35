"""Declarations in the common forms are read without YAML, and never differently.

The reader without YAML takes the forms that memory files write every day
(comma lists, ``[a, b]`` lists, ``- a`` lists, Markdown links, root-relative
entries, quoted strings, wiki links, ``metadata:`` blocks, descriptions with an
unquoted colon) and hands anything else to the YAML path.  Whatever it takes,
it must read exactly as the YAML path does: the same entries, the same
``derived_at``, the same problem with the same words.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import PROVGRAPH, importing
from depth import examples
from hypothesis import example, given, settings
from hypothesis import strategies as st

from provgraph import declarations
from provgraph import frontmatter as reader
from provgraph.declarations import read_declaration

# -- what a frontmatter may hold ------------------------------------------------------------

_NAME = st.sampled_from(["a", "facts", "user-facts", "b_2", "notes", "x1", "yes", "no", "1.5"])
_PATH = st.builds(
    lambda up, folders, name, suffix: up + "".join(f"{folder}/" for folder in folders) + name + suffix,
    st.sampled_from(["", "", "/", "../", "./"]),
    st.lists(_NAME, max_size=2),
    _NAME,
    st.sampled_from([".md", ".md", "", ".txt"]),
)
_UNICODE_PATH = st.builds(
    lambda name, suffix: name + suffix,
    st.text(st.characters(codec="utf-8", categories=("L", "N")), min_size=1, max_size=6),
    st.sampled_from([".md", ""]),
)
_TYPED = st.sampled_from(["yes", "no", "on", "1.5", "42", "~", "null", "2026-01-01", "true", ".inf", "0x1F", "1:30"])
_ODD = "ab ./-_:#,[](){}<>|&*!%@`'\"\\\t=?~é\u00a0\u2028\ufeff"
_JUNK = st.text(st.sampled_from(_ODD), min_size=1, max_size=8)
_LINK_TEXT = st.one_of(
    st.sampled_from(["User facts", "B", "", "Facts, the raw ones"]),
    st.text(st.sampled_from("ab ,:#&*'\"|-"), max_size=5),
)
_LINK = st.builds(
    lambda text, target, extra: f"[{text}]({target}{extra})",
    _LINK_TEXT,
    _PATH,
    st.sampled_from(["", "", "#top", "%20x", ' "title"', " x"]),
)
_WIKI = st.builds(
    lambda inner, extra: f"[[{inner}{extra}]]",
    st.one_of(_PATH, _UNICODE_PATH, _TYPED, _JUNK.filter(lambda text: "]" not in text and "[" not in text)),
    st.sampled_from(["", "", "|alias", "#Heading", " ", ", b"]),
)
_QUOTED_TEXT = st.one_of(_PATH, _TYPED, st.text(st.sampled_from("ab .,:#[]()'\\\"é\t\u00a0\u2028\ufeff"), max_size=8))
_QUOTED = st.one_of(
    st.builds(lambda text: '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"', _QUOTED_TEXT),
    st.builds(lambda text: "'" + text.replace("'", "''") + "'", _QUOTED_TEXT),
    st.builds(lambda text: '"' + text + '"', _QUOTED_TEXT),  # escapes left as written, good or bad
)
_PROSE = st.lists(st.sampled_from(["adds", "and", "the vendor's", "2.4.1", "x: y", "(as of May)", "b.md"]), max_size=3)
_WITH_PROSE = st.builds(
    lambda before, link, after: " ".join([*before, link, *after]), _PROSE, st.one_of(_LINK, _WIKI), _PROSE
)
"""A link with prose around it, as wikis write lineage (``[[a]] adds telemetry``)."""
_ENTRY = st.one_of(
    _PATH,
    _WITH_PROSE,
    _PATH,
    _LINK,
    _LINK,
    _WIKI,
    _QUOTED,
    _UNICODE_PATH,
    _TYPED,
    _JUNK,
    st.sampled_from(["&a x.md", "*a", "<<", "- a.md", "? a", "a.md # note", "a: b", ""]),
)


# Strategies built once: a strategy made inside a draw is validated anew at every example,
# which costs more than the test itself.
_KEY = st.sampled_from(["derived_from:"] * 7 + ["derived_from :"])
_GAP = st.sampled_from([" "] * 6 + ["  ", "", "\t"])
_COMMENT = st.sampled_from([""] * 6 + ["  # note", " #note", "#x"])
_FORM = st.sampled_from(["comma", "inline", "block"])
_SEPARATOR = st.sampled_from([", ", ",", " , "])
_CLOSING = st.sampled_from(["]", "]", ", ]", "", "] x"])
_INDENT = st.sampled_from(["", "  ", "  ", "    ", "\t"])
_ENTRIES = st.lists(_ENTRY, min_size=1, max_size=4)


@st.composite
def _derived_from(draw: st.DrawFn) -> list[str]:
    """The ``derived_from`` lines, in one of the forms or a damaged one."""
    entries = draw(_ENTRIES)
    key, gap, comment, form = draw(_KEY), draw(_GAP), draw(_COMMENT), draw(_FORM)
    if form == "comma":
        return [key + gap + draw(_SEPARATOR).join(entries) + comment]
    if form == "inline":
        return [key + gap + "[" + ", ".join(entries) + draw(_CLOSING) + comment]
    indent = draw(_INDENT)
    lines = [key + comment] + [f"{indent}- {entry}" for entry in entries]
    if draw(st.booleans()):
        lines.insert(draw(st.integers(1, len(lines))), draw(st.sampled_from(["", "  ", " " + indent + "- x.md"])))
    return lines


_OTHER_LINES = st.sampled_from(
    [
        "name: Profile",
        "description: When you tailor an answer: read this first.",
        "description: Note: the user's own words",
        'description: "Quoted: with a colon"',
        "description: 'it''s quoted'",
        'description: "never closed',
        "description: 'never closed",
        'closes here"',
        "  closes here'",
        "description: |",
        "description: >-",
        "  a block or a continued line",
        '  "an indented quote',
        "tags: [a, b]",
        "tags: [a,",
        "  b]",
        "tags: {a: 1}",
        "tags:",
        "  - a",
        "- a",
        "# a comment",
        "",
        "   ",
        "anchor: &a x.md",
        "alias: *a",
        "<<: *a",
        "type: user",
        "derived_at: 2026-11-10",
        "derived_at: '2026-11-12' # re-derived",
        "derived_from: b.md",
        "...",
        "--- x",
        "%YAML 1.1",
        "? complex",
        "\tname: tabbed",
        "key:value",
        "name: café",
    ]
)


_AROUND = [
    ('description: "never closed', 'closes here"'),
    ("description: 'never closed", "  closes here'"),
    ('- "never closed', 'closes here"'),
    ("tags: [a,", "  b]"),
    ("tags: {a: 1,", "b: 2}"),
    ("description: |", "  a block"),
    ("--- |", "text"),
    ("first line", "last line"),
]


_METADATA_INDENT = st.sampled_from(["  ", "  ", "    ", " "])
_METADATA_KEY = st.sampled_from(["metadata:", "metadata:", "metadata:  # nested", "metadata: {"])
_METADATA_AFTER = st.sampled_from(["  odd: indentation", "x: y", ""])


@st.composite
def _metadata(draw: st.DrawFn, inner: list[str]) -> list[str]:
    indent = draw(_METADATA_INDENT)
    lines = [draw(_METADATA_KEY)]
    lines += [indent + line if line else line for line in inner]
    if draw(st.booleans()):
        lines.append(draw(_METADATA_AFTER))
    return lines


_BEFORE = st.lists(_OTHER_LINES, max_size=4)
_AFTER = st.lists(_OTHER_LINES, max_size=3)
_INSIDE_METADATA = st.lists(_OTHER_LINES, max_size=2)
_OPENER_CLOSER = st.sampled_from(_AROUND)
_NEWLINE = st.sampled_from(["\n", "\n", "\r\n"])
_BOM = st.sampled_from(["", "", "\ufeff"])


@st.composite
def frontmatters(draw: st.DrawFn) -> bytes:
    """A whole file head: frontmatter of the common forms among odd lines, in any encoding
    detail a file may have (a byte order mark, CRLF, unicode)."""
    declaration = draw(_derived_from())
    before = draw(_BEFORE)
    after = draw(_AFTER)
    if draw(st.integers(0, 3)) == 0:
        declaration = draw(_metadata(draw(_INSIDE_METADATA) + declaration))
    if draw(st.booleans()):  # around the declaration, something that may swallow it
        opener, closer = draw(_OPENER_CLOSER)
        before.append(opener)
        after.insert(draw(st.integers(0, len(after))), closer)
    lines = before + declaration + after
    newline = draw(_NEWLINE)
    bom = draw(_BOM)
    text = bom + "---" + newline + newline.join(lines) + newline + "---" + newline + "The body.\n"
    return text.encode("utf-8")


def _through_yaml(head: bytes) -> declarations.Declaration:
    """What the YAML path reads, the reader without YAML declining everything."""

    def decline(*_: object) -> tuple[str, ...]:
        raise reader._Unsure

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(reader, "_entries_without_yaml", decline)
        patch.setattr(reader, "_common_declaration", lambda _: None)
        return read_declaration(head)


@settings(max_examples=examples(1500), deadline=None)
@given(frontmatters())
@example(b'---\nmetadata:\n  derived_from: "/]\n---\nThe body.\n')  # a quoted value that ends in a bracket
@example(b'---\nderived_from: "[[a]] and [[b]]"\n---\nThe body.\n')  # links in prose
@example(b"---\nderived_from: [[a]] adds, b.md, and [B](b.md) too\n---\nThe body.\n")
@example(b"---\nderived_from: [A](a.md), notes\n---\nThe body.\n")  # a plain name beside a link
def test_the_reader_without_yaml_declines_or_agrees_with_yaml(head: bytes) -> None:
    assert read_declaration(head) == _through_yaml(head)


_COMMON_NAME = st.one_of(
    _PATH,
    st.sampled_from(["a b.md", "a+b.md", "-a.md", ".a.md", "a.md#x", "a:b.md", "a #b.md", "notes", "x 1", "~"]),
)
_COMMON_LINK = st.builds(
    lambda text, target, extra: f"[{text}]({target}{extra})",
    st.sampled_from(["User facts", "B", "", "Facts, the raw ones", "a+b", "x/y", "a: b", "#", "a]b"]),
    _PATH,
    st.sampled_from(["", "", "#top", "%20x", "#a b", ")"]),
)


@st.composite
def common_forms(draw: st.DrawFn) -> bytes:
    """Declarations in the forms the quick reader takes (plain names and Markdown links in a
    comma list, ``[a, b]`` or ``- a`` lines), near misses of them, and lines around them
    that may change how YAML reads them."""
    entries = draw(st.lists(st.one_of(_COMMON_NAME, _COMMON_NAME, _COMMON_LINK), min_size=1, max_size=4))
    key = "derived_from:" + draw(st.sampled_from([" ", " ", "  ", "", " \n"]))
    form = draw(st.sampled_from(["comma", "inline", "block"]))
    if form == "block":
        indent = draw(st.sampled_from(["", "  ", "  ", "    "]))
        dash = draw(st.sampled_from(["- ", "- ", "-  "]))
        trailing = draw(st.sampled_from(["", "", "  "]))
        lines = [key.rstrip(" \n")] + [f"{indent}{dash}{entry}{trailing}" for entry in entries]
    else:
        joined = draw(st.sampled_from([", ", ",", " , "])).join(entries)
        lines = [key + ("[" + joined + "]" if form == "inline" else joined)]
    if draw(st.booleans()):
        lines.insert(draw(st.integers(1, len(lines))), draw(st.sampled_from(["", "   ", "  - x.md", "  other: x"])))
    before = draw(st.lists(_OTHER_LINES, max_size=3))
    after = draw(st.lists(_OTHER_LINES, max_size=3))
    if draw(st.booleans()):
        opener, closer = draw(st.sampled_from(_AROUND))
        before.append(opener)
        after.insert(draw(st.integers(0, len(after))), closer)
    text = "---\n" + "\n".join([*before, *"\n".join(lines).split("\n"), *after]) + "\n---\nThe body.\n"
    return text.encode("utf-8")


@settings(max_examples=examples(1500), deadline=None)
@given(common_forms())
def test_the_quick_reader_of_the_common_forms_declines_or_agrees_with_yaml(head: bytes) -> None:
    assert read_declaration(head) == _through_yaml(head)


def _written(entries: list[str], form: str) -> list[str]:
    """``entries`` declared in one of the three forms, as a memory file writes them."""
    if form == "comma":
        return ["derived_from: " + ", ".join(entries)]
    if form == "inline":
        return ["derived_from: [" + ", ".join(entries) + "]"]
    return ["derived_from:"] + [f"  - {entry}" for entry in entries]


@st.composite
def surrounded(draw: st.DrawFn) -> bytes:
    """A declaration that YAML refuses where it stands (a Markdown link first), between
    lines that may open a quoted string or a bracket and close it after it: YAML then
    reads the declaration as part of that string, and so must the reader."""
    entries = draw(st.lists(st.one_of(_LINK, _PATH), min_size=1, max_size=3))
    declaration = _written(entries, draw(st.sampled_from(["comma", "inline", "block"])))
    opener, closer = draw(st.sampled_from(_AROUND))
    middle = draw(st.lists(_OTHER_LINES, max_size=2))
    lines = [*draw(st.lists(_OTHER_LINES, max_size=2)), opener, *middle, *declaration, "type: user", closer]
    return ("---\n" + "\n".join(lines) + "\n---\nThe body.\n").encode()


@settings(max_examples=examples(300), deadline=None)
@given(surrounded())
def test_a_declaration_inside_a_string_that_spans_lines_is_read_as_yaml_reads_it(head: bytes) -> None:
    assert read_declaration(head) == _through_yaml(head)


@settings(max_examples=examples(300), deadline=None)
@given(
    st.one_of(
        st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12),
        st.builds(lambda typed, tail: typed + tail, _TYPED, st.text(st.sampled_from("0.:-+e_ mdZT/#é"), max_size=4)),
    )
)
@example("0\n")  # YAML's patterns end in `$`, which matches before a last newline
def test_a_plain_name_is_text_to_yaml_whenever_the_shortcut_says_so(plain: str) -> None:
    from yaml.nodes import ScalarNode
    from yaml.resolver import Resolver

    if reader._reads_as_text(plain):
        assert Resolver().resolve(ScalarNode, plain, (True, False)) == "tag:yaml.org,2002:str"


# -- the common forms never reach YAML --------------------------------------------------------


@contextlib.contextmanager
def _yaml_unusable() -> Iterator[None]:
    """YAML made unusable: a declaration that still reads did not need it."""

    def refuse(*_: object) -> None:
        raise AssertionError("YAML was used")

    def resolver_free(plain: str) -> bool:
        if reader._never_typed().search(plain):
            return True
        raise AssertionError(f"YAML's resolver was used for {plain!r}")

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(reader, "_yaml_mapping", refuse)
        patch.setattr(reader, "_reads_as_text", resolver_free)
        yield


def frontmatter(*lines: str) -> bytes:
    return ("---\n" + "\n".join(lines) + "\n---\n# Title\n\nThe body.\n").encode()


@pytest.mark.parametrize(
    ("lines", "entries"),
    [
        (["derived_from: a.md, [B Notes](../b.md)"], ("a.md", "[B Notes](../b.md)")),
        (["derived_from: [B Notes](../b.md), /c.md"], ("[B Notes](../b.md)", "/c.md")),
        (["derived_from: [a.md, [B](b.md), /c.md]"], ("a.md", "[B](b.md)", "/c.md")),
        (["derived_from:", "  - [B](b.md)", "  - /topics/c.md"], ("[B](b.md)", "/topics/c.md")),
        (["derived_from:", "  - user-facts.md", '  - "[Preferences](preferences.md)"'], None),
        (["derived_from: [[user-facts]], [[preferences.md|my preferences]]"], None),
        (["derived_from:", "  - [[user-facts.md]]", "  - [[b.md#Top]]"], ("[[user-facts.md]]", "[[b.md#Top]]")),
        (["derived_from: ['a.md', \"b.md\"]"], ("a.md", "b.md")),
        (['derived_from: "a.md, b.md"'], ("a.md", "b.md")),
        (["derived_from: café.md, 日記.md"], ("café.md", "日記.md")),
        (["name: x", "description: Note: an unquoted colon", "derived_from: [A](a.md), b.md"], ("[A](a.md)", "b.md")),
        (["metadata:", "  type: user", "  derived_from: [A](a.md), b.md"], ("[A](a.md)", "b.md")),
    ],
)
def test_the_common_forms_are_read_without_yaml(lines: list[str], entries: tuple[str, ...] | None) -> None:
    with _yaml_unusable():
        declaration = read_declaration(frontmatter(*lines))
    assert declaration.problems == ()
    assert declaration.entries == (entries or declaration.entries)
    assert declaration.entries


@st.composite
def benchmark_declarations(draw: st.DrawFn) -> tuple[bytes, tuple[str, ...]]:
    """A declaration as the benchmark's folders write it, and the entries it names."""
    entries = draw(
        st.lists(
            st.one_of(
                st.builds(lambda path: "/" + path, _NAME.map(lambda name: f"notes/{name}-000012.md")),
                _NAME.map(lambda name: f"../people/{name}-000034.md"),
                _NAME.map(lambda name: f"{name}-000056.md"),
                st.builds(lambda name: f"[{name.title()} 000078](../topics/{name}-000078.md)", _NAME),
            ),
            min_size=2,
            max_size=4,
        )
    )
    lines = _written(entries, draw(st.sampled_from(["comma", "inline", "block"])))
    description = draw(st.sampled_from(["memory agent notes", "Note: memory agent notes"]))
    head = ["name: digest 000099", f"description: {description}", "type: project"]
    return frontmatter(*head, *lines, *draw(st.sampled_from([[], ["derived_at: 2026-05-13"]]))), tuple(entries)


@settings(max_examples=examples(200), deadline=None)
@given(benchmark_declarations())
def test_every_declaration_the_benchmark_writes_is_read_without_yaml(declared: tuple[bytes, tuple[str, ...]]) -> None:
    head, entries = declared
    with _yaml_unusable():
        assert read_declaration(head).entries == entries


@settings(max_examples=examples(200), deadline=None)
@given(benchmark_declarations())
def test_every_declaration_the_benchmark_writes_is_read_by_the_quick_reader(
    declared: tuple[bytes, tuple[str, ...]],
) -> None:
    head, entries = declared
    block = head.decode().split("---\n")[1]
    quick = reader._common_declaration(block)
    assert quick is not None
    assert quick.entries == entries


def _common_forms(tmp_path: Path) -> Path:
    """A memory folder declaring sources in every common form (and a description that is
    not valid YAML)."""
    root = tmp_path / "memory"
    (root / "notes").mkdir(parents=True)
    (root / "facts.md").write_text("---\nname: facts\n---\nThe user likes tea.\n")
    (root / "notes" / "b.md").write_text("---\nname: b\n---\nb\n")
    declared = {
        "comma.md": ["derived_from: facts.md, notes/b.md"],
        "inline.md": ["description: Note: an unquoted colon", "derived_from: [facts.md, [B](notes/b.md)]"],
        "notes/block.md": ["derived_from:", "  - ../facts.md", "  - /notes/b.md", "derived_at: 2026-11-10"],
        "notes/linked.md": ["derived_from: [Facts](../facts.md), b.md"],
    }
    for path, lines in declared.items():
        (root / path).write_text("---\n" + "\n".join(["name: x", *lines]) + "\n---\nbody\n")
    return root


def test_a_first_scan_of_declarations_in_the_common_forms_never_imports_yaml(tmp_path: Path) -> None:
    """``provgraph status`` with no state yet, over every common form (and a description
    that is not valid YAML): the answer is read without the YAML library ever loading."""
    root = _common_forms(tmp_path)
    done, imported = importing(str(PROVGRAPH), "status", "--json", str(root))
    assert done.returncode == 0, done.stderr
    assert "provgraph.scan" in imported
    assert "yaml" not in imported
    report = json.loads(done.stdout)
    assert report["counts"] == {"files": 6, "derived": 4, "stale": 0, "cycles": 0, "problems": 0}
