"""A hostile or ordinary peer of devplaced for the connection tests (tests/robustness/connection_test.cc),
run under /usr/bin/python3 as whichever user setpriv makes it. Prints one JSON line.

  peer.py hold TARGET N SECONDS [--source IP] [--hello | --slow]
      Opens N connections to TARGET (HOST:PORT or unix:/PATH), optionally from source address IP,
      optionally sending the first 11 bytes of a TLS ClientHello and nothing more (a stalled
      handshake), and holds them silent for SECONDS; with --slow each dribbles an HTTP request
      header instead, a byte every 200 ms. Reports how many were opened, how many the
      server closed (at once: within 0.5 s of connecting; and the latest close, in seconds after
      connecting) and how many were still open at the end.
  peer.py calls TARGET SECONDS [--fresh]
      Calls grpc.health.v1.Health/Check on TARGET every 50 ms over one channel for SECONDS, each with a
      2 s deadline; with --fresh each call on a connection of its own, as a job or the CLI makes it.
      Reports the calls that succeeded and those that failed (with the first errors), and the calls'
      latencies in ms (p50, p99, max; a --fresh call's includes its connection).
  peer.py watch TARGET N
      Opens N devplace.v1 WatchInventory streams on TARGET over one channel, one after the other,
      each waiting for its first snapshot (5 s deadline). Reports how many opened and the errors of
      the others.
  peer.py scrape URL N
      GETs URL N times in a row, each on a connection of its own with a 10 s timeout. Reports the
      scrapes answered 200 and the others, and their latencies in ms (p50, max).
  peer.py churn SECONDS TARGET[@SOURCE]...
      Connects to each TARGET in turn (from source address SOURCE where given) and closes at once,
      again and again, for SECONDS (a connect-and-close flood: by the time the server looks the
      client up, the socket is closed and has no owner). Reports the connections made and the
      connects that failed.
  peer.py burst TARGET ROUNDS N KIB
      ROUNDS rounds of N devplace.v1 ResolveDevice calls sent at once over one channel, each a valid
      training request whose job environment is about KIB KiB of unread variables (each call's own
      bytes, so no answer is served from the daemon's cache), each with a 60 s deadline; a round
      starts as soon as the previous one is answered. Reports the calls answered OK and the others (by
      status code, codes; the first error of each code), and each round's duration in seconds.
  peer.py pickburst TARGET ROUNDS N KIB WAIT_MS
      As burst, but each call is a devplace.v1 PickDevices of one device (a time-to-live lease) that
      waits up to WAIT_MS, for a job that sees only CUDA_VISIBLE_DEVICES=0 (another holds it: every
      pick waits, then is refused). Reports as burst does.
  peer.py served TARGET STOPFILE
      Until STOPFILE exists (and at least once), a small ResolveDevice then a PickDevices of one
      device (a time-to-live lease) and its LeaseRelease, each call on a connection of its own with a
      20 s deadline, as a job or the CLI makes them. Reports the rounds whose three calls were all
      answered OK and the rounds that failed (with the first errors), and the rounds' latencies in ms.
  peer.py resolves TARGET STOPFILE
      Until STOPFILE exists (and at least once), a small ResolveDevice every 50 ms over one channel,
      each with its own job environment (so none is answered from the daemon's cache) and a 20 s
      deadline. Reports the calls answered OK and those that failed, and their latencies in ms
      (scripts/bench's burst row reads p50_ms).
"""
import json
import select
import socket
import sys
import time

# A TLS record header and the start of a ClientHello: the server waits for the rest.
PARTIAL_CLIENT_HELLO = b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03"


def connect(target, source):
    if target.startswith("unix:"):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(5)
        s.connect(target[5:])
        return s
    host, port = target.rsplit(":", 1)
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(5)
    if source:
        s.bind((source, 0))
    s.connect((host, int(port)))
    return s


