"""The README and the docs tell one story: their figures are those of one
benchmark output, their targets those of ``benchmarks/harness.py``, and the
README lists every page of the docs."""

from __future__ import annotations

import importlib
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
BENCHMARKS = ROOT / "benchmarks"


def bench_module(name: str) -> ModuleType:
    """``benchmarks/<name>.py``, imported as the scripts import each other."""
    if str(BENCHMARKS) not in sys.path:
        sys.path.insert(0, str(BENCHMARKS))
    return importlib.import_module(name)


@pytest.fixture(scope="module")
def report_module() -> ModuleType:
    return bench_module("report")


@pytest.fixture(scope="module")
def results(report_module: ModuleType) -> dict[str, Any]:
    loaded: dict[str, Any] = report_module.load()
    return loaded


def test_readme_and_performance_page_show_the_committed_run(report_module: ModuleType, results: dict[str, Any]) -> None:
    """Every figure region is what ``benchmarks/report.py`` renders from ``benchmarks/results/suite.json``."""
    for path in report_module.REGIONS:
        assert report_module.rendered(path, results) == path.read_text(encoding="utf-8"), (
            f"{path.name} differs from benchmarks/results/suite.json: run python benchmarks/report.py"
        )


def outside_regions(path: Path) -> str:
    """The file's text with its generated regions cut out."""
    text = path.read_text(encoding="utf-8")
    begin, end = (r"<!-- figures:\S+:begin -->", r"<!-- figures:\S+:end -->")
    if path.suffix == ".rst":
        begin, end = (r"\.\. figures:\S+:begin", r"\.\. figures:\S+:end")
    return re.sub(rf"^{begin}$.*?^{end}$", "", text, flags=re.MULTILINE | re.DOTALL)


@pytest.mark.parametrize("page", ["README.md", "docs/performance.rst"])
def test_no_figure_is_typed_by_hand(page: str) -> None:
    """Outside the generated regions, no time, multiple of a PING or ratio is written."""
    typed = re.findall(r"\d[\d.,]*\s*(?:µs|\u00d7|x PING|times as)", outside_regions(ROOT / page))
    assert typed == []


def test_the_committed_run_checks_every_target_at_its_one_bound(results: dict[str, Any]) -> None:
    """The run's targets are harness.TARGETS, each at the bound written there, every one checked."""
    targets = bench_module("harness").TARGETS
    checked = results["targets"]
    assert {t["name"] for t in checked} == set(targets)
    for t in checked:
        assert (t["target"], t["at_most"]) == (targets[t["name"]].bound, targets[t["name"]].at_most)
        met = t["value"] <= t["target"] if t["at_most"] else t["value"] >= t["target"]
        assert t["met"] == met


def test_the_committed_run_is_a_full_one_and_small(results: dict[str, Any]) -> None:
    assert results["settings"]["quick"] is False
    assert results["command"] == "python benchmarks/suite.py"
    assert "samples_us" not in (ROOT / "benchmarks" / "results" / "suite.json").read_text(encoding="utf-8")


def toctree_pages() -> set[str]:
    """Every page named in ``docs/index.rst``'s toctrees."""
    pages = set()
    for block in re.findall(r"^\.\. toctree::\n((?:   .*\n|\n)+)", (ROOT / "docs" / "index.rst").read_text(), re.M):
        pages |= {line.strip() for line in block.splitlines() if line.strip() and not line.strip().startswith(":")}
    return pages


def test_readme_lists_every_docs_page() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Documentation", 1)[1].split("\n## ", 1)[0]
    listed = set(re.findall(r"`docs/([\w-]+)\.rst`", section))
    assert toctree_pages() - {"index"}, "no toctree found in docs/index.rst"
    assert listed == toctree_pages()
