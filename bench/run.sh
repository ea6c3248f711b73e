#!/usr/bin/env bash
# Runs benchmark harnesses: bench/run.sh overhead|balance|scale|profile|path|prefix|multi-router|apis|fairness|limits|lora|kv-events|all|smoke
#   all    every harness, full length; reports land in bench/results/
#   smoke  every harness for a few seconds (what CI runs); reports land in .bench/smoke/, no thresholds
# Builds first. As root it runs inside a private network namespace (only a loopback), because Portkey's
# gateway listens on every interface; without root Portkey is skipped.
set -euo pipefail
cd "$(dirname "$0")/.."
what="${1:-all}"
case "$what" in
  overhead | balance | scale | profile | path | prefix | multi-router | apis | fairness | limits | lora | kv-events) names=("$what") ;;
  all) names=(overhead balance scale profile path prefix multi-router apis fairness limits lora kv-events) ;;
  smoke) names=(overhead balance scale profile path prefix multi-router apis fairness limits lora kv-events); export BENCH_SMOKE=1 BENCH_OUT="$PWD/.bench/smoke" ;;
  *) echo "usage: bench/run.sh overhead|balance|scale|profile|path|prefix|multi-router|apis|fairness|limits|lora|kv-events|all|smoke" >&2; exit 2 ;;
esac
npm run --silent build
npx --no-install tsc -p tsconfig.bench.json
node=node_modules/.bin/node
run() {
  local script=".bench/bench/$1.js"
  if [ "$(id -u)" = 0 ] && command -v unshare >/dev/null; then
    unshare -n bash -c "ip link set lo up && exec $node --expose-gc $script"
  else
    echo "bench: not root: no private network namespace, Portkey skipped" >&2
    BENCH_NO_PORTKEY=1 "$node" --expose-gc "$script"
  fi
}
for name in "${names[@]}"; do
  start=$(date +%s)
  if [ "$what" = smoke ]; then run "$name" >/dev/null; else run "$name"; fi
  echo "bench: $name done in $(($(date +%s) - start)) s" >&2
done