SLOW_HEADER = b"GET /metrics HTTP/1.1\r\nX-Slow: " + b"x" * 200


def hold(target, n, seconds, source, hello, slow=False):
    socks, failed = [], 0
    poller = select.poll()
    by_fd = {}
    closed_after = {}

    def harvest(timeout_ms):
        for fd, _ in poller.poll(timeout_ms):
            i = by_fd[fd]
            try:
                data = socks[i][0].recv(4096)
            except OSError:
                data = b""
            if data == b"":
                closed_after[i] = time.monotonic() - socks[i][1]
                poller.unregister(fd)

    for _ in range(n):
        try:
            s = connect(target, source)
            if hello:
                s.send(PARTIAL_CLIENT_HELLO)
        except OSError:
            failed += 1
            continue
        s.setblocking(False)
        socks.append((s, time.monotonic()))
        by_fd[s.fileno()] = len(socks) - 1
        poller.register(s.fileno(), select.POLLIN)
        harvest(0)  # closes are timed while the flood is still being opened
    end = time.monotonic() + seconds
    sent = 0
    while len(closed_after) < len(socks) and time.monotonic() < end:
        harvest(100 if not slow else 200)
        if slow and sent < len(SLOW_HEADER):
            for i, (s, _) in enumerate(socks):
                if i not in closed_after:
                    try:
                        s.send(SLOW_HEADER[sent:sent + 1])
                    except OSError:
                        pass
            sent += 1
    print(json.dumps({
        "opened": len(socks),
        "connect_failed": failed,
        "closed": len(closed_after),
        "closed_at_once": sum(1 for t in closed_after.values() if t < 0.5),
        "latest_close_s": round(max(closed_after.values()), 2) if closed_after else None,
        "open_at_end": len(socks) - len(closed_after),
    }), flush=True)


def percentile(values, p):
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(len(ordered) * p))], 1)


class Tally:
    """Calls answered OK (with their latencies in ms) and failed (with the first errors)."""

    def __init__(self):
        self.ok, self.failed, self.errors, self.latencies = 0, 0, [], []

    def run(self, call):
        import grpc
        start = time.monotonic()
        try:
            call()
            self.ok += 1
            self.latencies.append((time.monotonic() - start) * 1000)
        except grpc.RpcError as e:
            self.failed += 1
            if len(self.errors) < 5:
                self.errors.append(f"{e.code()}: {e.details()}")

    def report(self):
        return {"ok": self.ok, "failed": self.failed, "errors": self.errors,
                "p50_ms": percentile(self.latencies, 0.5), "p99_ms": percentile(self.latencies, 0.99),
                "max_ms": percentile(self.latencies, 1.0)}


def calls(target, seconds, fresh):
    import grpc
    # A channel of its own never shares a connection with another channel of this process.
    options = [("grpc.use_local_subchannel_pool", 1)]
    channel = None if fresh else grpc.insecure_channel(target, options=options)
    tally = Tally()
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        c = grpc.insecure_channel(target, options=options) if fresh else channel
        try:
            tally.run(lambda: c.unary_unary("/grpc.health.v1.Health/Check")(b"", timeout=2))
        finally:
            if fresh:
                c.close()
        time.sleep(0.05)
    print(json.dumps(tally.report()), flush=True)


def scrape(url, n):
    import urllib.error
    import urllib.request
    ok, failed, errors, latencies = 0, 0, [], []
    for _ in range(n):
        start = time.monotonic()
        try:
            with urllib.request.urlopen(url, timeout=10) as answer:
                answer.read()
                ok += answer.status == 200
                failed += answer.status != 200
            latencies.append((time.monotonic() - start) * 1000)
        except (OSError, urllib.error.URLError) as e:
            failed += 1
            if len(errors) < 5:
                errors.append(str(e))
    print(json.dumps({"ok": ok, "failed": failed, "errors": errors, "p50_ms": percentile(latencies, 0.5),
                      "max_ms": percentile(latencies, 1.0)}), flush=True)


