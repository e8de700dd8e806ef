#!/usr/bin/env python3
"""`specula serve` against hostile and careless HTTP clients, with raw
sockets: silent and trickling connections (header and body deadlines),
connection caps (a fast 503, never a reset; /health keeps answering
others), endless chunked bodies, request smuggling (conflicting lengths,
unknown transfer codings), a missing Host, two Authorization headers.

One server with short limits (--header-timeout 2, --max-conns 24,
--max-conns-per-ip 8).  Other clients' addresses are other loopback
addresses (127.0.0.2, ...): Linux routes all of 127/8 to lo, so a test can
be several clients.  SPECULA_BIN selects the binary (the ASan one in the
sanitizer run: see test_serve.py).  Prints TAP.
"""
import json
import re
import select
import os
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from taplib import check, plan, tap  # noqa: E402
from test_serve import BIN, KEY, Server, metrics, request  # noqa: E402

HEADER_TIMEOUT = 2


def connect(srv, src="127.0.0.1", timeout=10):
    return socket.create_connection(("127.0.0.1", srv.port), timeout=timeout, source_address=(src, 0))


def read_until_closed(s, limit):
    """(bytes received, how it ended: 'eof', 'reset' or 'timeout') within limit seconds."""
    s.settimeout(0.2)
    data = b""
    t_end = time.time() + limit
    while time.time() < t_end:
        try:
            b = s.recv(65536)
        except socket.timeout:
            continue
        except ConnectionResetError:
            return data, "reset"
        if not b:
            return data, "eof"
        data += b
    return data, "timeout"


def exchange(srv, raw, src="127.0.0.1", limit=10):
    """Sends raw bytes; returns (everything the server sent until it closed, how it ended)."""
    s = connect(srv, src)
    try:
        s.sendall(raw)
        return read_until_closed(s, limit)
    finally:
        s.close()


def status_of(data):
    line = data.split(b"\r\n", 1)[0].decode(errors="replace")
    return int(line.split()[1]) if line.startswith("HTTP/1.") else None


def health_ok(srv, within=1.0):
    """GET /health from 127.0.0.1 answers 200 within `within` seconds."""
    t0 = time.time()
    st, _, _ = request(srv, "GET", "/health")
    if st != 200 or time.time() - t0 >= within:
        print(f"# /health: {st} after {time.time() - t0:.2f} s", flush=True)
        return False
    return True


def health_back(srv, within=2.0):
    """/health answers 200 again within `within` seconds (a connection the
    server shut down leaves its table a moment after the client sees EOF)."""
    t_end = time.time() + within
    while True:
        st, _, _ = request(srv, "GET", "/health")
        if st == 200 or time.time() > t_end:
            return st == 200
        time.sleep(0.05)


class Trickler(threading.Thread):
    """Sends first, then one byte of more every `gap` seconds until the
    server closes the connection; records when that happened."""

    def __init__(self, srv, first, more, gap=0.3, src="127.0.0.2"):
        super().__init__(daemon=True)
        self.s = connect(srv, src)
        self.first, self.more, self.gap = first, more, gap
        self.t0 = time.time()
        self.closed_after = None

    def run(self):
        try:
            self.s.sendall(self.first)
            for i in range(len(self.more)):
                time.sleep(self.gap)
                self.s.sendall(self.more[i:i + 1])
        except OSError:
            self.closed_after = time.time() - self.t0
        finally:
            self.s.close()


