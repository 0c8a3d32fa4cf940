#!/usr/bin/env bash
# Instructions per new series, counted by callgrind: `hourglass-bench meta`'s load (one point
# for each of SERIES new series `bench.meta host=h0000000…`, series tracking on, a flush a
# second) sent to `tsdb tsd` under valgrind over one telnet connection, then SIGTERM (the
# final flush included). Prints the whole process's instructions and their share a series
# (a TSD started and stopped with no series costs ~6.4 M of them).
#
#   crates/bench/tools/new-series-instructions.sh target/release/tsdb [SERIES]
#
# INDEX=1 in the environment turns the tag index on (`tsd.index.enable = true`, RFC 0007).
# OUT=FILE keeps the callgrind output (for callgrind_annotate) in FILE.
#
# Needs valgrind (apt-get install valgrind) and python3. User space only.
set -euo pipefail
tsdb=${1:?usage: new-series-instructions.sh TSDB [SERIES]}
series=${2:-10000}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
index=false
if [ "${INDEX:-0}" = 1 ]; then index=true; fi
printf 'tsd.core.meta.enable_tsuid_tracking = true\ntsd.storage.flush_interval = 1000\ntsd.index.enable = %s\n' \
  "$index" >"$work/opentsdb.conf"
valgrind --tool=callgrind --separate-threads=no --callgrind-out-file="$work/callgrind.out" \
  "$tsdb" tsd --bind 127.0.0.1 --port "$port" --auto-metric --data-dir "$work/data" \
  --config "$work/opentsdb.conf" >"$work/tsd.log" 2>&1 &
pid=$!
python3 - "$port" "$series" <<'PY'
import socket, sys, time
port, series = int(sys.argv[1]), int(sys.argv[2])
deadline = time.time() + 120
while True:
    try:
        s = socket.create_connection(("127.0.0.1", port))
        break
    except OSError:
        if time.time() > deadline:
            sys.exit("the TSD did not start")
        time.sleep(0.3)
s.sendall("".join(f"put bench.meta 1356998400 {i} host=h{i:07}\n" for i in range(series)).encode())
s.sendall(b"version\n")  # answered once every line before it was handled
buf = b""
while b"Built" not in buf:
    d = s.recv(65536)
    if not d:
        break
    buf += d
PY
kill -TERM "$pid"
wait "$pid" || true
if [ -n "${OUT:-}" ]; then cp "$work/callgrind.out" "$OUT"; fi
callgrind_annotate "$work/callgrind.out" 2>/dev/null | awk -v n="$series" '/PROGRAM TOTALS/ {
  gsub(",", "", $1); printf "whole process %6.0f M instructions, %6.1f k a series\n", $1 / 1e6, $1 / n / 1e3 }'
