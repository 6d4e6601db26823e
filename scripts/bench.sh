#!/usr/bin/env bash
# Every benchmark in one run: makes .venv with volcano[bench], then python -m bench "$@".
# Prints a table of medians with min and max and writes bench/results/{results.json,chart.png}.
# Full run: about 20 minutes; --quick: about 2. PostgreSQL (127.0.0.1:5432) and Redis
# (127.0.0.1:6379) are used when reachable.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
. "$root/scripts/_venv.sh"
ensure_venv bench
cd "$root"
exec "$VENV/bin/python" -m bench "$@"
