"""The ``provgraph`` command line: a thin shell over ``provgraph.Memory``.

``cli(*args)`` returns the exit code; ``main()`` is the console script.  Results go to
stdout, errors and warnings to stderr, one line each: a user never sees a traceback for a
bad argument, a missing folder or a state file that cannot be written.  Exit codes: 0 fresh,
1 stale or broken (``check``), 2 could not run, 130 interrupted.
"""

from __future__ import annotations

import argparse
import io
import os
import select
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn, TextIO

import orjson

from . import __version__, render
from .api import DEFAULT_SOURCES_HEADING, Memory, NotDerived, find_root
from .clock import pinned_now  # PROVGRAPH_NOW when set, else None: the real clock
from .demo import run_demo
from .errors import ProvgraphError, listening
from .integrations import claude_code
from .model import INDEX_KINDS, ProblemKind
from .paths import command_options, list_hint, parts_under, shell_advice
from .queries import EditContext, explain, missing_sources, refusal_text
from .render import lineage_document, lineage_text, safe_name

__all__ = ["cli", "main"]

EXIT_OK, EXIT_STALE, EXIT_ERROR, EXIT_INTERRUPTED = 0, 1, 2, 130
DEFAULT_MAX_LINES = 20  # stale files the printed block lists at most

Options = argparse.Namespace


class UsageError(ProvgraphError):
    """A bad argument: one sentence for stderr, exit 2."""


def cli(*args: str) -> int:
    """Run the command line with ``args`` and return the exit code."""
    try:
        options = _parser().parse_args(args)
    except SystemExit as exit_:
        return int(exit_.code or 0)  # --help, --version, or a bad argument (said on stderr)
    try:
        run: Callable[[Options], int] = options.run
        return run(options)
    except ProvgraphError as error:
        _say_error(error)
        return EXIT_ERROR
    except BrokenPipeError:
        # the reader went away (`provgraph status | head`): not an error of ours
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK
    except OSError as error:
        _say("error", _os_message(error))
        return EXIT_ERROR
    except KeyboardInterrupt:
        print("provgraph: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


def main() -> NoReturn:
    """The console script: the library's logged warnings become ``provgraph: warning:`` lines,
    and a name the terminal's encoding cannot show is escaped rather than a traceback."""
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, io.TextIOWrapper):
            stream.reconfigure(errors="backslashreplace")
    with listening(_warn):
        code = cli(*sys.argv[1:])
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except OSError as error:
        _say("error", _os_message(error))
        code = code or EXIT_ERROR
    sys.exit(code)


def _say(kind: str, message: str) -> None:
    """One line on stderr, ``provgraph: KIND: MESSAGE``.  The message goes through the
    escaping of every printed name (``render.safe_name``): a path the user typed, with a
    newline or an escape code in it, can neither fake a second line nor drive the terminal."""
    print(f"provgraph: {kind}: {render.safe_name(message)}", file=sys.stderr)


def _warn(message: str) -> None:
    _say("warning", message)


def _say_error(error: Exception) -> None:
    """``NotDerived`` escaped its names already: escaping again would double every backslash."""
    if isinstance(error, NotDerived):
        print(f"provgraph: error: {error}", file=sys.stderr)
    else:
        _say("error", str(error))


def _os_message(error: OSError) -> str:
    where = f"{os.fsdecode(error.filename)} " if error.filename else ""
    return f"{where}{error.strerror or error}"


def _status(options: Options) -> int:
    report = _open(options).refresh(now=pinned_now())
    sys.stdout.write(render.status_json(report) if options.json else render.status_text(report))
    return EXIT_OK


def _check(options: Options) -> int:
    """Exit 1 on a stale file, a cycle, or (unless ``--allow-broken``) a declaration that
    could not be read: a typo in ``derived_from`` must not pass CI quietly."""
    report = _open(options).refresh(now=pinned_now())
    broken = (
        set(INDEX_KINDS) if options.allow_broken else {ProblemKind.BAD_FRONTMATTER, ProblemKind.BAD_ENTRY, *INDEX_KINDS}
    )
    if report.ok and all(problem.kind not in broken for problem in report.problems):
        return EXIT_OK
    sys.stdout.write(render.status_text(report))
    return EXIT_STALE


