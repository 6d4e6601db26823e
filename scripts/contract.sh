#!/usr/bin/env bash
# Check any Volcano server against openapi.yaml with the contract suite (schemathesis: every
# phase, every check, positive and negative data, real credentials).
#
#   VOLCANO_ANON_KEY=... VOLCANO_SERVICE_KEY=... scripts/contract.sh URL [pytest arguments]
#
# Optional: VOLCANO_OTHER_SERVICE_KEY (another project's service key: the server must refuse it),
# VOLCANO_CONTRACT_REPORTS (the folder for junit.xml and contract-stats.json; default
# reports/contract). The suite takes locks on keys it generates and releases them; run it
# against a project of its own.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
if [ $# -lt 1 ] || [[ "$1" == -* ]]; then
  sed -n '2,12p' "$0" >&2
  exit 2
fi
url=$1; shift
for name in VOLCANO_ANON_KEY VOLCANO_SERVICE_KEY; do
  [ -n "${!name:-}" ] || { echo "contract.sh: set $name to the project's key" >&2; exit 2; }
done
. "$root/scripts/_venv.sh"
ensure_venv dev
reports=${VOLCANO_CONTRACT_REPORTS:-$root/reports/contract}
mkdir -p "$reports"
cd "$root"
"$VENV/bin/python" -m pytest tests/contract --contract-url "$url" --junitxml="$reports/junit.xml" "$@"
status=$?
[ -f reports/contract-stats.json ] && cp reports/contract-stats.json "$reports/" || true
echo "contract.sh: JUnit report in $reports/junit.xml"
exit $status
