#!/usr/bin/env bash
# The whole test suite, from a fresh machine: makes .venv, installs volcano[dev], runs pytest.
# Extra arguments go to pytest (e.g. scripts/test.sh tests/unit -x).
# Needs PostgreSQL on 127.0.0.1:5432 (trust auth) for the postgres-marked tests; set
# VOLCANO_TEST_POSTGRES_URL to aim them elsewhere.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
. "$root/scripts/_venv.sh"
ensure_venv dev
cd "$root"
mkdir -p reports
if [ $# -eq 0 ]; then
  # The whole suite runs in $VOLCANO_TEST_WORKERS processes (pytest-xdist; 2 by default): it
  # waits on ttls, servers and timeouts more than it computes. Tests that share something only
  # one may use at a time say so with xdist_group. The figures of CI's machine (2 cores);
  # CONTRIBUTING.md lists the tiers in between.
  echo "scripts/test.sh: every test (unit, integration, contract, faults), about 13 minutes on" \
    "2 cores; the unit tests alone: scripts/test.sh tests/unit (about 20 s)" >&2
  set -- -n "${VOLCANO_TEST_WORKERS:-2}" --dist loadgroup
fi
exec "$VENV/bin/python" -m pytest --junitxml=reports/junit.xml "$@"
