"""Run Flask-Limiter 4.1.1's own test suite against ``flask_redis_throttle.compat.flask_limiter``.

    python tests/peers/flask_limiter_suite.py [pytest arguments...]

It downloads Flask-Limiter's source distribution from PyPI with ``pip
download`` into a temporary folder (none of it is ever written into this
repository), and runs its ``tests/`` with the plugin
``flask_limiter_plugin.py``, which puts the shim in place of
``flask_limiter`` and starts ``redis-server`` on the port the tests expect.
It needs the ``peers`` extra (``pip install -e ".[peers]"``).

It prints how many passed, failed and were skipped, and exits 1 when a test
fails that ``flask_limiter_expected.txt`` does not list, each entry there
with its one-line reason. A listed test that passes is reported, so that
the list shrinks as the shim grows. ``test_storage.py`` is left out of the
pass rate: it tests the ``limits`` library's storages.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

VERSION = "4.1.1"
HERE = Path(__file__).resolve().parent
EXPECTED = HERE / "flask_limiter_expected.txt"
#: What the tests import beside Flask-Limiter itself: the ``peers`` extra.
NEEDED = ("limits", "pytest_mock", "pytest_check", "hiro", "pymemcache", "pymongo", "flask_restful")


def expected_failures() -> dict[str, str]:
    """The listed tests, each with its reason: ``<test id>  # <reason>`` per line."""
    listed = {}
    for number, line in enumerate(EXPECTED.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        test, sep, reason = line.partition("  # ")
        if not sep or not reason.strip():
            raise SystemExit(f"{EXPECTED.name}:{number}: give every test its reason: '<test id>  # <reason>'")
        listed[test.strip()] = reason.strip()
    return listed


def missing_modules() -> list[str]:
    import importlib.util

    return [name for name in NEEDED if importlib.util.find_spec(name) is None]


def fetch(folder: Path) -> Path:
    """Flask-Limiter's source distribution, downloaded and unpacked in ``folder``; its root."""
    download = ["download", "--quiet", "--no-deps", "--no-binary", ":all:", "-d", str(folder)]
    subprocess.run([sys.executable, "-m", "pip", *download, f"flask-limiter=={VERSION}"], check=True)
    (archive,) = folder.glob("*.tar.gz")
    with tarfile.open(archive) as tar:
        if hasattr(tarfile, "data_filter"):  # Python 3.10.12 and later: refuse links and paths out of the folder
            tar.extractall(folder, filter="data")
        else:
            tar.extractall(folder)  # an sdist fetched from PyPI by pip
    return folder / f"flask_limiter-{VERSION}"


def run(root: Path, outcomes: Path, arguments: list[str]) -> None:
    env = dict(os.environ, FRT_PEER_OUTCOMES=str(outcomes))
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), env.get("PYTHONPATH")]))
    command = [sys.executable, "-m", "pytest", "tests", "-p", "flask_limiter_plugin", "-p", "no:cacheprovider"]
    # Their pytest.ini asks for coverage and -s; their tests warn where ours turn warnings into errors.
    command += ["-o", "addopts=", "-q", "--tb=short", "-W", "default", *arguments]
    subprocess.run(command, cwd=root, env=env, check=False)


def report(outcomes: Path, listed: dict[str, str], whole: bool) -> int:
    """Print the counts and what disagrees with the list; 1 if a test outside it failed.

    :param whole: whether the whole suite ran, so that a listed test that did not run is worth saying.
    """
    results = {}
    for line in outcomes.read_text(encoding="utf-8").splitlines():
        entry = json.loads(line)
        results[entry["test"]] = entry
    counted = {test: entry for test, entry in results.items() if not test.startswith("tests/test_storage.py")}
    counts = {kind: sum(e["outcome"] == kind for e in counted.values()) for kind in ("passed", "failed", "skipped")}
    print(f"\nFlask-Limiter {VERSION}'s tests against the shim, outside test_storage.py:")
    print(f"  passed {counts['passed']}, failed {counts['failed']}, skipped {counts['skipped']}, of {len(counted)}")
    if counted:
        print(f"  pass rate: {counts['passed'] / len(counted):.1%} of all, skipped ones counted as not passed")
    unexpected = sorted(t for t, e in results.items() if e["outcome"] == "failed" and t not in listed)
    fixed = sorted(t for t in listed if results.get(t, {}).get("outcome") == "passed")
    gone = sorted(t for t in listed if t not in results) if whole else []
    for test in fixed:
        print(f"  listed but passed now (remove it from {EXPECTED.name}): {test}")
    for test in gone:
        print(f"  listed but not run: {test}")
    for test in unexpected:
        print(f"  FAILED, not listed: {test}")
    print("  every failure is listed" if not unexpected else f"  {len(unexpected)} unlisted failure(s)")
    return 1 if unexpected else 0


def main(arguments: list[str]) -> int:
    listed = expected_failures()
    missing = missing_modules()
    if missing:
        print(f"Flask-Limiter's tests need {', '.join(missing)}: pip install -e '.[peers]'", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="flask-limiter-suite-") as temporary:
        folder = Path(temporary)
        root = fetch(folder)
        outcomes = folder / "outcomes.jsonl"
        outcomes.touch()
        run(root, outcomes, arguments)
        return report(outcomes, listed, whole=not arguments)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
