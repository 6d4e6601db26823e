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
exec "$VENV/bin/python" -m pytest --junitxml=reports/junit.xml "$@"