def watch(target, n):
    import grpc
    channel = grpc.insecure_channel(target)
    method = channel.unary_stream("/devplace.v1.DevicePlacement/WatchInventory")
    streams, errors = [], []
    for _ in range(n):
        stream = method(b"", timeout=5)
        try:
            next(stream)
            streams.append(stream)
        except grpc.RpcError as e:
            errors.append(f"{e.code()}: {e.details()}")
    print(json.dumps({"opened": len(streams), "errors": errors}), flush=True)
    for stream in streams:
        stream.cancel()


def churn(seconds, targets):
    made, failed = 0, 0
    ends = [(t.split("@")[0], t.split("@")[1] if "@" in t else None) for t in targets]
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for target, source in ends:
            try:
                connect(target, source).close()
                made += 1
            except OSError:
                failed += 1
    print(json.dumps({"made": made, "connect_failed": failed, "per_s": round(made / seconds)}), flush=True)


# Hand-written protobuf encoding of the few devplace.v1 messages these peers send (the wire format is
# public; Debian's python3-grpcio has no devplace stubs).
def varint(n):
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def field_bytes(number, payload):
    return varint(number << 3 | 2) + varint(len(payload)) + payload


def field_varint(number, value):
    return varint(number << 3) + varint(value)


def resolve_request(env):
    """ResolveDeviceRequest{workload: WORKLOAD_TRAINING, env}."""
    body = field_varint(1, 1)
    for key, value in env:
        body += field_bytes(7, field_bytes(1, key.encode()) + field_bytes(2, value.encode()))
    return body


def read_varint(data, i):
    """The varint at data[i:] and the index after it."""
    value, shift = 0, 0
    while True:
        value |= (data[i] & 0x7F) << shift
        shift += 7
        i += 1
        if not data[i - 1] & 0x80:
            return value, i


def read_fields(data):
    """Top-level (number, bytes) of the length-delimited fields of a message; others skipped."""
    i, fields = 0, []
    while i < len(data):
        key, i = read_varint(data, i)
        wire = key & 7
        if wire == 0:
            _, i = read_varint(data, i)
        elif wire == 2:
            length, i = read_varint(data, i)
            fields.append((key >> 3, data[i:i + length]))
            i += length
        else:
            i += {1: 8, 5: 4}[wire]
    return fields


