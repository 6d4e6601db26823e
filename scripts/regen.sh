#!/usr/bin/env bash
# Regenerate generated/ from openapi.yaml with exactly pinned openapi-python-client and ruff.
#
#   scripts/regen.sh                 rewrite generated/ from openapi.yaml
#   scripts/regen.sh --check         exit 1 and print the diff when generated/ is stale
#   scripts/regen.sh --spec FILE     generate from FILE instead of openapi.yaml (with --check: would
#                                    FILE produce what generated/ holds?)
#
# The generator runs in a temporary directory with an empty config home and `ruff --isolated`, so
# neither this project's ruff settings nor a user's leak into the output. Its tools live in their
# own virtual environment (.cache/regen-venv, or $VOLCANO_REGEN_VENV), pinned by
# scripts/regen-requirements.txt and rebuilt whenever those pins change.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
spec="$root/openapi.yaml"
check=0
while [ $# -gt 0 ]; do
  case "$1" in
    --check) check=1 ;;
    --spec) [ $# -ge 2 ] || { echo "regen.sh: --spec needs a file" >&2; exit 2; }
            spec=$(cd "$(dirname "$2")" && pwd)/$(basename "$2"); shift ;;
    -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
    *) echo "regen.sh: unknown argument '$1' (try --help)" >&2; exit 2 ;;
  esac
  shift
done
[ -f "$spec" ] || { echo "regen.sh: no spec at $spec" >&2; exit 2; }

python=${PYTHON:-python3}
requirements="$root/scripts/regen-requirements.txt"
venv=${VOLCANO_REGEN_VENV:-$root/.cache/regen-venv}
stamp="$venv/.volcano-pins"
# Two runs at once (two terminals, the test suite's workers) would build the environment over
# each other: the second waits for the first (flock, where the system has it).
mkdir -p "$(dirname "$venv")"
if command -v flock >/dev/null; then
  exec 9>"$venv.lock"
  flock 9
fi
if ! cmp -s "$requirements" "$stamp" 2>/dev/null; then
  echo "regen.sh: building the generator environment in $venv" >&2
  rm -rf "$venv"
  "$python" -m venv "$venv"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
    --require-virtualenv -r "$requirements" >"$venv/install.log" 2>&1 \
    || { cat "$venv/install.log" >&2; exit 1; }
  cp "$requirements" "$stamp"
fi
version=$("$venv/bin/python" -c 'import importlib.metadata as m; print(m.version("openapi-python-client"))')
ruff_version=$("$venv/bin/python" -c 'import importlib.metadata as m; print(m.version("ruff"))')

work=$(mktemp -d "${TMPDIR:-/tmp}/volcano-regen.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/config" "$work/out"
(
  cd "$work"
  PATH="$venv/bin:$PATH" XDG_CONFIG_HOME="$work/config" RUFF_CACHE_DIR="$work/ruff-cache" \
    "$venv/bin/openapi-python-client" generate --path "$spec" --meta none \
      --config "$root/scripts/openapi-python-client.yaml" \
      --output-path "$work/out/_volcano_api" >"$work/generate.log" 2>&1 \
    || { cat "$work/generate.log" >&2; exit 1; }
  # The generator reports spec problems as warnings and still exits 0: treat them as errors.
  if grep -qiE "warning|error" "$work/generate.log"; then
    cat "$work/generate.log" >&2
    echo "regen.sh: the generator reported problems with $spec" >&2
    exit 1
  fi
)
rm -rf "$work/out/_volcano_api/.ruff_cache"
# The generated code is fully annotated; py.typed lets mypy read it when checking volcano/.
: >"$work/out/_volcano_api/py.typed"
cat >"$work/out/README.md" <<TXT
# generated/ (do not edit)

\`_volcano_api\` is generated from \`../openapi.yaml\` by \`scripts/regen.sh\` with
openapi-python-client $version and ruff $ruff_version (pinned in \`scripts/regen-requirements.txt\`).
Edit the spec and run \`scripts/regen.sh\`; CI runs \`scripts/regen.sh --check\` and fails on drift.
Only \`volcano/_transport.py\` imports it; users import \`volcano\`.
TXT

if [ "$check" = 1 ]; then
  if diff -ruN --exclude=__pycache__ "$root/generated" "$work/out" >"$work/diff"; then
    echo "regen.sh: generated/ matches $(basename "$spec")"
    exit 0
  fi
  cat "$work/diff"
  echo "regen.sh: generated/ is stale: run scripts/regen.sh and commit the result" >&2
  exit 1
fi
rm -rf "$root/generated"
cp -R "$work/out" "$root/generated"
echo "regen.sh: wrote generated/ from $(basename "$spec")"
