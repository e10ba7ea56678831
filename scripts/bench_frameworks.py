#!/usr/bin/env python3
"""Per-request cost of each web framework's HTTP/3 adapter beside a bare HTTP3Server handler.

Run by scripts/bench-frameworks, which builds the example applications in release mode and
passes EXAMPLE=BIN_DIR for each. Every server answers GET /kib with 1 KiB; h3load -c 1 -m 50 is
the client for all of them. Prints one table of ratios to the bare handler. The served cost is
split into the framework's own work, measured in-process with no transport, and the rest, the
adapter's own (at most 0.15 of the bare handler meets the target).
"""
from __future__ import annotations

import argparse
import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

from bench import count_instructions, free_udp_port, stat_cpu_seconds


def free_tcp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """A server process started with `command`; waits for the line that names its pin."""

    def __init__(self, command: list[str], ready: str, timeout: float = 300, cwd: str | None = None):
        self.process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                                        start_new_session=True, cwd=cwd)
        deadline = time.time() + timeout
        self.pin = None
        listening = False
        while time.time() < deadline:
            line = self.process.stdout.readline()
            if not line:
                raise SystemExit(f"bench-frameworks: {command[-1]} exited before it was ready")
            match = re.search(r"SHA-256 ([0-9a-f]{64})", line)
            if match:
                self.pin = match.group(1)
            listening = listening or ready in line
            if listening and self.pin:
                return
        raise SystemExit(f"bench-frameworks: {command} was not ready in {timeout} s")

    @property
    def pid(self) -> int:
        return self.process.pid

    def cpu_seconds(self) -> float:
        """utime + stime of the server process (and its threads)."""
        return stat_cpu_seconds(f"/proc/{self.pid}/stat")

    def stop(self) -> None:
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.process.wait()


def h3load(args, port: int, pin: str, requests: int) -> list[str]:
    return [args.h3load, "-c", "1", "-m", "50", "-n", str(requests), "--pin-sha256", pin, f"https://127.0.0.1:{port}/kib"]


# The line a server built on HTTP3Server prints when it serves; Vapor says it its own way.
HTTP3_READY = "HTTP/3 https://"


def instructions_per_request(args, command: list[str], port: int, work: str, name: str,
                             ready: str = HTTP3_READY, cwd: str | None = None) -> float:
    out = os.path.join(work, f"callgrind.{name}")
    server = Server(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}"] + command, ready, cwd=cwd)
    try:
        subprocess.run(h3load(args, port, server.pin, 200), check=True, stdout=subprocess.DEVNULL)  # warm-up
        return count_instructions(server.pid, out, h3load(args, port, server.pin, args.callgrind_requests)) / args.callgrind_requests
    finally:
        server.stop()


def cpu_per_request(args, command: list[str], port: int, ready: str = HTTP3_READY, cwd: str | None = None) -> float:
    server = Server(command, ready, timeout=60, cwd=cwd)
    try:
        subprocess.run(h3load(args, port, server.pin, 2000), check=True, stdout=subprocess.DEVNULL)
        before = server.cpu_seconds()
        subprocess.run(h3load(args, port, server.pin, args.requests), check=True, stdout=subprocess.DEVNULL)
        return (server.cpu_seconds() - before) / args.requests * 1e6
    finally:
        server.stop()


def framework_alone(command: list[str], work: str, name: str, cwd: str | None = None,
                    counts: tuple[int, int] = (200, 1200)) -> float:
    """Instructions per request of `command COUNT`, which serves COUNT requests in-process through
    the framework alone (no transport) and exits: callgrind at two counts, the difference divided
    by the difference in requests, so that start-up and teardown cancel out."""
    totals = []
    for count in counts:
        out = os.path.join(work, f"callgrind.{name}.alone.{count}")
        subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}"] + command + [str(count)],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=cwd, timeout=600)
        with open(out) as f:
            totals.append(next(float(line.split()[1]) for line in f if line.startswith(("totals:", "summary:"))))
    return (totals[1] - totals[0]) / (counts[1] - counts[0])


