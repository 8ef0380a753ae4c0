"""The package's import layers, read from the source with ``ast``.

The core (``flask_redis_throttle/core/``) is usable without Flask, so it must
not import Flask, Werkzeug or Flask-Login, nor anything of the package above
it; no two modules may import each other, however indirectly; and the module
map in ``docs/architecture.rst`` must list exactly the modules in the tree.
Every import counts, wherever it is written: at the top, inside a function,
or under ``TYPE_CHECKING``, since each of them is a dependency a reader has to
follow.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "flask_redis_throttle"
NAME = "flask_redis_throttle"
CORE = f"{NAME}.core"
FLASK_ONLY = ("flask", "werkzeug", "flask_login")
#: What the core holds, at least: a check that passes on a tree without a
#: core would prove nothing.
CORE_MODULES = (
    "engine.rates",
    "engine.keys",
    "engine.codec",
    "engine.scripts",
    "storages.storage",
    "storages.clients",
    "engine.throttle",
    "engine.blocks",
    "engine.breaker",
    "engine.penalties",
)


def module_name(path: Path) -> str:
    """The dotted name of the module at ``path``."""
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    """Every module of the package, by dotted name."""
    return {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def imported(name: str, path: Path, known: set[str]) -> Iterator[str]:
    """Every module that the module ``name`` imports, as absolute names.

    ``from .x import y`` imports ``x.y`` when that is a module of the package,
    else ``x``.
    """
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text("utf-8"), str(path))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, *([base] if base else [])])
            for alias in node.names:
                full = f"{base}.{alias.name}"
                yield full if full in known else base


def graph() -> dict[str, set[str]]:
    """The package's modules, each with the modules of the package it imports."""
    found = modules()
    known = set(found)
    return {
        name: {target for target in imported(name, path, known) if target in known and target != name}
        for name, path in found.items()
    }


