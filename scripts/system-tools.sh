#!/usr/bin/env bash
# The system programs the test suite starts on 127.0.0.1 (it never skips a test for want of one):
#   redis-server       the shared-limits tests (their own instances)
#   prometheus/promtool the dashboard and alert-rule tests (their own Prometheus)
#   chromium           the status page test (puppeteer-core drives it; it never downloads a browser)
#   openssl            the https engine test (it makes its certificates)
# Installs the missing ones from Debian's packages when it can (root, apt), else names them and fails.
# Run by `npm test` (pretest) and by .ci/run; quiet when everything is there (--versions prints them).
set -euo pipefail
declare -A package=([redis-server]=redis-server [prometheus]=prometheus [promtool]=prometheus [chromium]=chromium [openssl]=openssl)
missing=()
for cmd in redis-server prometheus promtool chromium openssl; do
  # Ubuntu names the browser chromium-browser (test/helpers/chromium.ts takes either)
  [ "$cmd" = chromium ] && command -v chromium-browser >/dev/null && continue
  command -v "$cmd" >/dev/null || missing+=("${package[$cmd]}")
done
if [ ${#missing[@]} -gt 0 ]; then
  mapfile -t missing < <(printf '%s\n' "${missing[@]}" | sort -u)
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "installing ${missing[*]} (Debian's packages; the tests start their own instances)"
    export DEBIAN_FRONTEND=noninteractive
    { apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null; }; } \
      || { echo "cannot install ${missing[*]}: install them and run again" >&2; exit 1; }
    # the packages start system services; the tests run their own
    for service in redis-server prometheus; do (service "$service" stop) >/dev/null 2>&1 || true; done
  else
    echo "the tests need ${missing[*]} on PATH: install them (on Debian or Ubuntu: apt-get install ${missing[*]}) and run again" >&2
    exit 1
  fi
fi
if [ "${1:-}" = --versions ]; then
  redis-server --version
  prometheus --version 2>&1 | head -1
  chromium --version 2>/dev/null || chromium-browser --version 2>/dev/null
  openssl version
fi