def deadline_tests(srv):
    def silent_sockets():
        # 12 sockets from one address that send half a header line and stop:
        # 8 (the per-address cap) are held, the other 4 get a 503 at once
        socks = [connect(srv, "127.0.0.2") for _ in range(12)]
        for s in socks:
            s.sendall(b"GET /health HTTP/1.1\r\nX: ")
        time.sleep(0.5)                      # one window for all (the deadline runs meanwhile)
        readable, _, _ = select.select(socks, [], [], 0)
        refused = [s.recv(4096) for s in readable]
        assert len(refused) == 4, [r[:40] for r in refused]
        for b in refused:
            assert status_of(b) == 503 and b"Retry-After: 1" in b and b"too_many_connections" in b, b
        # others are not delayed
        assert all(health_ok(srv) for _ in range(3))
        # the held ones are closed by the header deadline, not before
        t0 = time.time()
        ends = [read_until_closed(s, HEADER_TIMEOUT + 3) for s in socks]
        waited = time.time() - t0
        for s in socks:
            s.close()
        assert all(how in ("eof", "reset") for _, how in ends), ends
        assert waited < HEADER_TIMEOUT + 2, waited
        return True
    check("12 silent sockets from one address: 4 beyond --max-conns-per-ip get a fast 503 with Retry-After, "
          "/health answers others at once, the 8 held are closed at the header deadline", silent_sockets)

    def total_cap():
        # 6 per address, 24 in all (addresses the previous test did not use,
        # and a pause: its connections leave the table some 50 ms after EOF)
        time.sleep(1)
        socks = [connect(srv, f"127.0.0.{3 + i % 4}") for i in range(24)]
        for s in socks:
            s.sendall(b"GET /health HTTP/1.1\r\nX: ")
        time.sleep(0.3)
        refused, _, _ = select.select(socks, [], [], 0)
        assert not refused, [s.recv(100) for s in refused]
        data, how = exchange(srv, b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n", limit=3)
        assert status_of(data) == 503 and how == "eof", (data, how)
        body = json.loads(data.split(b"\r\n\r\n", 1)[1])
        assert body["error"]["code"] == "too_many_connections", body
        for s in socks:
            read_until_closed(s, HEADER_TIMEOUT + 3)
            s.close()
        return health_back(srv)
    check("--max-conns reached: a new connection gets a 503 (JSON error, then EOF), not a reset; "
          "once the deadline closes the silent ones, /health answers 200", total_cap)

    def header_trickle():
        t = Trickler(srv, b"GET /health HTTP/1.1\r\n", b"X-Pad: " + b"a" * 200)
        t.start()
        probes = []
        while t.is_alive() and time.time() - t.t0 < 10:
            probes.append(health_ok(srv))
            time.sleep(0.2)
        t.join(15)
        assert t.closed_after is not None and t.closed_after < HEADER_TIMEOUT + 2.5, t.closed_after
        assert probes and all(probes), probes
        return True
    check("headers trickled one byte per 0.3 s are cut at the header deadline (an idle timeout never "
          "fires); /health answers throughout", header_trickle)

    def body_trickle():
        head = (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + KEY.encode() +
                b"\r\nContent-Type: application/json\r\nContent-Length: 300\r\n\r\n")
        t = Trickler(srv, head, b'{"prompt": "' + b"a" * 280 + b'", "max_tokens": 1}')
        t.start()
        t.join(15)
        # 300 bytes may take header_timeout + 300/16384 s
        return t.closed_after is not None and t.closed_after < HEADER_TIMEOUT + 2.5
    check("a body trickled one byte per 0.3 s is cut at its deadline (header timeout + size / 16 KiB/s)",
          body_trickle)

    def chunked_endless():
        auth = b"Authorization: Bearer " + KEY.encode() + b"\r\n"
        head = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n" + auth + b"Transfer-Encoding: chunked\r\n\r\n"
        out = {}
        for name, body in (("size 2^64-1", b"ffffffffffffffff\r\nabc"),
                           ("chunk longer than its data", b"10\r\nabc"),
                           ("truncated (no last chunk)", b"5\r\nhello\r\n")):
            t0 = time.time()
            data, how = exchange(srv, head + body, limit=HEADER_TIMEOUT + 4)
            out[name] = (round(time.time() - t0, 1), how, data[:40])
        # all closed by the deadline (MHD may answer 400 to the absurd size at once)
        bad = {k: v for k, v in out.items() if v[1] == "timeout" or v[0] > HEADER_TIMEOUT + 2.5}
        assert not bad, out
        return True
    check("chunked bodies that never end (size 2^64-1, a chunk longer than its data, no last chunk) "
          "are closed by the deadline", chunked_endless)

    def chunked_flood():
        # a fast endless chunked body: cut at --max-body, not read forever
        s = connect(srv)
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + KEY.encode() +
                  b"\r\nTransfer-Encoding: chunked\r\n\r\n")
        chunk = b"4000\r\n" + b"a" * 0x4000 + b"\r\n"
        sent = 0
        try:
            while sent < 8 << 20:
                s.sendall(chunk)
                sent += len(chunk)
        except OSError:
            pass
        s.close()
        assert sent < 4 << 20, sent          # --max-body 65536 (+ socket buffers)
        return health_back(srv)
    check("an endless fast chunked body is cut once it passes --max-body", chunked_flood)

    def metrics_count():
        m = metrics(srv)
        return m.get('specula_http_requests_total{endpoint="(connection)",status="503"}', 0) >= 5 and \
            m.get('specula_http_requests_total{endpoint="(connection)",status="408"}', 0) >= 8
    check("/metrics counts refused (503) and expired (408) connections", metrics_count)


