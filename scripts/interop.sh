#!/usr/bin/env bash
# openapi.yaml with tools nobody here wrote, as they come, against a real reference server:
#   - openapi-generator-cli validate, Redocly lint, Spectral (spectral:oas, failing on hints),
#     swagger-cli validate;
#   - three clients generated from openapi.yaml run the scenario of interop/scenario.{ts,py}
#     (acquire, get, renew, conflict with Retry-After, release, force release, replay with an
#     upper-case caller-supplied owner token and request id; then a limit-2 key with labelled
#     holders, lock_held and limit_mismatch with its limit, the fence check, a long-poll watch
#     answered by a change from a second request, a waiter handed a released slot, a listing
#     with limit=1 followed to its end, the holders paged one by one, a batch renewal with one
#     entry refused; shared locks:
#     two shared holders and their modes, a writer refused, then in line and not passed by a
#     later reader, mode_mismatch, shared_with_limit; then every group operation: members with
#     JSON and bytes capabilities, a group's watch, a batch of memberships, group_not_empty,
#     groups paged) through
#     interop/validating_proxy.py, where openapi-core checks every request and response and
#     each client must have called every `locks` and `groups` operation: TypeScript (openapi-typescript
#     types, openapi-fetch, tsc --strict), Python (datamodel-code-generator models with httpx)
#     and Python (openapi-generator's client);
#   - a plain `schemathesis run` with only the two credential headers.
# Node packages are pinned by interop/package-lock.json (npm ci into interop/node_modules), the
# Python tools by interop/requirements.txt (their own venv, .cache/interop-venv, or
# $VOLCANO_INTEROP_VENV: never the project's .venv). Needs Node.js 20+, Java 17+ (for
# openapi-generator) and Python 3.11+; about two minutes once both are
# installed (2¼ at load 4 on 2 cores, 3 at load 8; the three scenarios take about 10 s of it).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
. "$root/scripts/_venv.sh"
ensure_venv server # the reference server, from the project's own venv
interop=$root/interop
spec=$root/openapi.yaml
start=$(date +%s)
say() { echo "== $* ($(($(date +%s) - start))s)"; }

for tool in node npm java; do
  command -v "$tool" >/dev/null || { echo "interop.sh: '$tool' is needed and not on PATH" >&2; exit 1; }
done

# Python tools: rebuilt whenever their pins change (the way regen.sh keeps its generator).
tools=${VOLCANO_INTEROP_VENV:-$root/.cache/interop-venv}
if ! cmp -s "$interop/requirements.txt" "$tools/.volcano-pins" 2>/dev/null; then
  say "installing the pinned Python tools in $tools"
  rm -rf "$tools"
  "${PYTHON:-python3}" -m venv "$tools"
  "$tools/bin/python" -m pip install --quiet --disable-pip-version-check --require-virtualenv \
    -r "$interop/requirements.txt" >"$tools/install.log" 2>&1 || { cat "$tools/install.log" >&2; exit 1; }
  cp "$interop/requirements.txt" "$tools/.volcano-pins"
fi
# Node packages: npm ci from the lockfile (install scripts off: none of these tools needs one).
if ! cmp -s "$interop/package-lock.json" "$interop/node_modules/.volcano-lock" 2>/dev/null; then
  say "installing the pinned Node packages in interop/node_modules"
  (cd "$interop" && npm ci --no-audit --no-fund --ignore-scripts --loglevel=error)
  cp "$interop/package-lock.json" "$interop/node_modules/.volcano-lock"
fi
bin=$interop/node_modules/.bin
export NO_UPDATE_NOTIFIER=1 REDOCLY_TELEMETRY=off REDOCLY_SUPPRESS_UPDATE_NOTICE=true

say "versions"
node_version() { node -p "require('$interop/node_modules/$1/package.json').version"; }
for package in openapi-typescript openapi-fetch typescript @redocly/cli @stoplight/spectral-cli \
  @apidevtools/swagger-cli; do
  printf '  %-28s %s\n' "$package" "$(node_version "$package")"
done
"$tools/bin/python" - <<'PY'
import importlib.metadata as m
for name in ("openapi-core", "datamodel-code-generator", "openapi-generator-cli", "schemathesis"):
    print(f"  {name:28} {m.version(name)}")
PY
printf '  %-28s %s\n' node "$(node --version)" java "$(java -version 2>&1 | head -n 1)"

