#!/usr/bin/env bash
# The reference site (mkdocs.yml): the guide (the README's sections), the SDK's API from its
# docstrings, the HTTP API from openapi.yaml, the operator's guide. Builds site/ with warnings
# as errors; open site/index.html: it works from the file system, search included.
# Extra arguments go to `mkdocs build` (e.g. scripts/docs.sh -d /tmp/site).
# scripts/site-check.sh SITE OUT looks at the built site in headless Chromium.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
. "$root/scripts/_venv.sh"
ensure_venv docs
cd "$root"
# Material's notice of its end of life (May 2027) on every build is not a warning about the site.
NO_MKDOCS_2_WARNING=1 "$VENV/bin/mkdocs" build --strict --quiet "$@"
echo "docs.sh: built the reference site; open $root/site/index.html (no web server needed," \
  "search included)"
