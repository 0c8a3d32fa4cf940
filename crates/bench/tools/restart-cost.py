#!/usr/bin/env python3
"""What a restart costs: CPU seconds and wall seconds from a TSD's start until it answers
(its store opened and recovered, its write-ahead log replayed and flushed, and after an
unclean stop its UID table written again), after a graceful stop and after SIGKILL.

    crates/bench/tools/restart-cost.py target/release/tsdb [NAMES]

Loads NAMES new series (one tag value each: NAMES UIDs) over telnet into a new data dir,
stops the TSD gracefully and starts it again, then kills it with SIGKILL (one point written
before) and starts it again, then loads NAMES more new series, kills it with SIGKILL at once
(their UID mappings still in the store's journal) and starts it again. CPU is the process's
user+system time (all its threads) read from /proc when it first answers `/api/version`.
Linux only; python3 only.
"""
import os, signal, socket, subprocess, sys, tempfile, time, urllib.request

tsdb = sys.argv[1]
names = int(sys.argv[2]) if len(sys.argv) > 2 else 100_000
tick = os.sysconf("SC_CLK_TCK")


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / tick


def start(data):
    port = free_port()
    t0 = time.time()
    p = subprocess.Popen(
        [tsdb, "tsd", "--bind", "127.0.0.1", "--port", str(port), "--auto-metric",
         "--data-dir", data],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    while True:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/api/version", timeout=60).read()
            break
        except OSError:
            if p.poll() is not None:
                sys.exit(f"the TSD exited with {p.returncode}")
            time.sleep(0.01)
    return p, port, time.time() - t0, cpu_seconds(p.pid)


def telnet(port, lines):
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(lines + b"version\n")
    f = s.makefile("rb")
    while b"Built on" not in f.readline():
        pass
    s.close()


def load(port, now, prefix):
    """NAMES new series, host=<prefix><8 digits>, one point each."""
    for first in range(0, names, 50_000):
        telnet(port, b"".join(b"put restart.cost %d 1 host=%s%08d\n" % (now, prefix, i)
                              for i in range(first, min(names, first + 50_000))))


with tempfile.TemporaryDirectory() as d:
    data = os.path.join(d, "data")
    p, port, _, _ = start(data)
    now = int(time.time()) - 600
    load(port, now, b"h")
    p.send_signal(signal.SIGTERM)
    p.wait()
    p, port, wall, cpu = start(data)
    print(f"{names} names, after a graceful stop: {cpu:.2f} s CPU, {wall:.2f} s wall until answering")
    telnet(port, b"put restart.cost %d 2 host=h%08d\n" % (now + 1, 0))
    p.send_signal(signal.SIGKILL)
    p.wait()
    p, port, wall, cpu = start(data)
    print(f"{names} names, after SIGKILL: {cpu:.2f} s CPU, {wall:.2f} s wall until answering")
    # Killed right after NAMES more new names: their UID mappings are still in the store's
    # journal (and the points in the log), not yet in its table files.
    load(port, now, b"g")
    p.send_signal(signal.SIGKILL)
    p.wait()
    p, port, wall, cpu = start(data)
    print(f"{names} more names, after SIGKILL right after loading them: {cpu:.2f} s CPU, {wall:.2f} s wall until answering")
    p.send_signal(signal.SIGTERM)
    p.wait()
