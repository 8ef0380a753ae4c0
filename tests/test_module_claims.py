"""What a module's docstring says it imports is what it imports; every
file the prose names exists; ``tests/README.md`` maps every test file.

A docstring that says "This module imports neither Flask nor Redis" is read
as a promise about the whole module, what it imports through the package's
other modules included, and lazy imports inside functions too (they run
sooner or later). Imports under ``if TYPE_CHECKING:`` never run, and are
left out. Flask's own libraries, werkzeug and flask_login, count as Flask.
"""

from __future__ import annotations

import ast
import functools
import io
import re
import tokenize
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "flask_redis_throttle"

#: The third-party packages each claim is about.
FLASK = {"flask", "werkzeug", "flask_login"}
REDIS = {"redis"}

#: Each phrase a docstring may use, and the packages it says the module never imports.
CLAIMS = {
    "imports neither Flask nor Redis": FLASK | REDIS,
    "imports neither Flask nor redis-py": FLASK | REDIS,
    "imports Redis but not Flask": FLASK,
    "imports Redis (for its exceptions) but not Flask": FLASK,
}


class _Imports(ast.NodeVisitor):
    """A module's imports: third-party top-level names, and the package's
    own modules it imports relatively; ``TYPE_CHECKING`` blocks left out."""

    def __init__(self) -> None:
        self.external: set[str] = set()
        self.internal: set[tuple[int, str]] = set()

    def visit_If(self, node: ast.If) -> None:
        test = node.test
        if (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
            isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
        ):
            for child in node.orelse:
                self.visit(child)
            return
        self.generic_visit(node)

    def visit_Import(self, node: ast.Import) -> None:
        self.external.update(alias.name.split(".")[0] for alias in node.names)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level == 0 and node.module:
            self.external.add(node.module.split(".")[0])
        elif node.level > 0:
            # ``from .x import y``, ``from ..x import y`` and ``from . import x``.
            names = [node.module] if node.module else [alias.name for alias in node.names]
            self.internal.update((node.level, name) for name in names)


def _modules() -> dict[str, Path]:
    return {str(path.relative_to(PACKAGE).with_suffix("")): path for path in sorted(PACKAGE.rglob("*.py"))}


@functools.cache
def _imports(path: Path) -> _Imports:
    found = _Imports()
    found.visit(ast.parse(path.read_text("utf-8")))
    return found


def imported(name: str) -> set[str]:
    """Every third-party package ``name`` imports, through the package's modules too."""
    modules = _modules()
    seen: set[str] = set()
    external: set[str] = set()
    todo = [name]
    while todo:
        module = todo.pop()
        if module in seen or module not in modules:
            continue
        seen.add(module)
        found = _imports(modules[module])
        external |= found.external
        package = module.split("/")[:-1]
        for level, other in found.internal:
            base = package[: len(package) - (level - 1)]
            path = "/".join([*base, *other.split(".")])
            todo += [candidate for candidate in (path, f"{path}/__init__") if candidate in modules]
    return external


def claims() -> list[tuple[str, str]]:
    """Each module and the claim its docstring makes, if any."""
    found = []
    for name, path in _modules().items():
        docstring = ast.get_docstring(ast.parse(path.read_text("utf-8"))) or ""
        text = re.sub(r"\s+", " ", docstring)
        found += [(name, phrase) for phrase in CLAIMS if phrase in text]
    return found


def test_the_claims_are_found() -> None:
    assert len(claims()) >= 5


@pytest.mark.parametrize(("module", "claim"), claims())
def test_a_module_imports_what_its_docstring_says(module: str, claim: str) -> None:
    assert imported(module) & CLAIMS[claim] == set()


ROOT = PACKAGE.parent
TESTS = ROOT / "tests"

#: A file's path as prose names it: ``lua/records.lua``, ``core/engine/keys.py``.
NAMED_FILE = re.compile(r"(?<![\w/.-])((?:[\w-]+/)*[\w-]+\.(?:py|lua))\b")

#: Files the docs name that are no file of this tree, each for its reason.
NOT_OURS = {
    "api/limits.py": "an app's module, in an example",
    "wsgi.py": "an app's module, in an example",
    "test_storage.py": "Flask-Limiter's own test file, which the shim is run against",
    "core/ready.py": "a module gone, in a note on why it went",
}


def prose(path: Path) -> str:
    """The prose of ``path``: a Python file's comments and strings, or a
    whole page of the docs or a Lua file."""
    text = path.read_text("utf-8")
    if path.suffix != ".py":
        return text
    tokens = tokenize.generate_tokens(io.StringIO(text).readline)
    return "\n".join(token.string for token in tokens if token.type in (tokenize.COMMENT, tokenize.STRING))


#: The folder of the Lua scripts, wherever the package keeps it.
SCRIPTS = next(PACKAGE.rglob("main.lua")).parent


def missing_files(path: Path) -> list[str]:
    """The files ``path``'s prose names that do not exist: looked for beside
    it, in the package, ``core/``, the scripts' folder and the one it is in,
    the tests and the repository; a bare file name anywhere in the tree."""
    bases = (path.parent, PACKAGE, PACKAGE / "core", SCRIPTS, SCRIPTS.parent, TESTS, ROOT)
    found = []
    for named in NAMED_FILE.findall(prose(path)):
        if named in NOT_OURS or any((base / named).exists() for base in bases):
            continue
        if "/" not in named and any(ROOT.glob(f"[!.]*/**/{named}")):
            continue
        found.append(named)
    return found


def prose_files() -> list[Path]:
    """The package's modules and scripts, the docs' pages and the tests' map:
    not CHANGES.md, whose entries name the files of their time."""
    return [
        *sorted(PACKAGE.rglob("*.py")),
        *sorted(PACKAGE.rglob("*.lua")),
        *sorted((ROOT / "docs").glob("*.rst")),
        ROOT / "README.md",
        TESTS / "README.md",
    ]


@pytest.mark.parametrize("path", prose_files(), ids=lambda path: str(path.relative_to(ROOT)))
def test_every_file_the_prose_names_exists(path: Path) -> None:
    assert not missing_files(path)


def test_a_file_that_is_gone_is_found(tmp_path: Path) -> None:
    module = tmp_path / "throttle.py"
    module.write_text('"""Packed keys (see ``lua/packed.lua``), kept by ``lua/records.lua``."""\nself.lua = 1\n')
    assert missing_files(module) == ["lua/packed.lua"]


def test_the_tests_readme_maps_every_test_file() -> None:
    mapped = set(re.findall(r"`([\w/]+\.py)`", (TESTS / "README.md").read_text("utf-8")))
    files = {str(path.relative_to(TESTS)) for path in TESTS.rglob("*.py")}
    assert sorted(files - mapped) == []
    assert sorted(name for name in mapped if not (TESTS / name).exists() and not (ROOT / name).exists()) == []
