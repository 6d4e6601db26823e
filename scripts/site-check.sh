#!/usr/bin/env bash
# The built reference site as a reader sees it, in headless Chromium (Debian's `chromium`,
# installed with apt-get when missing, as root): screenshots of a few pages at 1024, 1280, 1440
# and 1920 px wide, the layout probe (scripts/site_probe.html: a page scrolling sideways, a
# wrapped header, a sidebar over the body, a name overflowing its box), and a search typed into
# a page opened from the file system, as the README says to open it.
#
# Usage: scripts/site-check.sh SITE_DIR OUT_DIR
# Writes OUT_DIR/<page>-<width>.png (look at them), OUT_DIR/layout.jsonl (one object per page
# and width, with its "problems"), and OUT_DIR/search.html (the page after searching).
# SITE_CHECK_SHOTS, SITE_CHECK_SHOT_WIDTHS, SITE_CHECK_PAGES, SITE_CHECK_WIDTHS change the lists.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
site=$(cd "$1" && pwd)
out=$(mkdir -p "$2" && cd "$2" && pwd)
# Screenshots take a browser each (about 2 s): a guide page and an API page at three widths.
shots=${SITE_CHECK_SHOTS:-reference/client.html guide/the-volcano-command.html}
shot_widths=${SITE_CHECK_SHOT_WIDTHS:-1024 1280 1920}
# The probe takes one browser for every page and width.
pages=${SITE_CHECK_PAGES:-index.html reference/client.html reference/async.html reference/errors.html guide/quick-start.html guide/the-volcano-command.html http.html production.html}
widths=${SITE_CHECK_WIDTHS:-1024 1280 1440 1920}

if ! command -v chromium >/dev/null; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "site-check.sh: needs Chromium: apt-get install chromium (as root)" >&2
    exit 3
  fi
  echo "site-check.sh: installing Debian's chromium (once)" >&2
  apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium fonts-dejavu-core >/dev/null
fi

# A browser of its own for each call: a throwaway profile, no network but the files.
browse() {
  local profile; profile=$(mktemp -d)
  timeout 90 chromium --headless --no-sandbox --disable-gpu --disable-background-networking \
    --disable-extensions --no-first-run --hide-scrollbars --user-data-dir="$profile" "$@" \
    2>/dev/null || true
  rm -rf "$profile"
}

for page in $shots; do
  name=$(echo "${page%.html}" | tr / -)
  for width in $shot_widths; do
    browse --window-size="$width,1000" --screenshot="$out/$name-$width.png" "file://$site/$page"
  done
done

list=$(echo "$pages" | tr ' ' ',')
sizes=$(echo "$widths" | tr ' ' ',')
cp "$root/scripts/site_probe.html" "$site/.site_probe.html"
browse --allow-file-access-from-files --virtual-time-budget=30000 --window-size=2000,1000 \
  --dump-dom "file://$site/.site_probe.html?pages=$list&widths=$sizes" >"$out/probe.html"
rm -f "$site/.site_probe.html"
python3 - "$out/probe.html" >"$out/layout.jsonl" <<'PROBE'
import html, re, sys
found = re.search(r'<pre id="result">(.*?)</pre>', open(sys.argv[1]).read(), re.S)
print(html.unescape(found.group(1)).strip() if found else '{"problems": ["the probe wrote nothing"]}')
PROBE

browse --virtual-time-budget=15000 --window-size=1280,1000 \
  --dump-dom "file://$site/index.html?q=with_lock" >"$out/search.html"
problems=$(grep -c '"problems": *\[[^]]' "$out/layout.jsonl" || true)
echo "site-check.sh: $(ls "$out"/*.png | wc -l) screenshots, the layout probe ($problems of" \
  "$(wc -l <"$out/layout.jsonl") page widths with problems: layout.jsonl) and a search, in $out"
