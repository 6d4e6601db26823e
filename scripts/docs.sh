#!/usr/bin/env bash
# The reference site (mkdocs.yml): the SDK's API from its docstrings, the HTTP API from
# openapi.yaml, the operator's guide. Builds site/ with warnings as errors; open site/index.html.
# Extra arguments go to `mkdocs build` (e.g. scripts/docs.sh -d /tmp/site).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
. "$root/scripts/_venv.sh"
ensure_venv docs
cd "$root"
"$VENV/bin/mkdocs" build --strict --quiet "$@"
echo "docs.sh: built the reference site; open $root/site/index.html (no web server needed)"
