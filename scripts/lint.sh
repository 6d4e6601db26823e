#!/usr/bin/env bash
# Static checks of the hand-written code (ruff lint and format, mypy strict) and of openapi.yaml
# (openapi-spec-validator and Redocly CLI, both pinned).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
. "$root/scripts/_venv.sh"
ensure_venv dev
cd "$root"
REDOCLY_VERSION=2.77.0

echo "== ruff check"; "$VENV/bin/ruff" check .
echo "== ruff format --check"; "$VENV/bin/ruff" format --check .
echo "== mypy --strict"; "$VENV/bin/mypy"
echo "== openapi-spec-validator"; "$VENV/bin/openapi-spec-validator" openapi.yaml
echo "== redocly lint (@redocly/cli@$REDOCLY_VERSION)"
command -v npx >/dev/null || { echo "lint.sh: npx (Node.js) is needed for Redocly CLI" >&2; exit 1; }
NO_UPDATE_NOTIFIER=1 REDOCLY_TELEMETRY=off REDOCLY_SUPPRESS_UPDATE_NOTICE=true \
  npx --yes "@redocly/cli@$REDOCLY_VERSION" lint --format=stylish openapi.yaml 2>&1 \
  | grep -v -e '[╔║╚]' -e '^\s*$'   # drop Redocly's boxed Node.js notice; pipefail keeps its status
