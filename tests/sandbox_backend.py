"""A sandbox for tests and the benchmark: a real AgentScope ``BackendBase`` subclass over a local folder.

It implements the three primitives AgentScope asks of a backend
(``exec_shell``, ``read_file``, ``write_file``) and inherits every other
operation (``list_dir``, ``is_dir``, ``stat_mtime``, ...) from the base
class, which builds them on ``exec_shell``, as for Docker or E2B.  Paths in
the sandbox are paths on this machine, so the tests can arrange the folder
directly.

It counts its calls, can add a delay to each one (the round trip of a real
sandbox), can fail every call (a sandbox restarting), can fail the next
commands to spawn (``spawn_failures``: exit status 127, as AgentScope's local
backends answer an ``OSError`` such as EAGAIN at spawn), and can hang a call
forever, or make each listing of a whole folder (a ``find -mindepth 1 ... -printf``)
take ``listing_delay`` seconds more.  ``bytes`` counts what its calls returned.

``SandboxWorkspace`` is a real AgentScope ``WorkspaceBase`` over it, mounted as
the service mounts every sandbox: at ``/workspace``, whatever host folder
holds it.
"""

from __future__ import annotations

import asyncio
import os
from collections import Counter

from agentscope.tool import BackendBase, ExecResult
from agentscope.workspace import WorkspaceBase

MOUNT = "/workspace"


class SandboxBackend(BackendBase):
    """A counting, delaying, failing stand-in for a remote sandbox."""

    def __init__(self, delay: float = 0.0, host: str | None = None) -> None:
        self.delay = delay
        self.host = host
        """The host folder mounted at ``MOUNT``; None: paths in the sandbox are paths on this machine."""
        self.calls = self.bytes = 0
        self.read_paths: Counter[str] = Counter()
        self.failing = False
        self.hanging = False
        self.spawn_failures = 0
        self.listing_delay = 0.0

    async def _round_trip(self) -> None:
        self.calls += 1
        if self.delay:
            await asyncio.sleep(self.delay)
        if self.hanging:
            await asyncio.Event().wait()

    async def exec_shell(self, command: list[str], *, cwd: str | None = None, timeout: float | None = None):
        await self._round_trip()
        if self.failing:
            return ExecResult(exit_code=-1, stdout=b"", stderr=b"sandbox is restarting")
        if self.spawn_failures:
            self.spawn_failures -= 1
            return ExecResult(exit_code=127, stdout=b"", stderr=b"[Errno 11] Resource temporarily unavailable")
        self.read_paths.update(argument for argument in command if argument.startswith("./"))
        if self.listing_delay and any("-mindepth 1" in argument and "-printf" in argument for argument in command):
            await asyncio.sleep(self.listing_delay)
        process = await asyncio.create_subprocess_exec(
            *map(self._on_host, command), cwd=cwd, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
        )
        try:
            stdout, stderr = await asyncio.wait_for(process.communicate(), timeout)
        except TimeoutError:
            process.kill()
            await process.wait()
            return ExecResult(exit_code=-1, stdout=b"", stderr=b"timed out")
        self.bytes += len(stdout)
        return ExecResult(exit_code=process.returncode, stdout=stdout, stderr=stderr)

    async def read_file(self, path: str) -> bytes:
        await self._round_trip()
        if self.failing:
            raise ConnectionError("sandbox unreachable")
        self.read_paths[path] += 1
        with open(self._on_host(path), "rb") as handle:
            data = handle.read()
        self.bytes += len(data)
        return data

    async def write_file(self, path: str, data: bytes) -> None:
        await self._round_trip()
        path = self._on_host(path)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as handle:
            handle.write(data)

    def _on_host(self, path: str) -> str:
        """Where a path of the sandbox is on this machine (an argument that is no path is itself)."""
        if self.host is not None and (path == MOUNT or path.startswith(MOUNT + "/")):
            return self.host + path[len(MOUNT) :]
        return path


class SandboxWorkspace(WorkspaceBase):
    """A sandboxed workspace as the agent service hands it to a middleware factory: its id, its
    workdir (``MOUNT``, as for every sandbox) and its backend."""

    def __init__(self, host: str, workspace_id: str, delay: float = 0.0) -> None:
        super().__init__(workspace_id=workspace_id)
        self.workdir = MOUNT
        self._backend = SandboxBackend(delay, host)
        self.is_alive = True
