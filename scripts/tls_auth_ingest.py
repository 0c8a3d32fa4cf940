#!/usr/bin/env python3
"""CPU per point of telnet ingest, plain against TLS with authentication (issue #21).

Starts a release `tsdb tsd` twice over fresh data dirs: once plain without authentication,
once with `tsd.network.tls.*` and `tsd.core.authentication.*` (a write token). Each run
sends the same put lines over one connection (the second inside TLS, after `auth token`),
fences them with `version`, and reads the TSD's CPU time (user + system, /proc) before and
after. Prints microseconds of TSD CPU per point for each and the ratio.

usage: scripts/tls_auth_ingest.py TSDB_BINARY [POINTS]   (makes its certificate with openssl)
"""

import os
import socket
import ssl
import subprocess
import sys
import tempfile
import time

TSDB = sys.argv[1]
POINTS = int(sys.argv[2]) if len(sys.argv) > 2 else 2_000_000
SERIES = 100
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def lines():
    base = 1_700_000_000
    chunk = []
    for i in range(POINTS):
        chunk.append(f"put bench.tls {base + i // SERIES} {i % 1000} host=h{i % SERIES}\n")
        if len(chunk) == 10_000:
            yield "".join(chunk).encode()
            chunk = []
    if chunk:
        yield "".join(chunk).encode()


def start(dir, config):
    conf = os.path.join(dir, "tsd.conf")
    with open(conf, "w") as f:
        f.write(config)
    proc = subprocess.Popen(
        [TSDB, "tsd", "--port", "0", "--bind", "127.0.0.1", "--auto-metric",
         "--data-dir", os.path.join(dir, "data"), "--config", conf],
        stderr=subprocess.PIPE, text=True)
    for line in proc.stderr:
        if "Ready to serve on " in line:
            addr = line.split("Ready to serve on ")[1].split()[0]
            host, port = addr.rsplit(":", 1)
            return proc, (host, int(port))
    raise SystemExit("the TSD did not start")


def run(label, config, wrap=None, first=b""):
    with tempfile.TemporaryDirectory() as dir:
        config = config.replace("{dir}", dir)
        prepare(dir)
        proc, addr = start(dir, config)
        time.sleep(0.5)
        before = cpu_seconds(proc.pid)
        sock = socket.create_connection(addr)
        if wrap:
            sock = wrap(sock)
        sock.sendall(first)
        for chunk in lines():
            sock.sendall(chunk)
        sock.sendall(b"version\n")
        reply = b""
        while b"hourglass" not in reply:
            data = sock.recv(65536)
            if not data:
                raise SystemExit(f"{label}: closed: {reply!r}")
            reply += data
        assert b"AUTH_FAIL" not in reply and b"put:" not in reply, reply[:200]
        after = cpu_seconds(proc.pid)
        sock.close()
        proc.terminate()
        proc.wait()
        per_point = (after - before) / POINTS * 1e6
        print(f"{label}: {after - before:.2f} s TSD CPU for {POINTS} points, {per_point:.3f} us/point")
        return per_point


TOKEN = "hg_bench_token"


def prepare(dir):
    import hashlib
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
         "-nodes", "-keyout", os.path.join(dir, "k.pem"), "-out", os.path.join(dir, "c.pem"),
         "-days", "1", "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost"],
        check=True, capture_output=True)
    digest = hashlib.sha256(TOKEN.encode()).hexdigest()
    with open(os.path.join(dir, "users"), "w") as f:
        f.write(f"token bench write sha256:{digest}\n")


def main():
    flush = "tsd.storage.flush_interval = 600000\n"
    plain = run("plain", flush)
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    secured = run(
        "tls+auth",
        flush + "tsd.network.tls.cert = {dir}/c.pem\ntsd.network.tls.key = {dir}/k.pem\n"
        "tsd.network.tls.mode = required\ntsd.core.authentication.enable = true\n"
        "tsd.core.authentication.users = {dir}/users\n",
        wrap=lambda s: context.wrap_socket(s, server_hostname="localhost"),
        first=f"auth token {TOKEN}\n".encode())
    print(f"ratio: {secured / plain:.3f} (TLS with auth over plain)")


main()