def rounds_at_once(target, method_name, rounds, n, kib, request_of):
    """ROUNDS rounds of N calls of METHOD_NAME sent at once over one channel, each with a 60 s
    deadline; request_of(r, c, bulk) is call c of round r, bulk about KIB KiB of unread job
    environment entries (field 7 of a ResolveDeviceRequest: a request is its fields one after
    another, so they may be appended as bytes). Prints the report (codes: the failures by status
    code; errors: the first failure of each code)."""
    import grpc
    channel = grpc.insecure_channel(target, options=[("grpc.max_send_message_length", 8 << 20)])
    method = channel.unary_unary("/devplace.v1.DevicePlacement/" + method_name)
    entries = max(1, kib // 4)
    filler = "v" * 4000
    bulk = [b"".join(field_bytes(7, field_bytes(1, f"JOB_SETTING_{c}_{e}".encode()) + field_bytes(2, filler.encode()))
                     for e in range(entries)) for c in range(n)]
    ok, failed, errors, codes, durations = 0, 0, [], {}, []
    for r in range(rounds):
        # Built in a moment, so rounds follow each other closely and each arrives at once.
        requests = [request_of(r, c, bulk[c]) for c in range(n)]
        start = time.monotonic()
        futures = [method.future(request, timeout=60) for request in requests]
        for f in futures:
            try:
                f.result()
                ok += 1
            except grpc.RpcError as e:
                failed += 1
                code = e.code().name
                codes[code] = codes.get(code, 0) + 1
                if len(errors) < 5 and codes[code] == 1:
                    errors.append(f"{e.code()}: {e.details()}")
        durations.append(round(time.monotonic() - start, 2))
    print(json.dumps({"ok": ok, "failed": failed, "codes": codes, "errors": errors, "round_s": durations}), flush=True)


def burst(target, rounds, n, kib):
    # Each call's bulk with one entry of this round's: its bytes differ from every earlier call's.
    rounds_at_once(target, "ResolveDevice", rounds, n, kib,
                   lambda r, c, bulk: resolve_request([(f"BURST_ROUND_{r}_{c}", "1")]) + bulk)


def pickburst(target, rounds, n, kib, wait_ms):
    # PickDevicesRequest{count 1, job, holder LEASE_HOLDER_TTL, wait_ms}, each job's bytes its own.
    def pick(r, c, bulk):
        job = resolve_request([("CUDA_VISIBLE_DEVICES", "0"), (f"BURST_ROUND_{r}_{c}", "1")]) + bulk
        return field_varint(1, 1) + field_bytes(2, job) + field_varint(6, 3) + field_varint(8, wait_ms)
    rounds_at_once(target, "PickDevices", rounds, n, kib, pick)


def served(target, stopfile):
    import os
    import grpc
    job = resolve_request([("LOCAL_RANK", "0")])
    pick = field_varint(1, 1) + field_bytes(2, job) + field_varint(6, 3)  # count 1, holder LEASE_HOLDER_TTL

    def call(method, payload):
        with grpc.insecure_channel(target) as c:
            return c.unary_unary("/devplace.v1.DevicePlacement/" + method)(payload, timeout=20)

    def cycle():
        call("ResolveDevice", job)
        lease = dict(read_fields(dict(read_fields(call("PickDevices", pick)))[6]))[1]
        call("LeaseRelease", field_bytes(1, lease))

    tally = Tally()
    while tally.ok + tally.failed == 0 or not os.path.exists(stopfile):
        tally.run(cycle)
        time.sleep(0.05)
    print(json.dumps(tally.report()), flush=True)


def resolves(target, stopfile):
    import os
    import grpc
    with grpc.insecure_channel(target) as channel:
        method = channel.unary_unary("/devplace.v1.DevicePlacement/ResolveDevice")
        tally, n = Tally(), 0
        while tally.ok + tally.failed == 0 or not os.path.exists(stopfile):
            n += 1
            request = resolve_request([("LOCAL_RANK", "0"), ("RESOLVES_SEQUENCE", str(n))])
            tally.run(lambda: method(request, timeout=20))
            time.sleep(0.05)
    print(json.dumps(tally.report()), flush=True)


def main(argv):
    if len(argv) >= 5 and argv[1] == "hold":
        source = argv[argv.index("--source") + 1] if "--source" in argv else None
        hold(argv[2], int(argv[3]), float(argv[4]), source, "--hello" in argv, "--slow" in argv)
    elif len(argv) in (4, 5) and argv[1] == "calls":
        calls(argv[2], float(argv[3]), "--fresh" in argv)
    elif len(argv) == 4 and argv[1] == "watch":
        watch(argv[2], int(argv[3]))
    elif len(argv) == 4 and argv[1] == "scrape":
        scrape(argv[2], int(argv[3]))
    elif len(argv) >= 4 and argv[1] == "churn":
        churn(float(argv[2]), argv[3:])
    elif len(argv) == 6 and argv[1] == "burst":
        burst(argv[2], int(argv[3]), int(argv[4]), int(argv[5]))
    elif len(argv) == 7 and argv[1] == "pickburst":
        pickburst(argv[2], int(argv[3]), int(argv[4]), int(argv[5]), int(argv[6]))
    elif len(argv) == 4 and argv[1] == "served":
        served(argv[2], argv[3])
    elif len(argv) == 4 and argv[1] == "resolves":
        resolves(argv[2], argv[3])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv)