def median_of(repeats: int, measure) -> tuple[float, float, float]:
    """The median, lowest and highest of `repeats` runs of `measure()`. A framework that hands
    work between threads (Vapor's futures and tasks) takes different paths through malloc and its
    event loops from run to run, some 1% of its count, even with hashing fixed."""
    values = sorted(measure() for _ in range(repeats))
    return values[len(values) // 2], values[0], values[-1]


# glibc keeps up to 7 freed blocks of each size per thread (tcache). When more blocks of a size
# are alive at once, each allocation past the cache takes malloc's slow path, about 210
# instructions more. The example application's /kib goes through FileMiddleware, whose task runs
# on the global pool, so the requests that arrive together in a datagram are all in flight at
# once: served, it makes about as many allocations per request as Vapor alone and the bare
# handler together (108 against 107), yet takes the slow path some 53 times, against 25 for
# Vapor alone fed one for one and 2.4 for the bare handler. Vapor alone fed ten at a time takes
# it 37 times (`vapor-todos-bare --vapor-only --batch 10`), fifty at a time 51. The adapter over
# one route, whose requests Vapor answers at once on the loop, takes it about 3.6 times.
#
# So the split is also taken with two larger caches: h3serve's own (32 blocks of each size,
# CommandLineSupport's MallocCache.server, the setting the performance articles recommend for
# servers), and the largest glibc takes, where an allocation costs the same however the
# requests interleave, and the adapter's share is its code and its allocations.
SERVER_THREAD_CACHE = "glibc.malloc.tcache_count=32"
UNBOUNDED_THREAD_CACHE = "glibc.malloc.tcache_count=65535"


@contextlib.contextmanager
def servers_thread_cache(tunables: str = SERVER_THREAD_CACHE):
    """Starts the processes inside with glibc's per-thread cache set by `tunables`: by default
    h3serve's 32 blocks of each size."""
    previous = os.environ.get("GLIBC_TUNABLES")
    os.environ["GLIBC_TUNABLES"] = tunables
    try:
        yield
    finally:
        if previous is None:
            del os.environ["GLIBC_TUNABLES"]
        else:
            os.environ["GLIBC_TUNABLES"] = previous


def spread(low: float, high: float) -> str:
    return f"  ({low / 1e3:,.1f}–{high / 1e3:,.1f} over the runs)"


def wrk_per_request(command: list[str], url: str, ready: str = HTTP3_READY,
                    cwd: str | None = None) -> tuple[float, float] | None:
    """Requests per second and server CPU µs per request of the framework's own TCP server at `url`."""
    if shutil.which("wrk") is None:
        return None
    server = Server(command, ready, timeout=60, cwd=cwd)
    try:
        before = server.cpu_seconds()
        result = subprocess.run(["wrk", "-t1", "-c50", "-d5s", url], check=True,
                                capture_output=True, text=True, timeout=120)
        cpu = server.cpu_seconds() - before
        done = int(re.search(r"(\d+) requests in", result.stdout).group(1))
        rate = float(re.search(r"Requests/sec:\s+([\d.]+)", result.stdout).group(1))
        return rate, cpu / done * 1e6
    finally:
        server.stop()


# -- Vapor ----------------------------------------------------------------------------------
# VaporTodos serves its routes with `serve`: HTTP/1.1 on a TCP port and HTTP/3 on the same UDP
# port (`app.servers.use(.http3(…))`); `--env production` keeps Vapor from logging every
# request. It writes its generated certificate into its working directory, so it runs in `work`.
# The baseline is vapor-todos-bare: the same 1 KiB from an HTTP3Server handler.

VAPOR_READY = "HTTP/3 server started on"


def vapor_app(binary: str, port: int) -> list[str]:
    return [binary, "serve", "--env", "production", "--hostname", "127.0.0.1", "--port", str(port)]


def vapor_rows(args, bin_dir: str, work: str) -> None:
    """The Vapor rows: the adapter over one route and the example application's /kib over HTTP/3,
    each against vapor-todos-bare, and Vapor's own server under wrk."""
    stripped = {}
    for binary in ("VaporTodos", "vapor-todos-bare"):
        stripped[binary] = os.path.join(work, f"VaporTodos.{binary}")
        shutil.copy(os.path.join(bin_dir, binary), stripped[binary])
        subprocess.run(["objcopy", "--strip-debug", stripped[binary]], check=True)
    port = free_udp_port()
    app = vapor_app(stripped["VaporTodos"], port)
    # The trivial route of the target: an application with /kib as its only route, served
    # through the adapter, as Hummingbird's is measured over one closure.
    through_adapter = [stripped["vapor-todos-bare"], "--through-adapter", str(port)]
    # The equivalent bare handler sends the fields Vapor's response carries over HTTP/3
    # (content-type, content-length, date).
    bare = [stripped["vapor-todos-bare"], str(port), "--framework-fields"]
    plain_bare = [stripped["vapor-todos-bare"], str(port)]
    # The adapter answers a request without a body from a promise responder, with no task: the
    # same bare answer given that way is the like-for-like baseline beside the bare handler.
    promise_bare = [stripped["vapor-todos-bare"], str(port), "--framework-fields", "--promise-responder"]
    like_for_like = ("bare promise responder, Vapor's fields, no task", lambda: instructions_per_request(
        args, promise_bare, port, work, "vapor-promise-bare"))
    adapter = lambda: instructions_per_request(args, through_adapter, port, work, "vapor-adapter", cwd=work)
    served = lambda: instructions_per_request(args, app, port, work, "VaporTodos", ready=VAPOR_READY, cwd=work)
    bare_handler = lambda: instructions_per_request(args, bare, port, work, "vapor-bare")
    alone = lambda: framework_alone([stripped["vapor-todos-bare"], "--vapor-only"], work, "VaporTodos", cwd=work)
    route_alone = lambda: framework_alone([stripped["vapor-todos-bare"], "--vapor-only", "--route-only"], work,
                                          "VaporTodos.route", cwd=work)
    bare_ir = split_rows(args, "VaporTodos", "instructions, adapter over one route", adapter, bare_handler, route_alone,
                         "Vapor", also_over=like_for_like)
    plain_ir = instructions_per_request(args, plain_bare, port, work, "vapor-plain")
    row("VaporTodos: bare handler, content-type only", "k instr", plain_ir / 1e3, bare_ir / 1e3)
    for tunables in (SERVER_THREAD_CACHE, UNBOUNDED_THREAD_CACHE):
        with servers_thread_cache(tunables):
            split_rows(args, "VaporTodos", f"{tunables}: adapter over one route", adapter, bare_handler, route_alone,
                       "Vapor", also_over=like_for_like)
    # The example application, for information: its /kib goes through FileMiddleware first,
    # whose task on the global pool keeps the requests of a datagram in flight together (see
    # the note on glibc's cache above).
    split_rows(args, "VaporTodos", "instructions per 1 KiB GET, application", served, bare_handler, alone, "Vapor")
    app_cpu = cpu_per_request(args, app, port, ready=VAPOR_READY, cwd=work)
    adapter_cpu = cpu_per_request(args, through_adapter, port, cwd=work)
    bare_cpu = cpu_per_request(args, bare, port)
    row("VaporTodos: server CPU per 1 KiB GET, application", "µs", app_cpu, bare_cpu)
    row("VaporTodos: server CPU, adapter over one route", "µs", adapter_cpu, bare_cpu)
    tcp_port = free_udp_port()  # Vapor serves HTTP/3 on the UDP port of the TCP port's number
    tcp = wrk_per_request(vapor_app(stripped["VaporTodos"], tcp_port), f"http://127.0.0.1:{tcp_port}/kib",
                          ready=VAPOR_READY, cwd=work)
    if tcp:
        rate, cpu = tcp
        row("VaporTodos: own HTTP/1.1 server (no TLS), wrk -c50", "µs CPU", cpu, None, f"  ({rate:,.0f} req/s)")


def split_rows(args, name: str, served_what: str, served, bare, alone, framework: str, also_over=None) -> float:
    """Prints the served cost per request and its split: the framework alone, and the adapter's own,
    what is left over the bare handler. `served` and `alone` are measured `args.repeats` times (their
    medians count), `bare` once; each is a function that returns instructions per request.
    `also_over`, (what, measure), is a second baseline that answers as the adapter does, and the
    adapter's own over it. Returns the bare handler's, for the rows that compare with it."""
    served_ir, served_low, served_high = median_of(args.repeats, served)
    bare_ir = bare()
    alone_ir, alone_low, alone_high = median_of(args.repeats, alone)
    row(f"{name}: {served_what}", "k instr", served_ir / 1e3, bare_ir / 1e3, spread(served_low, served_high))
    row(f"{name}:   of which {framework} alone, in-process", "k instr", alone_ir / 1e3, bare_ir / 1e3, spread(alone_low, alone_high))
    row(f"{name}:   of which the adapter's own (target 0.15)", "k instr", (served_ir - bare_ir - alone_ir) / 1e3, bare_ir / 1e3)
    if also_over:
        what, measure = also_over
        other_ir = measure()
        row(f"{name}: {what}", "k instr", other_ir / 1e3, bare_ir / 1e3)
        row(f"{name}:   the adapter's own over that", "k instr", (served_ir - other_ir - alone_ir) / 1e3, bare_ir / 1e3)
    return bare_ir


WIDTH = 60


def row(what: str, unit: str, this: float, bare: float | None, note: str = "") -> None:
    """One line of the table: this server's figure, the bare handler's, and their ratio."""
    if bare is None:
        print(f"{what:<{WIDTH}} {unit:>9} {this:>10,.1f} {'':>10} {'':>6}{note}")
    else:
        print(f"{what:<{WIDTH}} {unit:>9} {this:>10,.1f} {bare:>10,.1f} {this / bare:>6.2f}{note}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--h3load", required=True)
    p.add_argument("--requests", type=int, default=20000, help="requests for the CPU-time rows")
    p.add_argument("--callgrind-requests", type=int, default=1000, help="requests counted under callgrind")
    p.add_argument("--repeats", type=int, default=3,
                   help="runs of each count the adapter's own share is taken from; their median is used")
    p.add_argument("examples", nargs="+", help="EXAMPLE=BIN_DIR")
    args = p.parse_args()
    for tool in ("valgrind", "callgrind_control", "objcopy"):
        if shutil.which(tool) is None:
            raise SystemExit(f"bench-frameworks: {tool} not found; run bash scripts/setup")
    # Swift seeds its hashing at random in each process, so dictionaries probe differently from
    # run to run; with a fixed seed the instruction counts repeat to within about 1 k (Vapor's
    # request IDs and event-loop hand-offs still vary a little).
    os.environ["SWIFT_DETERMINISTIC_HASHING"] = "1"
    work = tempfile.mkdtemp(prefix="bench-frameworks.")
    print(f"{'':<{WIDTH}} {'unit':>9} {'this':>10} {'bare':>10} {'ratio':>6}")
    try:
        for example in args.examples:
            name, bin_dir = example.split("=", 1)
            if name == "VaporTodos":
                vapor_rows(args, bin_dir, work)
                continue
            # valgrind 3.19 cannot read the DWARF 5 that Swift 6 writes; the symbol table is enough.
            stripped = {}
            for binary in (name, "todos-bare"):
                stripped[binary] = os.path.join(work, f"{name}.{binary}")
                shutil.copy(os.path.join(bin_dir, binary), stripped[binary])
                subprocess.run(["objcopy", "--strip-debug", stripped[binary]], check=True)
            udp = free_udp_port()
            app = [stripped[name], "--host", "127.0.0.1", "--port", str(free_tcp_port()), "--http3-port", str(udp)]
            # The equivalent bare handler sends the fields Hummingbird's response carries
            # (content-type, content-length, date), so that encoding them is not counted as the adapter's.
            bare = [stripped["todos-bare"], str(udp), "--framework-fields"]
            plain_bare = [stripped["todos-bare"], str(udp)]
            adapter_only = [stripped["todos-bare"], str(udp), "--through-adapter"]
            adapter = lambda: instructions_per_request(args, adapter_only, udp, work, "adapter")
            bare_handler = lambda: instructions_per_request(args, bare, udp, work, "bare")
            alone = lambda: framework_alone([stripped["todos-bare"], "--hummingbird-only"], work, name)
            app_ir = instructions_per_request(args, app, udp, work, name)
            bare_ir = split_rows(args, name, "instructions, adapter without router", adapter, bare_handler, alone, "Hummingbird")
            row(f"{name}: instructions per 1 KiB GET, application", "k instr", app_ir / 1e3, bare_ir / 1e3)
            plain_ir = instructions_per_request(args, plain_bare, udp, work, "plain")
            row(f"{name}: bare handler, content-type only", "k instr", plain_ir / 1e3, bare_ir / 1e3)
            for tunables in (SERVER_THREAD_CACHE, UNBOUNDED_THREAD_CACHE):
                with servers_thread_cache(tunables):
                    split_rows(args, name, f"{tunables}: adapter without router", adapter, bare_handler, alone, "Hummingbird")
            app_cpu = cpu_per_request(args, app, udp)
            adapter_cpu = cpu_per_request(args, adapter_only, udp)
            bare_cpu = cpu_per_request(args, bare, udp)
            row(f"{name}: server CPU per 1 KiB GET, application", "µs", app_cpu, bare_cpu)
            row(f"{name}: server CPU, adapter without router", "µs", adapter_cpu, bare_cpu)
            tcp_port = free_tcp_port()
            tcp = wrk_per_request([stripped[name], "--host", "127.0.0.1", "--port", str(tcp_port), "--http3-port", str(free_udp_port())],
                                  f"https://127.0.0.1:{tcp_port}/kib")
            if tcp:
                rate, cpu = tcp
                row(f"{name}: own HTTP/1.1+TLS server, wrk -c50", "µs CPU", cpu, None, f"  ({rate:,.0f} req/s)")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print()
    print("h3load -c 1 -m 50 for every HTTP/3 row; application = the example's /kib route through its router and middleware;")
    print("adapter without router = todos-bare --through-adapter (HTTP3Service over one closure); bare = the same 1 KiB")
    print("from an HTTP3Server handler with the header fields the framework's response carries (--framework-fields).")
    print("Framework alone = the framework's own work per request with no transport (--hummingbird-only, --vapor-only),")
    print("callgrind at 200 and 1,200 requests; the adapter's own = served - bare - framework alone, from the medians of")
    print(f"{args.repeats} runs of the served and the framework-alone counts. Vapor alone is driven as the adapter drives it:")
    print("from its event loop with no task, fifty requests in flight, each an HTTP/3.0 request.")
    print(f"Instructions: callgrind over {args.callgrind_requests} requests after a warm-up; CPU: utime+stime over {args.requests}")
    print("requests. Target (issue 53): the adapter's own at most 0.15 of the bare handler's instructions.")
    print(f"{SERVER_THREAD_CACHE}: the same instruction counts with the per-thread cache h3serve sets for itself,")
    print("32 blocks of each size (glibc's default is 7): what is left is not malloc's slow path.")
    print(f"{UNBOUNDED_THREAD_CACHE}: the same with the largest cache glibc takes, where an allocation costs the same")
    print("however the requests' allocations interleave: the adapter's own there is its code and its allocations.")
    if any(example.startswith("VaporTodos=") for example in args.examples):
        print("VaporTodos: adapter over one route = vapor-todos-bare --through-adapter, an application with /kib as its only")
        print("route (Vapor alone: --vapor-only --route-only); application = `VaporTodos serve --env production`, its /kib")
        print("route through FileMiddleware and the router, HTTP/3 on the TCP port's number; bare = vapor-todos-bare")
        print("--framework-fields.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