def _why(options: Options) -> int:
    root, (path,) = _locate(options, [options.file])
    memory = _open(options, root)
    explanation = memory.explain(path, memory.refresh(now=pinned_now()))
    if options.json:
        _print_json(render.explanation_document(explanation))
    elif explanation.status is None and not explanation.problems:
        print(render.uninvolved_text(path, exists=(root / path).exists()))
    else:
        sys.stdout.write(render.explanation_text(explanation))
    return EXIT_OK


def _print_json(document: dict[str, Any]) -> None:
    sys.stdout.write(orjson.dumps(document, option=orjson.OPT_INDENT_2).decode() + "\n")


def _lineage(options: Options) -> int:
    """What an agent's ``memory_lineage`` tool answers, with commands where it names tools."""
    root, (path,) = _locate(options, [options.file])
    memory = _open(options, root)
    found = memory.lineage(path, memory.refresh(now=pinned_now()))
    if options.json:
        _print_json(lineage_document(found))
    else:
        advice = shell_advice(str(memory.root), _printed_options(options))
        print(lineage_text(found, max_lines=options.max_lines, record=advice.record_any, list_stale=advice.list_stale))
    return EXIT_OK


def _stamp(options: Options) -> int:
    """Exit 2 when a file names a source that does not exist (nothing recorded for it), 1 when one stays stale."""
    root, paths = _locate(options, options.files)
    memory = _open(options, root)
    report = _open(options, root, lambda message: None).refresh(now=pinned_now())  # quiet: the stamp says it
    refused = {path: missing for path in sorted(set(paths)) if (missing := missing_sources(report, path))}
    for path, missing in refused.items():
        print(f"provgraph: error: {refusal_text(path, missing, 'run this command again')}", file=sys.stderr)
    stamped = sorted(set(paths) - set(refused))
    report = memory.stamp(stamped, now=pinned_now()) if stamped else report
    for path in stamped:
        count = sum(1 for edge in report.edges if edge.derived == path)
        what = (
            f"re-derived from {count} source{'s' * (count != 1)}" if count else "its entries stamped from their files"
        )
        print(f"stamped {safe_name(path)}: {what} as they are now")
    behind = {p: ", ".join(map(safe_name, explain(report, p).stale_sources)) for p in stamped if report.entry(p)}
    for path, names in behind.items():
        print(
            f"{safe_name(path)} stays stale: it is derived from {names}, stale itself: re-derive and stamp that first"
        )
    print(render.summary_line(report))
    return EXIT_ERROR if refused else EXIT_STALE if behind else EXIT_OK


def _index(options: Options) -> int:
    """Print the index as it should be; exit 2 when the folder has none."""
    text = _open(options).index(now=pinned_now())
    if not text:
        raise UsageError(f"no MEMORY.md in {Path(options.root)} (name another index with --index FILE)")
    sys.stdout.write(text)
    return EXIT_OK


def _graph(options: Options) -> int:
    report = _open(options).refresh(now=pinned_now())
    exporter = {"json": render.graph_json, "dot": render.dot, "mermaid": render.mermaid}[options.format]
    sys.stdout.write(exporter(report))
    return EXIT_OK


def _prompt(options: Options) -> int:
    report = _open(options).refresh(now=pinned_now())
    hint = list_hint(report.root, _printed_options(options))
    sys.stdout.write(render.prompt_block(report, max_lines=options.max_lines, more_hint=hint))
    return EXIT_OK


def _hook(options: Options) -> int:
    """Claude Code's hook: the event on stdin decides the answer (see ``integrations.claude_code``)."""
    if options.settings:
        root = os.path.abspath(os.path.expanduser(options.root))
        lines = ("--max-lines", str(options.max_lines)) if options.max_lines != DEFAULT_MAX_LINES else ()
        program = claude_code.installed_program()
        sys.stdout.write(claude_code.settings_json(root, _printed_options(options) + lines, program))
        return EXIT_OK
    try:
        _answer_event(options, _stdin_event())
    except Exception as error:  # a hook must not break the session it serves: one line, exit 0
        _say("hook", _os_message(error) if isinstance(error, OSError) else str(error) or type(error).__name__)
    return EXIT_OK


