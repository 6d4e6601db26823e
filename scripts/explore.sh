#!/usr/bin/env bash
# The schedule explorer with a longer budget than CI's, then the broken rules it must catch.
#   scripts/explore.sh [N]          N fresh schedules per backend, of up to 80 steps (default 2000)
#   scripts/explore.sh N --no-mutations
# Then runs tests/explorer/mutations with CI's budget (each broken rule on a scratch copy) and
# prints its table; exits non-zero if the explorer found anything or missed a mutation.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
. "$root/scripts/_venv.sh"
ensure_venv dev
cd "$root"
budget=${1:-2000}
status=0
"$VENV/bin/python" -m pytest tests/explorer/test_schedules.py -p no:cacheprovider -q \
  --explore="$budget" || status=$?
if [ "${2:-}" != "--no-mutations" ]; then
  "$VENV/bin/python" -m tests.explorer.mutations || status=$?
fi
exit "$status"
