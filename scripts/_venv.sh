# Sourced by the scripts: make .venv (or $VOLCANO_VENV) hold this project with the given extras.
# Usage: ensure_venv EXTRAS   e.g. ensure_venv dev  or  ensure_venv server
# Reinstalls only when pyproject.toml or the extras changed since the last install.
ensure_venv() {
  local extras=$1
  local root; root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
  local python=${PYTHON:-python3}
  VENV=${VOLCANO_VENV:-$root/.venv}
  if ! "$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
    echo "volcano needs Python 3.11 or newer; '$python' is $("$python" --version 2>&1). Set PYTHON=python3.X." >&2
    return 1
  fi
  local stamp; stamp=$(cksum <"$root/pyproject.toml")
  local have; have=$(cat "$VENV/.volcano-installed" 2>/dev/null || true)
  # dev holds every other extra (and bench holds dev), so those installs serve smaller requests.
  if [ -x "$VENV/bin/python" ] && { [ "$have" = "$extras $stamp" ] || [ "$have" = "bench $stamp" ] \
       || { [ "$have" = "dev $stamp" ] && [ "$extras" != "bench" ]; }; }; then
    return 0
  fi
  local want="$extras $stamp"
  echo "setting up $VENV with volcano[$extras] (first run takes a minute)" >&2
  [ -x "$VENV/bin/python" ] || "$python" -m venv "$VENV"
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip >"$VENV/install.log" 2>&1 \
    && "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -e "$root[$extras]" >>"$VENV/install.log" 2>&1 \
    || { cat "$VENV/install.log" >&2; echo "installing volcano[$extras] failed (log above)" >&2; return 1; }
  printf '%s' "$want" >"$VENV/.volcano-installed"
}
