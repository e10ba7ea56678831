#!/usr/bin/env python3
"""Per-request cost of each web framework's HTTP/3 adapter beside a bare HTTP3Server handler.

Run by scripts/bench-frameworks, which builds the example applications in release mode and
passes EXAMPLE=BIN_DIR for each. Every server answers GET /kib with 1 KiB; h3load -c 1 -m 50 is
the client for all of them. Prints one table; ratios are adapter / bare (below 1.15 meets the
target).
"""
from __future__ import annotations

import argparse
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
    """The Vapor rows: its application's /kib over HTTP/3 against vapor-todos-bare, and its own server under wrk."""
    stripped = {}
    for binary in ("VaporTodos", "vapor-todos-bare"):
        stripped[binary] = os.path.join(work, f"VaporTodos.{binary}")
        shutil.copy(os.path.join(bin_dir, binary), stripped[binary])
        subprocess.run(["objcopy", "--strip-debug", stripped[binary]], check=True)
    port = free_udp_port()
    app = vapor_app(stripped["VaporTodos"], port)
    bare = [stripped["vapor-todos-bare"], str(port)]
    app_ir = instructions_per_request(args, app, port, work, "VaporTodos", ready=VAPOR_READY, cwd=work)
    bare_ir = instructions_per_request(args, bare, port, work, "vapor-bare")
    print(f"{'VaporTodos: instructions per 1 KiB GET, application':<46} {'k instr':>9} {app_ir / 1e3:>10,.1f} {bare_ir / 1e3:>10,.1f} {app_ir / bare_ir:>6.2f}")
    app_cpu = cpu_per_request(args, app, port, ready=VAPOR_READY, cwd=work)
    bare_cpu = cpu_per_request(args, bare, port)
    print(f"{'VaporTodos: server CPU per 1 KiB GET, application':<46} {'µs':>9} {app_cpu:>10,.1f} {bare_cpu:>10,.1f} {app_cpu / bare_cpu:>6.2f}")
    tcp_port = free_udp_port()  # Vapor serves HTTP/3 on the UDP port of the TCP port's number
    tcp = wrk_per_request(vapor_app(stripped["VaporTodos"], tcp_port), f"http://127.0.0.1:{tcp_port}/kib",
                          ready=VAPOR_READY, cwd=work)
    if tcp:
        rate, cpu = tcp
        print(f"{'VaporTodos: own HTTP/1.1 server (no TLS), wrk -c50':<46} {'µs CPU':>9} {cpu:>10,.1f} {'':>10} {'':>6}  ({rate:,.0f} req/s)")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--h3load", required=True)
    p.add_argument("--requests", type=int, default=20000, help="requests for the CPU-time rows")
    p.add_argument("--callgrind-requests", type=int, default=1000, help="requests counted under callgrind")
    p.add_argument("examples", nargs="+", help="EXAMPLE=BIN_DIR")
    args = p.parse_args()
    for tool in ("valgrind", "callgrind_control", "objcopy"):
        if shutil.which(tool) is None:
            raise SystemExit(f"bench-frameworks: {tool} not found; run bash scripts/setup")
    work = tempfile.mkdtemp(prefix="bench-frameworks.")
    print(f"{'':<46} {'unit':>9} {'adapter':>10} {'bare':>10} {'ratio':>6}")
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
            bare = [stripped["todos-bare"], str(udp)]
            adapter_only = bare + ["--through-adapter"]
            app_ir = instructions_per_request(args, app, udp, work, name)
            adapter_ir = instructions_per_request(args, adapter_only, udp, work, "adapter")
            bare_ir = instructions_per_request(args, bare, udp, work, "bare")
            print(f"{name + ': instructions per 1 KiB GET, application':<46} {'k instr':>9} {app_ir / 1e3:>10,.1f} {bare_ir / 1e3:>10,.1f} {app_ir / bare_ir:>6.2f}")
            print(f"{name + ': instructions, adapter without router':<46} {'k instr':>9} {adapter_ir / 1e3:>10,.1f} {bare_ir / 1e3:>10,.1f} {adapter_ir / bare_ir:>6.2f}")
            app_cpu = cpu_per_request(args, app, udp)
            adapter_cpu = cpu_per_request(args, adapter_only, udp)
            bare_cpu = cpu_per_request(args, bare, udp)
            print(f"{name + ': server CPU per 1 KiB GET, application':<46} {'µs':>9} {app_cpu:>10,.1f} {bare_cpu:>10,.1f} {app_cpu / bare_cpu:>6.2f}")
            print(f"{name + ': server CPU, adapter without router':<46} {'µs':>9} {adapter_cpu:>10,.1f} {bare_cpu:>10,.1f} {adapter_cpu / bare_cpu:>6.2f}")
            tcp_port = free_tcp_port()
            tcp = wrk_per_request([stripped[name], "--host", "127.0.0.1", "--port", str(tcp_port), "--http3-port", str(free_udp_port())],
                                  f"https://127.0.0.1:{tcp_port}/kib")
            if tcp:
                rate, cpu = tcp
                print(f"{name + ': own HTTP/1.1+TLS server, wrk -c50':<46} {'µs CPU':>9} {cpu:>10,.1f} {'':>10} {'':>6}  ({rate:,.0f} req/s)")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print()
    print("h3load -c 1 -m 50 for every HTTP/3 row; application = the example's /kib route through its router and middleware;")
    print("adapter without router = todos-bare --through-adapter (HTTP3Service over one closure); bare = todos-bare,")
    print(f"the same 1 KiB from an HTTP3Server handler. Instructions: callgrind over {args.callgrind_requests} requests after a")
    print(f"warm-up; CPU: utime+stime over {args.requests} requests. Target: adapter/bare at most 1.15 in instructions.")
    if any(example.startswith("VaporTodos=") for example in args.examples):
        print("VaporTodos: application = `VaporTodos serve --env production`, its /kib route through FileMiddleware and the")
        print("router, HTTP/3 on the TCP port's number; bare = vapor-todos-bare, the same 1 KiB from an HTTP3Server handler.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
