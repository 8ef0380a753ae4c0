"""Whether a folder and the files in it are this process's user's alone, as
``local://`` needs its server's folder to be (the why: :ref:`local`). Files
are opened with ``O_NOFOLLOW``, so that a link is never followed.
"""

from __future__ import annotations

import os
import shlex
import stat
from collections.abc import Iterable
from typing import IO, Any

import redis

from ..errors import ConfigurationError


class UnsafeFolder(ConfigurationError, redis.ConnectionError):
    """The folder of ``local://``, or a file in it, is not this process's
    user's alone: a :class:`ConfigurationError` at ``init_app``, and a
    :class:`redis.ConnectionError` on a connection, so that requests fail
    as they do while Redis is down.

    :param path: the folder or file.
    :param reason: what is wrong with it, and how to fix it.
    """

    def __init__(self, path: str, reason: str) -> None:
        super().__init__("RATELIMIT_STORAGE_URL", path, "")
        # The message ConfigurationError makes is about a config value; this is about a file.
        self.args = (f"local:// will not use {path}: {reason}",)
        #: The folder or file.
        self.path = path


def check_owned(folder: str, files: Iterable[str]) -> None:
    """Refuse ``folder``, or any of ``files`` that exists, unless it is this
    process's user's alone, and refuse a file that is a symbolic link.

    :raises UnsafeFolder: naming the path and what is wrong with it.
    """
    user = os.geteuid()
    _trust(folder, os.stat(folder), user)  # the folder's path may go through a link
    for path in files:
        try:
            found = os.lstat(path)
        except FileNotFoundError:
            continue
        if stat.S_ISLNK(found.st_mode):
            raise UnsafeFolder(path, "it is a symbolic link, which the server would follow; remove it")
        _trust(path, found, user)


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
