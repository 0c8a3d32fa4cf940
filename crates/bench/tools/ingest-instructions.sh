#!/usr/bin/env bash
# Instructions per point of the ingest path, counted by callgrind: a steady speed figure on
# machines whose CPU times swing between runs. Generates put lines (SERIES series x POINTS
# points, 10 s apart, in a closed hour; a third of the series with two-decimal floats), runs
# `tsdb tsd` under valgrind, sends them over one telnet connection, stops the TSD with
# SIGTERM (its final flush included) and prints the ingest path's instructions per point.
#
#   crates/bench/tools/ingest-instructions.sh target/release/tsdb [SERIES] [POINTS]
#
# INDEX=1 in the environment turns the tag index on (`tsd.index.enable = true`, RFC 0007).
#
# Needs valgrind (apt-get install valgrind) and python3. User space only: the kernel's
# share (socket reads, log writes) is not counted.
set -euo pipefail
tsdb=${1:?usage: ingest-instructions.sh TSDB [SERIES] [POINTS]}
series=${2:-1000}
per=${3:-300}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')

python3 - "$work/lines.txt" "$series" "$per" <<'PY'
import random, sys, time
out, series, per = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
start = int(time.time()) - per * 10 - 3600
start -= start % 3600
metrics = ["sys.cpu.user", "sys.cpu.system", "net.bytes.in", "net.bytes.out", "disk.io.ops",
           "mem.used", "app.requests", "app.latency", "net.packets.in", "disk.free"]
rng = random.Random(1)
level = [rng.randint(0, 1000) for _ in range(series)]
with open(out, "w") as f:
    for i in range(per):
        for s in range(series):
            host = s // len(metrics)
            level[s] = max(0, level[s] + rng.randint(-10, 10))
            v = f"{level[s] // 100}.{level[s] % 100}" if s % 3 == 0 else str(level[s])
            f.write(f"put {metrics[s % len(metrics)]} {start + i * 10} {v} "
                    f"host=web{host:05} dc=dc{host % 4} rack=r{host % 40} env=prod\n")
PY

config=()
if [ "${INDEX:-0}" = 1 ]; then
  printf 'tsd.index.enable = true\n' >"$work/opentsdb.conf"
  config=(--config "$work/opentsdb.conf")
fi
valgrind --tool=callgrind --callgrind-out-file="$work/callgrind.out" "$tsdb" tsd \
  --bind 127.0.0.1 --port "$port" --auto-metric --data-dir "$work/data" "${config[@]}" \
  >"$work/tsd.log" 2>&1 &
pid=$!
python3 - "$port" "$work/lines.txt" <<'PY'
import socket, sys, time
port, path = int(sys.argv[1]), sys.argv[2]
deadline = time.time() + 120
while True:
    try:
        s = socket.create_connection(("127.0.0.1", port))
        break
    except OSError:
        if time.time() > deadline:
            sys.exit("the TSD did not start")
        time.sleep(0.3)
s.sendall(open(path, "rb").read())
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

points=$((series * per))
# The whole process (every thread, the periodic flushes and the store's workers included).
callgrind_annotate "$work/callgrind.out" 2>/dev/null | awk '/PROGRAM TOTALS/ {
  gsub(",", "", $1); printf "whole process %6.0f M instructions\n", $1 / 1e6 }'
# The whole process's total also holds whatever idle threads did under valgrind's slow clock
# (it swings between runs); the ingest path is the telnet handling plus the final flush.
callgrind_annotate --inclusive=yes "$work/callgrind.out" 2>/dev/null |
  sed 's/ \[[^]]*\]$//' | awk -v n="$points" '
  /telnet::process$/ && !t { gsub(",", "", $1); t = $1 }
  /put::parse_put(_head)?$/ && !p { gsub(",", "", $1); p = $1 }
  /Writer::add_points$/ && !a { gsub(",", "", $1); a = $1 }
  /Tsdb::close$/ && !c { gsub(",", "", $1); c = $1 }
  END {
    printf "ingest path   %6d instructions/point\n", (t + c) / n
    printf "  parsing     %6d\n", p / n
    printf "  add_points  %6d (lookups, log entry, buffers)\n", a / n
    printf "  other lines %6d (reading lines, batching)\n", (t - p - a) / n
    printf "  final flush %6d\n", c / n
  }'