say "openapi-generator-cli validate"
"$tools/bin/openapi-generator-cli" validate -i "$spec"
say "redocly lint (the project's redocly.yaml: recommended-strict)"
(cd "$root" && "$bin/redocly" lint --format=stylish openapi.yaml 2>&1 | grep -v -e '[╔║╚]' -e '^\s*$')
say "spectral lint (spectral:oas, failing on anything down to a hint)"
"$bin/spectral" lint --ruleset "$interop/.spectral.yaml" --fail-severity hint "$spec"
say "swagger-cli validate"
"$bin/swagger-cli" validate "$spec"

say "generating the clients from openapi.yaml"
out=$interop/out
rm -rf "$out" && mkdir -p "$out"
generated() { # run a generator; fail when it warns, as regen.sh does with its own
  "$@" >"$out/generator.log" 2>&1 || { cat "$out/generator.log" >&2; exit 1; }
  if grep -qiE "warn|error" "$out/generator.log"; then
    cat "$out/generator.log" >&2; echo "interop.sh: $1 reported problems with openapi.yaml" >&2; exit 1
  fi
}
generated "$bin/openapi-typescript" "$spec" --output "$out/schema.d.ts"
(cd "$interop" && "$bin/tsc" -p tsconfig.json)
generated "$tools/bin/datamodel-codegen" --input "$spec" --input-file-type openapi \
  --output-model-type pydantic_v2.BaseModel --formatters builtin --target-python-version 3.11 \
  --output "$out/volcano_models.py"
# openapi-generator logs a WARN of its own for any spec (3.1 support in beta; "Failed to get the
# schema name: null" even for a one-operation document), so its exit status judges: `generate`
# validates the spec first and refuses an invalid one.
"$tools/bin/openapi-generator-cli" generate -i "$spec" -g python -o "$out/og" \
  --package-name volcano_og >"$out/openapi-generator.log" 2>&1 \
  || { cat "$out/openapi-generator.log" >&2; exit 1; }

work=$(mktemp -d "${TMPDIR:-/tmp}/volcano-interop.XXXXXX")
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
listening() { # the URL a background process printed in $1, once it is up
  local pid=$2
  for _ in $(seq 1 300); do
    url=$(grep -o 'listening on http://[^ ]*' "$1" | head -n 1 | cut -d' ' -f3 || true)
    [ -n "$url" ] && { echo "$url"; return 0; }
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.05
  done
  cat "$1" >&2; return 1
}

say "starting a reference server and the validating proxy"
db="sqlite:///$work/volcano.db"
"$VENV/bin/volcano-server" keys create --project interop --db "$db" >"$work/keys.env"
set -a; . "$work/keys.env"; set +a
# --max-wait 1: the plain schemathesis run below sends valid wait_seconds up to 60 to keys its
# own earlier cases hold; each such request then waits a second, not a minute (the answer, 409
# lock_held, is the same either way).
"$VENV/bin/volcano-server" serve --port 0 --db "$db" --no-access-log --max-wait 1 \
  2>"$work/server.log" &
pids+=($!)
server=$(listening "$work/server.log" $!) || { echo "interop.sh: the server did not start" >&2; exit 1; }
"$tools/bin/python" "$interop/validating_proxy.py" serve "$spec" "$server" "$work/exchanges.jsonl" \
  >"$work/proxy.log" 2>&1 &
pids+=($!)
proxy=$(listening "$work/proxy.log" $!) || { echo "interop.sh: the proxy did not start" >&2; exit 1; }
echo "  server $server, proxy $proxy"

say "scenario: TypeScript (openapi-typescript + openapi-fetch)"
node "$out/js/scenario.js" "$proxy"
say "scenario: Python (datamodel-code-generator models + httpx)"
"$tools/bin/python" "$interop/scenario.py" datamodel "$proxy"
say "scenario: Python (openapi-generator's client)"
"$tools/bin/python" "$interop/scenario.py" openapi-generator "$proxy"
say "openapi-core: every request and response of the scenarios"
"$tools/bin/python" "$interop/validating_proxy.py" summary "$spec" "$work/exchanges.jsonl" \
  ts datamodel openapigenerator

say "schemathesis run, plain, with only the credentials"
(cd "$work" && "$tools/bin/schemathesis" run "$spec" --url "$server" \
  -H "apikey: $VOLCANO_ANON_KEY" -H "Authorization: Bearer $VOLCANO_SERVICE_KEY")
say "done: every tool accepted openapi.yaml"