def framing_tests(srv):
    auth = b"Authorization: Bearer " + KEY.encode() + b"\r\n"
    good = b'{"prompt": "Hi", "max_tokens": 1}'

    def one_400(raw, why):
        data, how = exchange(srv, raw, limit=5)
        n = len(re.findall(rb"HTTP/1\.1 \d\d\d ", data))
        assert status_of(data) == 400 and n == 1 and how == "eof", (why, data[:300], n, how)
        assert b"Connection: close" in data, data[:300]
        return json.loads(data.split(b"\r\n\r\n", 1)[1])["error"]

    def conflicting_lengths():
        smuggled = b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"
        raw = (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n" + auth +
               b"Content-Length: %d\r\nContent-Length: %d\r\n\r\n" % (len(good), len(good) + len(smuggled)) +
               good + smuggled)
        e = one_400(raw, "two Content-Length")
        return "Content-Length" in e["message"]
    check("two conflicting Content-Length headers: 400, connection closed, the rest is not a second request",
          conflicting_lengths)

    def length_list():
        raw = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n" + auth + b"Content-Length: 33, 34\r\n\r\n" + good
        data, how = exchange(srv, raw, limit=5)
        # libmicrohttpd refuses it itself (its HTML 400 page, sent twice) and closes
        return status_of(data) == 400 and how == "eof"
    check("Content-Length '33, 34': 400 and closed", length_list)

    def length_and_chunked():
        raw = (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n" + auth + b"Content-Length: %d\r\n" % len(good) +
               b"Transfer-Encoding: chunked\r\n\r\n" + b"%x\r\n" % len(good) + good + b"\r\n0\r\n\r\n")
        return "Transfer-Encoding" in one_400(raw, "CL + TE")["message"]
    check("Content-Length with Transfer-Encoding: 400, connection closed", length_and_chunked)

    def unknown_coding():
        for te in (b"gzip, chunked", b"chunked, chunked", b"identity"):
            raw = (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n" + auth + b"Transfer-Encoding: " + te +
                   b"\r\n\r\n" + b"%x\r\n" % len(good) + good + b"\r\n0\r\n\r\n")
            one_400(raw, te)
        raw = (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n" + auth + b"Transfer-Encoding: chunked\r\n"
               b"Transfer-Encoding: gzip\r\n\r\n0\r\n\r\n")
        one_400(raw, "two TE headers")
        return True
    check("Transfer-Encoding other than one 'chunked' (gzip, chunked; chunked, chunked; identity; two headers): "
          "400, closed", unknown_coding)

    def chunked_ok():
        raw = (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n" + auth + b"Transfer-Encoding: chunked\r\n"
               b"Connection: close\r\n\r\n" + b"%x\r\n" % len(good) + good + b"\r\n0\r\n\r\n")
        data, how = exchange(srv, raw, limit=60)
        return status_of(data) == 200 and b"text_completion" in data
    check("a well-formed chunked body is still accepted (200)", chunked_ok)

    def missing_host():
        e = one_400(b"GET /health HTTP/1.1\r\n\r\n", "no Host")
        assert "Host" in e["message"], e
        one_400(b"GET /health HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", "two Host")
        data, how = exchange(srv, b"GET /health HTTP/1.0\r\n\r\n", limit=5)
        return status_of(data) == 200
    check("HTTP/1.1 without Host (or with two): 400, closed; HTTP/1.0 without Host: 200", missing_host)

    def two_auth():
        for a, b in ((KEY, "wrong"), ("wrong", KEY)):
            raw = (b"GET /v1/models HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + a.encode() +
                   b"\r\nAuthorization: Bearer " + b.encode() + b"\r\n\r\n")
            e = one_400(raw, "two Authorization")
            assert "Authorization" in e["message"], e
        return True
    check("two Authorization headers (either order): 400, closed", two_auth)


def main():
    if not os.access(BIN, os.X_OK):
        tap(False, f"{BIN} exists")
        return plan()
    t0 = time.time()
    srv = Server("--api-key", KEY, "--parallel", "2", "-c", "256", "--max-body", "65536",
                 "--header-timeout", str(HEADER_TIMEOUT), "--max-conns", "24", "--max-conns-per-ip", "8")
    try:
        deadline_tests(srv)
        framing_tests(srv)
        check("server: SIGTERM exits 0", lambda: srv.stop() == 0)
        srv.check_sanitizer()
    finally:
        srv.stop(9)
    print(f"# http tests took {time.time() - t0:.0f} s")
    return plan()


if __name__ == "__main__":
    sys.exit(main())
