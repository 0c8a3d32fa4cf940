#!/usr/bin/env bash
# Instructions per query, counted by callgrind: a steady figure for comparing builds on a
# shared machine. Runs `tsdb tsd` under valgrind over an existing data directory (one kept by
# `HOURGLASS_BENCH_KEEP=1 hourglass-bench rollups ...`), with computing off, and for each
# query path given: 3 warm-up runs, then the counters zeroed, RUNS counted runs (default 2),
# a dump; prints the instructions per query (every thread of the TSD counted).
#
#   crates/bench/tools/query-instructions.sh TSDB BENCH_DIR 'QUERY_PATH' ['QUERY_PATH' ...]
#
# BENCH_DIR is the directory the bench printed (it holds data/ and rollups.json); a query
# path is what follows the address, e.g.
# '/api/query?start=S&end=E&m=avg:1h-avg:rollup_nofallback:bench.rollup&nocache'.
#
# OUT=DIR in the environment keeps each query's dump there (q1.out, q2.out, ...: read them
# with callgrind_annotate). Needs valgrind (apt-get install valgrind) and python3.
set -euo pipefail
tsdb=${1:?usage: query-instructions.sh TSDB BENCH_DIR QUERY_PATH...}
dir=${2:?usage: query-instructions.sh TSDB BENCH_DIR QUERY_PATH...}
shift 2
runs=${RUNS:-2}
work=$(mktemp -d)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
printf 'tsd.rollups.enable = true\ntsd.rollups.config = %s\n' "$dir/rollups.json" >"$work/opentsdb.conf"
valgrind --tool=callgrind --callgrind-out-file="$work/callgrind.out" "$tsdb" tsd \
  --bind 127.0.0.1 --port "$port" --data-dir "$dir/data" --config "$work/opentsdb.conf" \
  >"$work/tsd.log" 2>&1 &
pid=$!
trap 'kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; rm -rf "$work"' EXIT
python3 - "$port" <<'PY'
import socket, sys, time
deadline = time.time() + 300
while True:
    try:
        socket.create_connection(("127.0.0.1", int(sys.argv[1]))).close()
        break
    except OSError:
        if time.time() > deadline:
            sys.exit("the TSD did not start")
        time.sleep(0.5)
PY
get() { curl -sf -o /dev/null "http://127.0.0.1:$port$1"; }
n=0
for q in "$@"; do
  for _ in 1 2 3; do get "$q"; done
  callgrind_control -z "$pid" >/dev/null 2>&1
  for _ in $(seq "$runs"); do get "$q"; done
  callgrind_control -d "$pid" >/dev/null 2>&1
  n=$((n + 1))
  # The newest dump's total (`summary:` or `totals:` line).
  file=$(ls -t "$work"/callgrind.out.* | head -1)
  total=$(grep -E '^(summary|totals):' "$file" | head -1 | awk '{print $2}')
  echo "$((total / runs)) instructions per query: $q"
  if [ -n "${OUT:-}" ]; then mkdir -p "$OUT" && cp "$file" "$OUT/q$n.out"; fi
done