def _answer_event(options: Options, data: bytes) -> None:
    event = claude_code.parse_event(data) if data.strip() else None
    if not Path(options.root).exists():
        return  # no memory folder yet: nothing can be stale, and a session must not see an error
    if event is None or event.name == "SessionStart":
        report = _open(options).refresh(now=pinned_now())
        printed = _printed_options(options)
        sys.stdout.write(
            claude_code.session_start_output(
                report, max_lines=options.max_lines, options=printed, program=claude_code.printed_program()
            )
        )
    elif event.name == "PostToolUse":
        _hook_tool_use(options, event)


def _hook_tool_use(options: Options, event: claude_code.HookEvent) -> None:
    path = claude_code.memory_path(Path(os.path.abspath(options.root)), event.file_path) if event.file_path else None
    if path is None or event.tool not in claude_code.WRITE_TOOLS | {claude_code.READ_TOOL}:
        return
    memory = _open(options)
    reads = claude_code.SessionReads.beside(memory.state_path, root=memory.root)
    write = event.tool != claude_code.READ_TOOL
    if write:
        whole = event.tool == claude_code.WHOLE_WRITE
        edit = EditContext(path, reads.reads(event.session), whole, reads.seen(event.session))
        report = memory.refresh(now=pinned_now())
        sys.stdout.write(
            claude_code.post_tool_use_output(report, edit, _printed_options(options), claude_code.printed_program())
        )
    elif not path.endswith(".md"):
        return
    try:  # remembered for the suggestions; a symlink or a folder in the way costs them, not the session
        reads.record(event.session, path, write=write)
    except OSError as error:
        _say("hook", f"the {'write' if write else 'read'} was not recorded: {_os_message(error)}")


MCP_INSTALL = "pip install 'provgraph[mcp]'"


def _mcp(options: Options) -> int:
    """The MCP server of the folder on stdin and stdout, or with ``--config`` the snippets that add it to a client."""
    try:
        from .integrations import mcp  # heavy, and an extra: only this command needs the MCP SDK
    except ImportError:
        raise UsageError(f"the MCP server needs the MCP SDK, which is not installed: {MCP_INSTALL}") from None
    root = os.path.abspath(os.path.expanduser(options.root))
    if options.config:
        lines = ("--max-lines", str(options.max_lines)) if options.max_lines != DEFAULT_MAX_LINES else ()
        cache = ("--no-cache",) if options.no_cache else ()
        sys.stdout.write(mcp.config_text(root, _printed_options(options) + cache + lines))
        return EXIT_OK
    if not os.path.isdir(root):
        raise UsageError(f"memory root {root} is not a folder")
    heading, trust, volatile = _sources_heading(options), not options.no_cache, _volatile_fields(options)
    server = mcp.MemoryServer(
        root,
        state=options.state,
        sources_heading=heading,
        trust_cache=trust,
        max_lines=options.max_lines,
        volatile_fields=volatile,
        index_files=options.index_files or (),
        unindexed=options.unindexed or (),
    )
    mcp.serve(server)
    return EXIT_OK


STDIN_WAIT = 3.0
"""Seconds the hook waits for its event on a standard input that is neither a terminal nor closed."""


def _stdin_event() -> bytes:
    """The hook event Claude Code writes on stdin, or b"" when none is given (a terminal, nothing sent)."""
    stream = sys.stdin
    try:
        if stream is None or stream.isatty() or not select.select([stream], [], [], STDIN_WAIT)[0]:
            return b""
        return stream.buffer.read()
    except (OSError, ValueError, AttributeError):
        return b""


def _printed_options(options: Options) -> tuple[str, ...]:
    """The options a printed command repeats, so that it reads the folder as this command did."""
    reading = _sources_heading(options), _volatile_fields(options), options.index_files or (), options.unindexed or ()
    return command_options(options.state, *reading)


def _open(options: Options, root: Path | None = None, warn: Callable[[str], None] = _warn) -> Memory:
    folder = root if root is not None else options.root
    if not os.path.isdir(folder):
        raise UsageError(f"memory root {Path(folder)} is not a folder")
    progress = Progress(sys.stderr) if sys.stderr is not None and sys.stderr.isatty() else None
    heading, trust = _sources_heading(options), not options.no_cache
    volatile = _volatile_fields(options)
    return Memory(
        folder,
        state=options.state,
        warn=warn,
        progress=progress,
        sources_heading=heading,
        trust_cache=trust,
        index_files=options.index_files or (),
        unindexed=options.unindexed or (),
        volatile_fields=volatile,
    )