def test_the_core_imports_neither_flask_nor_the_layers_above_it() -> None:
    found = modules()
    known = set(found)
    assert {f"{CORE}.{name}" for name in CORE_MODULES} <= known
    wrong = sorted(
        f"{name} imports {target}"
        for name, path in found.items()
        if name == CORE or name.startswith(f"{CORE}.")
        for target in imported(name, path, known)
        if target.split(".")[0] in FLASK_ONLY
        or (target.split(".")[0] == NAME and target != CORE and not target.startswith(f"{CORE}."))
    )
    assert wrong == []


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(edges[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


#: The core's folders, each with the folders it may import: the engine
#: talks to a storage, and the stores operators read build on the engine and
#: the storages; never the other way.
FOLDERS = {"engine": {"storages"}, "storages": set(), "stores": {"engine", "storages"}}


def core_folder(name: str) -> str | None:
    """The folder of the core that the module ``name`` is in, if any."""
    parts = name.split(".")
    return parts[2] if len(parts) > 3 and parts[1] == "core" and parts[2] in FOLDERS else None


def against_the_direction(edges: dict[str, set[str]]) -> set[tuple[str, str]]:
    """Each import, as (importer, imported), of one of the core's folders by
    another that :data:`FOLDERS` does not let import it."""
    found = set()
    for name, targets in edges.items():
        here = core_folder(name)
        for target in targets:
            there = core_folder(target)
            if here and there and here != there and there not in FOLDERS[here]:
                found.add((name, target))
    return found


def test_the_cores_folders_import_one_way() -> None:
    assert against_the_direction(graph()) == set()


def test_the_direction_check_finds_an_import_against_it() -> None:
    throttle, storage, reset = (f"{CORE}.{name}" for name in ("engine.throttle", "storages.storage", "stores.reset"))
    edges = {throttle: {storage, reset}, reset: {throttle, storage}, storage: {f"{CORE}.errors"}}
    assert against_the_direction(edges) == {(throttle, reset)}


def test_no_module_of_the_package_imports_itself_through_others() -> None:
    assert cycles(graph()) == []


def test_the_cycle_finder_finds_a_cycle() -> None:
    """Without this, an empty answer above could mean a finder that finds nothing."""
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def mapped_modules() -> set[str]:
    """The modules the module map of ``docs/architecture.rst`` lists, as paths
    in the package such as ``core/engine/rates.py``."""
    text = (ROOT / "docs" / "architecture.rst").read_text("utf-8")
    match = re.search(r"^Module map\n-+\n(.*?)(?=^\S[^\n]*\n[-=]{3,}\n)", text, re.S | re.M)
    assert match, "docs/architecture.rst has no 'Module map' section"
    rows = re.findall(r"^   \* - (.*(?:\n       .*)*)", match.group(1), re.M)
    return {path for row in rows for path in re.findall(r"``([\w/]+\.py)``", row)}


def test_the_module_map_lists_exactly_the_modules_in_the_tree() -> None:
    tree = {path.relative_to(PACKAGE).as_posix() for path in modules().values()}
    assert mapped_modules() == tree


@pytest.mark.parametrize("name", sorted(modules()))
def test_a_module_imports_only_what_exists(name: str) -> None:
    """The graph above ignores names it does not know: make sure each import
    of the package it sees names a real module."""
    found = modules()
    known = set(found)
    missing = sorted(
        target for target in imported(name, found[name], known) if target.split(".")[0] == NAME and target not in known
    )
    assert missing == []


def test_storage_unavailable_is_exported_with_the_rest_of_the_public_api() -> None:
    """The docs catch it from the package (``except StorageUnavailable``) in examples."""
    import flask_redis_throttle
    from flask_redis_throttle.core.engine.throttle import StorageUnavailable

    assert "StorageUnavailable" in flask_redis_throttle.__all__
    assert flask_redis_throttle.StorageUnavailable is StorageUnavailable


def private_imports(name: str, path: Path) -> set[str]:
    """The names ``name`` imports from the package, outside ``compat/``,
    that are private: a module, or a name, with a leading underscore."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text("utf-8"), str(path))):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, *([base] if base else [])])
            names = [f"{base}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:
            continue
        for full in names:
            parts = full.split(".")
            outside = parts[0] == NAME and not full.startswith(f"{NAME}.compat")
            if outside and any(part.startswith("_") for part in parts[1:]):
                found.add(full)
    return found


@pytest.mark.parametrize("name", sorted(name for name in modules() if name.startswith(f"{NAME}.compat")))
def test_compat_imports_only_public_names_of_the_package(name: str) -> None:
    """The Flask-Limiter shim stands on the extension's public API: it
    imports no private module of the package, nor a private name of a
    public one: only what docs/api.rst lists."""
    assert not private_imports(name, modules()[name])


def test_the_private_import_check_finds_a_private_import(tmp_path: Path) -> None:
    path = tmp_path / "shim.py"
    path.write_text("from ..._state import EXTENSION_KEY\nfrom ...extension import _state_of, RateLimit\n")
    found = private_imports(f"{NAME}.compat.flask_limiter.shim", path)
    assert found == {f"{NAME}._state.EXTENSION_KEY", f"{NAME}.extension._state_of"}


def test_the_names_a_front_end_reads_are_public_and_work() -> None:
    """What the shim reads of an app's setup, from the public ``extension`` module."""
    from flask import Flask

    from flask_redis_throttle.extension import (
        APPLICATION_SCOPE,
        DEFAULTS,
        EXTENSION_KEY,
        RateLimit,
        RateLimitState,
        Settings,
        qualified_name,
    )

    app = Flask(__name__)
    app.config["RATELIMIT_APPLICATION"] = "5/minute"
    RateLimit(app)
    state = app.extensions[EXTENSION_KEY]
    assert isinstance(state, RateLimitState)
    assert isinstance(state.settings, Settings)
    assert [spec.scope for spec in state.settings.application] == [APPLICATION_SCOPE]
    assert Settings.from_config(DEFAULTS).storage_url == DEFAULTS["RATELIMIT_STORAGE_URL"]
    assert qualified_name(Settings.from_config) == f"{Settings.__module__}.Settings.from_config"


#: Private modules that still declare ``__all__``, left to the engineers
#: reworking them (issue 34): this list only shrinks.
def declared_all(path: Path) -> list[str] | None:
    """The names a module's ``__all__`` lists, or None if it has none."""
    for node in ast.parse(path.read_text("utf-8"), str(path)).body:
        if isinstance(node, ast.Assign) and any(getattr(target, "id", None) == "__all__" for target in node.targets):
            assert isinstance(node.value, (ast.List, ast.Tuple))
            return [element.value for element in node.value.elts if isinstance(element, ast.Constant)]
    return None


@pytest.mark.parametrize("name", sorted(modules()))
def test_only_public_modules_declare_all_and_only_public_names(name: str) -> None:
    """``__all__`` says what a public module offers; a private module (one
    whose name, or a package's on its path, starts with an underscore)
    offers nothing, so it declares none, and no module offers a private name."""
    listed = declared_all(modules()[name])
    private = any(part.startswith("_") for part in name.split(".")[1:])
    if private:
        assert listed is None, f"{name} is private, and declares __all__"
    assert not [entry for entry in listed or () if entry.startswith("_")]


def underscore_imports(name: str, path: Path) -> set[str]:
    """The underscore names ``name`` imports from other modules of the
    package: ``from ._decisions import _tighter``. A name another module
    uses is one its module offers, so it has no underscore."""
    return {full for full in private_imports(name, path) if full.rpartition(".")[2].startswith("_")}


@pytest.mark.parametrize("name", sorted(modules()))
def test_no_module_imports_an_underscore_name_of_another(name: str) -> None:
    assert not underscore_imports(name, modules()[name])


def test_the_underscore_import_check_finds_one(tmp_path: Path) -> None:
    path = tmp_path / "current.py"
    path.write_text("from ._decisions import at_cost, _tighter\nfrom ._state import Outcome\n")
    assert underscore_imports(f"{NAME}.current", path) == {f"{NAME}._decisions._tighter"}


#: Modules with a leading underscore that no distribution ships as code.
UNSHIPPED = ("__future__", "_typeshed")


def dependency_privates(path: Path) -> set[str]:
    """The private names of other distributions ``path`` reaches: an import of
    a module or name with a leading underscore (``from redis._parsers import
    ...``), or an attribute of one read off an imported module
    (``redis._parsers``). Python's own ``__future__``, and typeshed's
    ``_typeshed`` (read by the type checker only), are not."""
    tree = ast.parse(path.read_text("utf-8"), str(path))
    found, modules_in_scope = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").split(".")[0] not in UNSHIPPED:
            names = [f"{node.module}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
            modules_in_scope.update(alias.asname or alias.name.split(".")[0] for alias in node.names)
        else:
            continue
        found.update(
            full for full in names if not full.startswith(NAME) and any(p.startswith("_") for p in full.split("."))
        )
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)):
            continue
        if node.value.id in modules_in_scope and node.attr.startswith("_") and not node.attr.startswith("__"):
            found.add(f"{node.value.id}.{node.attr}")
    return found


@pytest.mark.parametrize("name", sorted(modules()))
def test_no_module_reaches_a_private_name_of_a_dependency(name: str) -> None:
    """redis-py, Flask and werkzeug are used through their public API only:
    a private name may change in any release inside the declared range."""
    assert not dependency_privates(modules()[name])


def test_the_dependency_check_finds_a_private_name(tmp_path: Path) -> None:
    path = tmp_path / "values.py"
    path.write_text("import redis\nfrom redis._parsers.base import BaseParser\nredis._compat\nredis.__version__\n")
    assert dependency_privates(path) == {"redis._parsers.base.BaseParser", "redis._compat"}
