#!/usr/bin/env bash
# Installs what the benchmarks compare against and need: nginx, HAProxy and redis-server from Debian's
# packages, and Portkey's gateway (pinned) under bench/portkey. Idempotent.
set -euo pipefail
cd "$(dirname "$0")"
if ! command -v nginx >/dev/null || ! command -v haproxy >/dev/null || ! command -v redis-server >/dev/null; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends nginx-light haproxy redis-server >/dev/null
  # the packages start system services; the benchmarks run their own instances
  (service nginx stop; service haproxy stop; service redis-server stop) >/dev/null 2>&1 || true
fi
if [ ! -x portkey/node_modules/.bin/gateway ]; then
  (cd portkey && npm install --no-audit --no-fund --silent >/dev/null)
fi
echo "bench setup: $(nginx -v 2>&1), $(haproxy -v | head -1), portkey $(node -p "require('./portkey/node_modules/@portkey-ai/gateway/package.json').version")"