def _volatile_fields(options: Options) -> list[str]:
    """``--volatile-field`` given once per name, or with names joined by commas."""
    return [name for names in options.volatile_field for name in names.split(",")]


def _sources_heading(options: Options) -> str | None:
    heading = getattr(options, "sources_heading", None)
    if heading is not None and not heading.lstrip().startswith("#"):
        raise UsageError(
            f"--sources-heading takes a Markdown heading such as '## Sources', not {heading!r} "
            "(write --sources-heading='## Provenance', or put ROOT before the option)"
        )
    return heading


PROGRESS_AFTER = 1.0
"""Seconds a scan runs before its progress is shown."""


class Progress:
    """How far a long scan has got, on one terminal line rewritten in place: shown only
    after ``after`` seconds, erased when the scan is done, before any result is printed."""

    def __init__(self, stream: TextIO, after: float | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self._stream = stream
        self._after = PROGRESS_AFTER if after is None else after
        self._clock = clock
        self._started = clock()
        self._shown = 0

    def __call__(self, done: int, total: int) -> None:
        if done >= total:
            self._erase()
        elif self._clock() - self._started >= self._after:
            line = f"\rprovgraph: scanning {done:,} of {total:,} memory files"
            self._stream.write(line)
            self._stream.flush()
            self._shown = len(line) - 1

    def _erase(self) -> None:
        if self._shown:
            self._stream.write("\r" + " " * self._shown + "\r")
            self._stream.flush()
            self._shown = 0


def _locate(options: Options, files: Sequence[str]) -> tuple[Path, list[str]]:
    """The memory root of ``files`` and their root-relative POSIX paths."""
    roots = set()
    if options.root is not None:
        roots.add(Path(options.root).absolute())
        files = [os.path.join(options.root, os.path.expanduser(file)) for file in files]
    else:
        for file in files:
            found = find_root(Path(file).absolute().parent if not Path(file).is_dir() else file)
            if found is None:
                raise UsageError(
                    f"no memory root above {file} (no provgraph.lock, .provgraph/ or MEMORY.md); pass --root"
                )
            roots.add(found)
    if len(roots) > 1:
        raise UsageError("the files belong to different memory roots: " + ", ".join(sorted(map(str, roots))))
    root = roots.pop()
    return root, [_relative(root, file) for file in files]


def _relative(root: Path, file: str) -> str:
    parts = parts_under(root, file)
    if parts is None or parts[0] == ".provgraph":
        raise UsageError(f"{file} is not under the memory root {root}")
    return "/".join(parts)


class _Parser(argparse.ArgumentParser):
    """Reports a bad argument in one line (no usage dump), like every other error."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_ERROR, f"{self.prog}: error: {render.safe_name(message)} (see '{self.prog} --help')\n")


_Argument = tuple[str, dict[str, Any]]


def _flag(name: str, help: str) -> _Argument:
    return name, {"action": "store_true", "help": help}


def _max_lines(listed: str) -> _Argument:
    return "--max-lines", {"type": int, "default": DEFAULT_MAX_LINES, "metavar": "N", "help": f"{listed} (default 20)"}


def _root_above(relative: str = "") -> _Argument:
    return "--root", {
        "help": f"memory root{relative} (default: nearest folder above FILE with .provgraph/ or MEMORY.md)"
    }


_ROOT: _Argument = ("root", {"nargs": "?", "default": ".", "metavar": "ROOT", "help": "memory folder (default: .)"})
_FILE: _Argument = ("file", {"metavar": "FILE"})
_MAX_STALE = _max_lines("stale files listed at most")
_STATE = "folder for provgraph.lock and the cache, outside the memory folder (default: the lock in ROOT, the cache in "
_HEADING = f"the links under this heading declare sources too (alone: '{DEFAULT_SOURCES_HEADING}')"
_INDEX = "an index file beside MEMORY.md, root-relative (repeat for more)"
_VOLATILE = "a frontmatter field whose edit alone marks nothing, besides updated, last_updated... (repeatable)"
_COMMON: tuple[_Argument, ...] = (
    (
        "--state",
        {"type": os.path.expanduser, "metavar": "DIR", "help": _STATE + "ROOT/.provgraph/)"},
    ),  # expands `--state=~/x`
    ("--sources-heading", {"nargs": "?", "const": DEFAULT_SOURCES_HEADING, "metavar": "HEADING", "help": _HEADING}),
    _flag("--no-cache", "read and hash every file, trusting no recorded size and times"),
    ("--index", {"action": "append", "dest": "index_files", "metavar": "FILE", "help": _INDEX}),
    ("--unindexed", {"action": "append", "metavar": "PATTERN", "help": "memory files no index needs to list"}),
    ("--volatile-field", {"action": "append", "default": [], "metavar": "NAME", "help": _VOLATILE}),
)
"""The options every command takes, right after ``-h``."""

_BROKEN = "do not fail on bad-frontmatter or bad-entry problems (stale files, cycles and index problems still fail)"
_COMMANDS: tuple[tuple[str, Callable[[Options], int], str, tuple[_Argument, ...]], ...] = (
    (
        "status",
        _status,
        "scan, update state, report stale files, cycles and problems",
        (_ROOT, _flag("--json", "one JSON object (schema version 2)")),
    ),
    (
        "check",
        _check,
        "exit 1 if a derived file is stale, a cycle exists, a declaration is broken or an index is out of step",
        (_ROOT, _flag("--allow-broken", _BROKEN)),
    ),
    (
        "why",
        _why,
        "explain one file: its sources, each cause and its chain",
        (_FILE, _root_above(), _flag("--json", "one JSON object")),
    ),
    (
        "lineage",
        _lineage,
        "one file's status and sources, and every file derived from it",
        (
            _FILE,
            _root_above(),
            _flag("--json", "one JSON object, every derived file listed"),
            _max_lines("derived files listed at most"),
        ),
    ),
    (
        "stamp",
        _stamp,
        "record that derived files were just re-derived from their sources",
        (("files", {"nargs": "+", "metavar": "FILE"}), _root_above(", to which FILEs are then relative")),
    ),
    (
        "index",
        _index,
        "print the memory index as it should be (writes nothing)",
        (_ROOT,),
    ),
    (
        "graph",
        _graph,
        "export the lineage graph with each node's status",
        (_ROOT, ("--format", {"choices": ("json", "dot", "mermaid"), "default": "json"})),
    ),
    (
        "prompt",
        _prompt,
        "print the block an agent gets in its system prompt (empty when nothing is stale)",
        (_ROOT, _MAX_STALE),
    ),
    (
        "claude-code",
        _hook,
        "Claude Code hook: answers the event on stdin (SessionStart, PostToolUse), or prints nothing",
        (_ROOT, _flag("--settings", "print the settings JSON that installs the hooks"), _MAX_STALE),
    ),
    (
        "mcp",
        _mcp,
        "serve the folder to MCP clients (Claude Code and Desktop, Cursor, ...) over stdin and stdout",
        (
            _ROOT,
            _flag("--config", "print the snippets that add this server to Claude Code, Claude Desktop and Cursor"),
            _MAX_STALE,
        ),
    ),
    (
        "demo",
        lambda options: run_demo(sys.stdout),
        "show provgraph at work on a small memory folder in a temporary directory",
        (),
    ),
)
"""Each command, its help and its arguments, in the order ``provgraph --help`` lists them.
``claude-code`` is the one framework under ``provgraph hook``."""


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="provgraph", description="Tell which memory files were derived from files that changed afterwards."
    )
    parser.add_argument("--version", action="version", version=f"provgraph {__version__}")
    common = _Parser(add_help=False)
    for flag, settings in _COMMON:
        common.add_argument(flag, **settings)
    commands = parser.add_subparsers(metavar="COMMAND", required=True)
    for name, run, help, arguments in _COMMANDS:
        if run is _hook:
            hook = commands.add_parser("hook", help="print hook output for an agent framework")
            sub = hook.add_subparsers(metavar="FRAMEWORK", required=True).add_parser(name, help=help, parents=[common])
        else:
            sub = commands.add_parser(name, help=help, description=help, parents=[common])
        sub.set_defaults(run=run)
        for flag, settings in arguments:
            sub.add_argument(flag, **settings)
    return parser
