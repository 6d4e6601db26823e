#!/usr/bin/env bash
# The seed's walkthrough on a fresh machine: makes .venv with volcano[server], starts a local
# reference server on SQLite in a temporary directory, makes a project's keys, runs
# examples/walkthrough.py against it, and stops the server.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
. "$root/scripts/_venv.sh"
ensure_venv server

work=$(mktemp -d "${TMPDIR:-/tmp}/volcano-walkthrough.XXXXXX")
server_pid=""
cleanup() {
  local status=$?
  if [ -n "$server_pid" ] && kill -0 "$server_pid" 2>/dev/null; then
    kill -TERM "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
    echo "== server stopped"
  fi
  rm -rf "$work"
  if [ "$status" -eq 0 ]; then
    echo "walkthrough.sh: made a project's keys, started volcano-server on ${url:-?} (SQLite in a" \
      "temporary directory), ran every section of examples/walkthrough.py against it, stopped" \
      "the server and removed the directory"
  else
    echo "walkthrough.sh: failed (status $status); the lines above say where" >&2
  fi
}
trap cleanup EXIT

db="sqlite:///$work/volcano.db"
echo "== making keys for project 'walkthrough' in $db"
"$VENV/bin/volcano-server" keys create --project walkthrough --db "$db" >"$work/keys.env"
set -a; . "$work/keys.env"; set +a
echo "   VOLCANO_ANON_KEY and VOLCANO_SERVICE_KEY set (not shown: they are secrets)"

"$VENV/bin/volcano-server" serve --port 0 --db "$db" --no-access-log 2>"$work/server.log" &
server_pid=$!
for _ in $(seq 1 200); do
  url=$(grep -o 'listening on http://[^ ]*' "$work/server.log" | head -n 1 | cut -d' ' -f3 || true)
  [ -n "$url" ] && break
  kill -0 "$server_pid" 2>/dev/null || { cat "$work/server.log" >&2; echo "the server did not start" >&2; exit 1; }
  sleep 0.05
done
[ -n "${url:-}" ] || { cat "$work/server.log" >&2; echo "the server did not start in time" >&2; exit 1; }
echo "== local reference server listening on $url"
export VOLCANO_API_URL="$url"

"$VENV/bin/python" "$root/examples/walkthrough.py"
