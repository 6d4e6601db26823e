#!/usr/bin/env bash
# Install Debian's prometheus package (prometheus and promtool) when either is missing: the
# monitoring tests (tests/tooling/test_monitoring.py) check deploy/monitoring with them. Needs
# root and apt; CI (.ci/run) runs it before the tests. The package's own service is not
# started (the tests run a Prometheus of their own on a free port).
set -euo pipefail
if command -v prometheus >/dev/null && command -v promtool >/dev/null; then
  exit 0
fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
  echo "scripts/prometheus.sh: prometheus and promtool are missing; install Debian's prometheus" \
    "package as root (apt-get install prometheus)" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
# Keep the package's service from starting, where the machine would start it.
policy=/usr/sbin/policy-rc.d
made_policy=0
if [ ! -e "$policy" ]; then
  printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod +x "$policy" && made_policy=1
fi
trap 'if [ "$made_policy" = 1 ]; then rm -f "$policy"; fi' EXIT
apt-get install -y --no-install-recommends prometheus >/tmp/volcano-prometheus-install.log 2>&1 || {
  apt-get update -qq >/dev/null 2>&1
  apt-get install -y --no-install-recommends prometheus >/tmp/volcano-prometheus-install.log 2>&1 || {
    cat /tmp/volcano-prometheus-install.log >&2
    exit 1
  }
}
prometheus --version 2>&1 | head -1
