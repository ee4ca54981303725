"""
The ingest path's cost per entry without sockets: the daemon built by C{gasoline.tap.makeService}
(default options, persistence on), its C{Site} driven over a C{StringTransport} with the requests of
bench/ingest.py (50 console entries each), one reactor turn (C{runUntilCurrent}) after each request.
The reactor's clock is virtual: it moves 5 ms per request (10,000 entries/s), so the daemon's timers
(fsync, compaction checks, client-state ticks) fire as often per request whatever the real speed
(under callgrind the real time per request is ~50 times longer and varies with the machine's load).
Prints CPU microseconds per entry. Its figure is steadier than bench/ingest.py's on a loaded machine,
and under callgrind it is exact: the instruction count difference between two request counts is the
cost of those requests, whatever else runs (this is how the before/after figures in
docs/persistence.md and docs/streaming.md were taken):

    .venv/bin/python bench/ingest_path.py 5000
    SEALED=1 .venv/bin/python bench/ingest_path.py 5000   # a paired extension's sealed requests
    PYTHONPATH=/tmp/base .venv/bin/python bench/ingest_path.py 5000      # another checkout
    WARM=200 valgrind --tool=callgrind --callgrind-out-file=a.out .venv/bin/python bench/ingest_path.py 50
    WARM=200 valgrind --tool=callgrind --callgrind-out-file=b.out .venv/bin/python bench/ingest_path.py 550
    # (Ir of b.out - Ir of a.out) / 500 = instructions per request
"""
import json
import atexit
import os
import shutil
import sys
import tempfile
import time
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from twisted.internet.address import IPv4Address
from twisted.internet.testing import StringTransport
import gasoline.http.request as rq
captured = []
orig = rq.GasolineSite.__init__
def init(self, *a, **k):
    orig(self, *a, **k)
    captured.append(self)
rq.GasolineSite.__init__ = init
import gasoline.tap as tap  # noqa: E402 (after the patch above)
tap.GasolineSite = rq.GasolineSite
from _workload import batches  # noqa: E402
from gasoline.testing import EXTENSION_HEADERS, response_body  # noqa: E402

class SealedQueue(list):
    """Sealed requests, each sent once (the daemon refuses a replayed request number)."""


def _exchange(proto, tr, raw: bytes) -> bytes:
    proto.dataReceived(raw)
    out = tr.value()
    tr.clear()
    if not out.startswith(b"HTTP/1.1 200"):
        raise SystemExit(out[:300])
    return response_body(out)


def _raw(method: str, path: str, body: bytes, headers: dict) -> bytes:
    head = (f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:7890\r\nContent-Length: {len(body)}\r\n"
            + "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n")
    return head.encode() + body


def sealed_requests(proto, tr, bodies, count):
    """Pair as the extension does (over the same connection), then seal C{count} requests, in
    the order they are sent (popped from the end)."""
    import base64

    from gasoline.testing import PairedExtensionKeys

    key = json.loads(_exchange(proto, tr, _raw("GET", "/pairing", b"", EXTENSION_HEADERS)))["key"]
    ext = PairedExtensionKeys(base64.urlsafe_b64decode(key + "=" * (-len(key) % 4)))
    answer = _exchange(proto, tr, _raw("POST", "/pairing/challenge",
                                       json.dumps(ext.challenge()).encode(), EXTENSION_HEADERS))
    if not ext.finish(json.loads(answer)):
        raise SystemExit("pairing failed")
    out = SealedQueue()
    for i in range(count):
        headers, sealed, _ = ext.seal("POST", "/logs", bodies[i % len(bodies)])
        out.append(_raw("POST", "/logs", sealed, headers))
    out.reverse()
    return out


def main(n, extra):
    tmp = tempfile.mkdtemp(prefix="gasoline-ingest-path-")
    atexit.register(shutil.rmtree, tmp, True)
    opts = tap.Options()
    opts.parseOptions(["--state-dir", tmp, "--listen", "tcp:0:interface=127.0.0.1", *extra])
    from twisted.internet import reactor as clock
    now = [time.time()]
    clock.seconds = lambda: now[0]  # virtual time: see the module docstring
    top = tap.makeService(opts, reactor=clock)
    def start(s):
        from twisted.application.service import IServiceCollection
        if IServiceCollection.providedBy(s):
            s.running = 1
            for c in s:
                start(c)
        elif "Endpoint" in type(s).__name__ or "Listener" in type(s).__name__ or "DaemonInfo" in type(s).__name__:
            pass
        else:
            s.startService()
    start(top)
    site = captured[0]
    bodies = batches(64)
    hdrs = dict(EXTENSION_HEADERS)
    raws = []
    for b in bodies:
        head = f"POST /logs HTTP/1.1\r\nHost: 127.0.0.1:7890\r\nContent-Length: {len(b)}\r\n" + "".join(f"{k}: {v}\r\n" for k, v in hdrs.items()) + "\r\n"
        raws.append(head.encode() + b)
    proto = site.buildProtocol(IPv4Address("TCP", "127.0.0.1", 50000))
    tr = StringTransport()
    proto.makeConnection(tr)
    warm = int(os.environ.get("WARM", "2000"))
    if os.environ.get("SEALED"):  # a paired extension's requests (bench/ingest.py --sealed)
        # PRESEAL: seal that many (at least warm + n) before the warm-up, so that two runs of
        # different n (callgrind, above) seal as many and their difference is the daemon's work.
        raws = sealed_requests(proto, tr, bodies, max(warm + n, int(os.environ.get("PRESEAL", "0"))))
    def run(k):
        for i in range(k):
            proto.dataReceived(raws.pop() if isinstance(raws, SealedQueue) else raws[i % len(raws)])
            now[0] += 0.005
            clock.runUntilCurrent()
            if not tr.value().startswith(b"HTTP/1.1 200"):
                raise SystemExit(tr.value()[:300])
            tr.clear()
    run(warm)
    t0 = time.process_time()
    run(n)
    cpu = time.process_time() - t0
    print(json.dumps({"us_per_entry": cpu * 1e6 / (n * 50)}))

if __name__ == "__main__":
    if os.environ.get("PROFILE"):
        import cProfile
        import pstats
        cProfile.run("main(int(sys.argv[1]), sys.argv[2:])", "ingest_path.prof")
        pstats.Stats("ingest_path.prof").sort_stats("tottime").print_stats(45)
    else:
        main(int(sys.argv[1]), sys.argv[2:])
