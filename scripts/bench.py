#!/usr/bin/env python3
"""The table of scripts/bench: our HTTP/3 server and client beside gtlsserver and gtlsclient.

Run it through scripts/bench, which installs the peers and builds the release binaries.
Standard library only. Each compared row is measured in rounds (two in --quick, four in a full
run), each round measuring both sides back to back, ours first and theirs first in turn. The
ratio "ours / C" is the median of the rounds' ratios, and the columns the median of each side:
a slow spell of the machine falls on both sides of a round, where it would move a mean of
separate runs. The rounds' lowest and highest ratio are printed beside it. Above 1 is better
for rates, below 1 is better for costs (CPU, memory, instructions).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import typing
from dataclasses import dataclass

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
AIOQUIC = os.path.join(REPO, "Tests", "Interop", "aioquic")
TICK = os.sysconf("SC_CLK_TCK")


def stat_cpu_seconds(path: str) -> float:
    """utime + stime from a /proc/.../stat file, in seconds."""
    with open(path) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def udp_port_bound(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False


def run(cmd: list[str], timeout: float = 600) -> subprocess.CompletedProcess:
    done = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=timeout)
    if done.returncode != 0:
        raise SystemExit(f"bench: {' '.join(cmd[:3])}… failed ({done.returncode}): {done.stderr[-800:]}{done.stdout[-400:]}")
    return done


def count_instructions(pid: int, out: str, load: list[str]) -> float:
    """The instructions the process `pid`, run under `valgrind --tool=callgrind
    --callgrind-out-file=out`, executes while `load` runs: counters zeroed before, dumped after."""
    directory, name = os.path.dirname(out), os.path.basename(out) + "."
    for stale in [p for p in os.listdir(directory) if p.startswith(name)]:
        os.remove(os.path.join(directory, stale))
    run(["callgrind_control", "-z", str(pid)])
    run(load, timeout=600)
    run(["callgrind_control", "-d", str(pid)])
    for _ in range(100):
        dumps = [p for p in os.listdir(directory) if p.startswith(name)]
        if dumps:
            with open(os.path.join(directory, dumps[0])) as f:
                for line in f:
                    if line.startswith("totals:"):
                        return float(line.split()[1])
        time.sleep(0.1)
    raise SystemExit("bench: callgrind wrote no dump")


def child_cpu_seconds(cmd: list[str]) -> float:
    """Runs cmd and returns its own CPU time (utime+stime), from wait4's rusage."""
    with tempfile.TemporaryFile(mode="w+") as errors:
        # Bodies go to /dev/null: a pipe nobody reads until the end would stall the client.
        process = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=errors, text=True)
        _, status, usage = os.wait4(process.pid, 0)
        process.returncode = code = os.waitstatus_to_exitcode(status)
        if code != 0:
            errors.seek(0)
            raise SystemExit(f"bench: {' '.join(cmd[:3])}… failed ({code}): {errors.read()[-800:]}")
    return usage.ru_utime + usage.ru_stime


@dataclass
class Server:
    """One server process; `port` is where it serves."""
    name: str
    cmd: list[str]
    port: int
    process: subprocess.Popen | None = None

    log: str | None = None
    log_file: typing.IO[str] | None = None

    def start(self) -> "Server":
        self.log_file = open(self.log, "w") if self.log else None
        output = self.log_file or subprocess.DEVNULL
        self.process = subprocess.Popen(self.cmd, stdout=output, stderr=output)
        for _ in range(300):
            if self.process.poll() is not None:
                raise SystemExit(f"bench: {self.name} exited at start: {' '.join(self.cmd)}")
            if udp_port_bound(self.port):
                time.sleep(0.2)
                return self
            time.sleep(0.1)
        raise SystemExit(f"bench: {self.name} never bound port {self.port}")

    @property
    def pid(self) -> int:
        return self.process.pid

    def cpu_seconds(self) -> float:
        return stat_cpu_seconds(f"/proc/{self.pid}/stat")

    def thread_cpu_seconds(self, prefix: str = "quic-worker-") -> dict[str, float]:
        """CPU time of each thread whose name starts with `prefix` (the workers' event loops,
        one thread each), from /proc/PID/task/TID/stat."""
        threads = {}
        for tid in os.listdir(f"/proc/{self.pid}/task"):
            try:
                with open(f"/proc/{self.pid}/task/{tid}/comm") as f:
                    name = f.read().strip()
                if name.startswith(prefix):
                    threads[f"{name}/{tid}"] = stat_cpu_seconds(f"/proc/{self.pid}/task/{tid}/stat")
            except FileNotFoundError:
                continue
        return threads

    def rss_kib(self, kind: str = "VmRSS") -> int:
        """VmRSS (all resident pages), or RssAnon (the process's own memory, without shared
        code pages and mapped files: gtlsserver maps the files it serves)."""
        with open(f"/proc/{self.pid}/status") as f:
            for line in f:
                if line.startswith(kind + ":"):
                    return int(line.split()[1])
        return 0

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
        if self.log_file:
            self.log_file.close()
            self.log_file = None


@dataclass
class Paired:
    """One figure from rounds that measured both sides back to back."""
    ours: float
    theirs: float
    ratio: float
    low: float
    high: float

    @staticmethod
    def of(ours: list[float], theirs: list[float]) -> "Paired":
        # A marginal cost (a difference of two CPU times) can come out at or below zero when
        # it is smaller than the noise: such a round has no ratio. Without any, the ratio is
        # that of the medians, and no range is given.
        ratios = sorted(o / t for o, t in zip(ours, theirs) if o > 0 and t > 0)
        ours_median, theirs_median = statistics.median(ours), statistics.median(theirs)
        if not ratios:
            if theirs_median <= 0:
                raise SystemExit("bench: a row measured nothing on the C peer's side")
            ratio = ours_median / theirs_median
            return Paired(ours_median, theirs_median, ratio, ratio, ratio)
        return Paired(ours_median, theirs_median, statistics.median(ratios), ratios[0], ratios[-1])


@dataclass
class Row:
    group: str
    what: str
    unit: str
    ours: float
    theirs: float | None
    ours_name: str
    theirs_name: str | None
    higher_is_better: bool = False
    #: The rounds the row comes from, when it compares both sides.
    paired: Paired | None = None

    @property
    def ratio(self) -> float | None:
        if self.paired is not None:
            return self.paired.ratio
        if self.theirs in (None, 0):
            return None
        return self.ours / self.theirs


class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.bin = args.bin
        self.py = args.python
        self.work = tempfile.mkdtemp(prefix="bench-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
        self.www = os.path.join(self.work, "www")
        self.dl = os.path.join(self.work, "dl")
        os.makedirs(self.www)
        os.makedirs(self.dl)
        self.cert = os.path.join(self.work, "cert.pem")
        self.key = os.path.join(self.work, "key.pem")
        run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
             "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1", "-days", "1",
             "-keyout", self.key, "-out", self.cert])
        quick = args.quick
        # CPU time is counted in clock ticks (10 ms): each run is sized to take a few tenths of a
        # second of server CPU or more, so that a tick is at most a few per cent of it. The sizes
        # are per round.
        self.rounds = 2 if quick else 4
        self.bulk_bytes = (128 if quick else 256) << 20
        self.requests = 5000 if quick else 10000
        self.load_requests = 100000 if quick else 150000
        self.connections = 300 if quick else 500
        self.idle_connections = 200
        self.echo_bytes = (64 if quick else 256) << 20
        self.echo_streams = 2000 if quick else 10000
        with open(os.path.join(self.www, "1k.bin"), "wb") as f:
            f.write(os.urandom(1024))
        with open(os.path.join(self.www, "bulk.bin"), "wb") as f:
            for _ in range(self.bulk_bytes >> 20):
                f.write(os.urandom(1 << 20))
        self.rows: list[Row] = []
        self.servers: list[Server] = []

    # -- servers ------------------------------------------------------------------

    def h3serve(self, port: int | None = None, prefix: list[str] | None = None, binary: str | None = None,
                workers: int = 1, log: str | None = None) -> Server:
        """One worker unless told otherwise: the rows compare cost per core with gtlsserver,
        which runs on one thread."""
        port = port or free_udp_port()
        # 127.0.0.1 alone, as gtlsserver binds: the default, localhost, adds a socket at ::1.
        cmd = (prefix or []) + [binary or os.path.join(self.bin, "h3serve"), "-q", "--no-tcp", "--host", "127.0.0.1", "--port", str(port),
                                "--root", self.www, "--cert", self.cert, "--key", self.key, "--workers", str(workers)]
        return self.track(Server("h3serve", cmd, port, log=log).start())

    def gtlsserver(self, prefix: list[str] | None = None) -> Server:
        port = free_udp_port()
        cmd = (prefix or []) + ["gtlsserver", "-q", "-d", self.www, "127.0.0.1", str(port), self.key, self.cert]
        return self.track(Server("gtlsserver", cmd, port).start())

    def track(self, server: Server) -> Server:
        self.servers.append(server)
        return server

    def stop_all(self) -> None:
        for server in self.servers:
            server.stop()

    # -- clients ------------------------------------------------------------------

    def url(self, server: Server, name: str, host: str = "localhost") -> str:
        return f"https://{host}:{server.port}/{name}"

    def h3get_bulk_command(self, server: Server, out: str) -> list[str]:
        return [os.path.join(self.bin, "h3get"), "--http3-only", "--cacert", self.cert, "-o", out, self.url(server, "bulk.bin")]

    def h3get_bulk(self, server: Server) -> float:
        out = os.path.join(self.dl, "bulk.bin")
        started = time.monotonic()
        run(self.h3get_bulk_command(server, out))
        elapsed = time.monotonic() - started
        self.check_size(out)
        return self.bulk_bytes / elapsed / 1e6

    def gtlsclient_bulk(self, server: Server) -> float:
        started = time.monotonic()
        run(["gtlsclient", "--quiet", "--exit-on-all-streams-close", "--download", self.dl, "127.0.0.1", str(server.port),
             self.url(server, "bulk.bin", "127.0.0.1")])
        elapsed = time.monotonic() - started
        self.check_size(os.path.join(self.dl, "bulk.bin"))
        return self.bulk_bytes / elapsed / 1e6

    def bulk_with_server_cpu(self, server: Server, download) -> tuple[float, float]:
        """The download's rate (MB/s), and the server's CPU time per MiB served (µs, counted in
        10 ms clock ticks: a quick run's 128 MiB is about 15 of them on either server)."""
        before = server.cpu_seconds()
        rate = download(server)
        return rate, (server.cpu_seconds() - before) * 1e6 / (self.bulk_bytes / (1 << 20))

    def check_size(self, path: str) -> None:
        size = os.path.getsize(path) if os.path.exists(path) else -1
        os.path.exists(path) and os.remove(path)
        if size != self.bulk_bytes:
            raise SystemExit(f"bench: the download was {size} bytes, not {self.bulk_bytes}")

    def server_cpu(self, server: Server, cmd: list[str]) -> float:
        before = server.cpu_seconds()
        run(cmd)
        return server.cpu_seconds() - before

    def server_cpu_per_operation(self, ours: Server, theirs: Server, count: int, command) -> "Paired":
        """Each server's CPU time (µs) per operation, over `count` operations that
        `command(server)` performs against it, in rounds."""
        return self.in_rounds(lambda: self.server_cpu(ours, command(ours)) / count * 1e6,
                              lambda: self.server_cpu(theirs, command(theirs)) / count * 1e6)

    def aioquic_requests(self, server: Server, count: int, in_flight: int = 50) -> list[str]:
        return [self.py, os.path.join(AIOQUIC, "h3_requests.py"), self.url(server, "1k.bin", "127.0.0.1"),
                "--cacert", self.cert, "--requests", str(count), "--in-flight", str(in_flight)]

    def aioquic_churn(self, server: Server, count: int, timeout: float = 10) -> list[str]:
        return [self.py, os.path.join(AIOQUIC, "h3_churn.py"), self.url(server, "1k.bin", "127.0.0.1"),
                "--cacert", self.cert, "--connections", str(count), "--timeout", str(timeout)]

    def h3load(self, server: Server, requests: int, clients: int, streams: int) -> list[str]:
        return [os.path.join(self.bin, "h3load"), "-n", str(requests), "-c", str(clients), "-m", str(streams),
                "--cacert", self.cert, self.url(server, "1k.bin")]

    # -- rows ---------------------------------------------------------------------

    def in_rounds(self, measure_ours, measure_theirs):
        """Measures both sides in `self.rounds` rounds, back to back within a round, ours first
        in the first round and theirs first in the next. A measurement may return a tuple of
        figures: each gets a `Paired` of its own."""
        ours, theirs = [], []
        for round in range(self.rounds):
            if round % 2 == 0:
                ours.append(measure_ours())
                theirs.append(measure_theirs())
            else:
                theirs.append(measure_theirs())
                ours.append(measure_ours())
        if isinstance(ours[0], tuple):
            return tuple(Paired.of([o[k] for o in ours], [t[k] for t in theirs]) for k in range(len(ours[0])))
        return Paired.of(ours, theirs)

    def add(self, row: Row) -> None:
        self.rows.append(row)
        print(self.format_row(row), flush=True)

    def add_paired(self, group: str, what: str, unit: str, figure: Paired, ours_name: str, theirs_name: str,
                   higher_is_better: bool = False) -> None:
        self.add(Row(group, what, unit, figure.ours, figure.theirs, ours_name, theirs_name, higher_is_better, paired=figure))

    def server_rows(self, ours: Server, theirs: Server) -> None:
        group = "server (same client against h3serve and gtlsserver)"
        # The server's own CPU time per MiB served, from the same runs: a steadier figure than
        # the rate, which moves with how the two processes share the cores.
        rate, cpu = self.in_rounds(lambda: self.bulk_with_server_cpu(ours, self.h3get_bulk),
                                     lambda: self.bulk_with_server_cpu(theirs, self.h3get_bulk))
        names = ("h3serve", "gtlsserver")
        self.add_paired(group, f"bulk {self.bulk_bytes >> 20} MiB, client h3get", "MB/s", rate, *names, True)
        self.add_paired(group, f"server CPU per MiB of that bulk, client h3get", "µs", cpu, *names)
        rate = self.in_rounds(lambda: self.gtlsclient_bulk(ours), lambda: self.gtlsclient_bulk(theirs))
        self.add_paired(group, f"bulk {self.bulk_bytes >> 20} MiB, client gtlsclient", "MB/s", rate, *names, True)

        n = self.requests
        cpu = self.server_cpu_per_operation(ours, theirs, n, lambda server: self.aioquic_requests(server, n))
        self.add_paired(group, f"CPU per 1 KiB GET, aioquic, 1 conn, 50 in flight ({n})", "µs", cpu, *names)
        n = self.load_requests
        cpu = self.server_cpu_per_operation(ours, theirs, n, lambda server: self.h3load(server, n, 1, 50))
        self.add_paired(group, f"CPU per 1 KiB GET, h3load -c 1 -m 50 ({n})", "µs", cpu, *names)

        n = self.connections
        cpu = self.server_cpu_per_operation(ours, theirs, n, lambda server: self.aioquic_churn(server, n))
        self.add_paired(group, f"CPU per new connection (handshake + GET), aioquic ({n})", "µs", cpu, *names)
        cpu = self.server_cpu_per_operation(ours, theirs, n, lambda server: self.h3load(server, n, n, 1))
        self.add_paired(group, f"CPU per new connection (handshake + GET), h3load -c {n} ({n})", "µs", cpu, *names)

        runs = 10 if self.args.quick else 20
        latency = self.in_rounds(lambda: self.first_response_ms(ours, runs), lambda: self.first_response_ms(theirs, runs))
        self.add_paired(group, f"new connection to 1 KiB response, h3get time_total (median {runs})", "ms", latency, *names)

        rss = self.in_rounds(lambda: self.idle_rss_per_connection(self.h3serve), lambda: self.idle_rss_per_connection(self.gtlsserver))
        self.add_paired(group, f"anon RSS per idle connection ({self.idle_connections} held, aioquic)", "KiB", rss, *names)

    def first_response_ms(self, server: Server, runs: int) -> float:
        """How long h3get takes from its start of a transfer to the end of a 1 KiB response on a
        new connection, handshake included (its time_total, as curl's): the median of `runs`.
        ngtcp2 0.12 paces a server's first flight at the initial RTT, which holds its answer to
        the client's Finished about 20 ms; h3serve paces from the first RTT sample."""
        times = []
        for _ in range(runs):
            out = run([os.path.join(self.bin, "h3get"), "--http3-only", "--cacert", self.cert, "-s", "-o", os.devnull,
                       "-w", "%{time_total}", self.url(server, "1k.bin")]).stdout
            times.append(float(out.strip()) * 1e3)
        return statistics.median(times)

    def idle_rss_per_connection(self, start) -> float:
        """Memory a fresh server takes on for each idle connection. A fresh one each time: a
        server that has served before reuses pages it kept (or, trimmed, faults them in anew),
        and the figure would measure that history instead."""
        server = start()
        before = server.rss_kib("RssAnon")
        cmd = [self.py, os.path.join(AIOQUIC, "h3_churn.py"), self.url(server, "1k.bin", "127.0.0.1"), "--cacert", self.cert,
               "--connections", str(self.idle_connections), "--hold", "2"]
        holder = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = holder.stdout.readline()
        if not line.startswith("HOLDING"):
            holder.kill()
            raise SystemExit(f"bench: the idle connections did not open: {line}{holder.stderr.read()[-500:]}")
        held = int(line.split()[1])
        time.sleep(0.5)
        during = server.rss_kib("RssAnon")
        holder.communicate(timeout=120)
        server.stop()
        return (during - before) / max(held, 1)

    def client_rows(self, server: Server) -> None:
        group = "client (h3get and gtlsclient against the same gtlsserver)"
        rate = self.in_rounds(lambda: self.h3get_bulk(server), lambda: self.gtlsclient_bulk(server))
        self.add_paired(group, f"bulk {self.bulk_bytes >> 20} MiB", "MB/s", rate, "h3get", "gtlsclient", True)
        # The marginal cost: CPU for n requests less CPU for one, over n - 1. Process start-up
        # (the Swift runtime and NIO's threads) is paid once and is left out. gtlsclient's
        # 1,000 requests cost about 5 ms, within the noise of its start-up, so a full run makes
        # 10,000 on each side (the URLs on h3get's command line take about 400 KB).
        n = 2000 if self.args.quick else 10000

        def ours_cmd(count: int) -> list[str]:
            return [os.path.join(self.bin, "h3get"), "--http3-only", "--cacert", self.cert, "-s"] + [self.url(server, "1k.bin")] * count

        def theirs_cmd(count: int) -> list[str]:
            return ["gtlsclient", "--quiet", "--exit-on-all-streams-close", "-n", str(count), "127.0.0.1", str(server.port),
                    self.url(server, "1k.bin", "127.0.0.1")]

        def marginal(cmd, count: int = n) -> float:
            return (child_cpu_seconds(cmd(count)) - child_cpu_seconds(cmd(1))) / (count - 1) * 1e6

        cpu = self.in_rounds(lambda: marginal(ours_cmd), lambda: marginal(theirs_cmd))
        self.add_paired(group, f"client CPU per 1 KiB GET, {n} on one connection (start-up excluded)", "µs", cpu, "h3get", "gtlsclient")

        # The same requests from the library without h3get's command line (its parsing, URL
        # checks, HTTPSession's discovery and a task per URL, which the row above includes). 100 in
        # flight, as many as gtlsclient gets from the server's stream limit.
        def library_cmd(count: int) -> list[str]:
            return [os.path.join(self.bin, "h3load"), "--cacert", self.cert, "-c", "1", "-m", "100", "-n", str(count),
                    self.url(server, "1k.bin")]

        cpu = self.in_rounds(lambda: marginal(library_cmd, n), lambda: marginal(theirs_cmd, n))
        self.add_paired(group, f"client CPU per 1 KiB GET, {n} on one connection, h3load -m 100 (HTTP3Client)", "µs", cpu,
                        "h3load", "gtlsclient")

    def rest_rows(self, ours: Server, theirs: Server) -> None:
        # At rest: h3serve gives freed memory back once connections have stopped coming and going
        # for 5 s, and the last ones end a closing or draining period after the load.
        time.sleep(12)
        self.add(Row("memory", "anon RSS at rest after all of the above", "MiB", ours.rss_kib("RssAnon") / 1024,
                     theirs.rss_kib("RssAnon") / 1024, "h3serve", "gtlsserver"))
        self.add(Row("memory", "RSS at rest (with shared code and mapped files)", "MiB", ours.rss_kib() / 1024,
                     theirs.rss_kib() / 1024, "h3serve", "gtlsserver"))

    def echo_rows(self) -> None:
        group = "raw streams (quic-echo; no C peer echoes)"
        port = free_udp_port()
        echo = self.track(Server("quic-echo serve", [os.path.join(self.bin, "quic-echo"), "serve", "--host", "127.0.0.1", "--port", str(port),
                                                     "--cert", self.cert, "--key", self.key], port).start())
        connect = [os.path.join(self.bin, "quic-echo"), "connect", "127.0.0.1", str(port), "--cacert", self.cert,
                   "--sni", "localhost", "--timeout", "300"]
        started = time.monotonic()
        run(connect + ["--size", str(self.echo_bytes)])
        rate = self.echo_bytes / (time.monotonic() - started) / 1e6
        self.add(Row(group, f"echo {self.echo_bytes >> 20} MiB through one stream", "MB/s", rate, None, "quic-echo", None, True))
        n = self.echo_streams
        before = echo.cpu_seconds()
        client_cpu = child_cpu_seconds(connect + ["--streams", str(n), "--data", "hello"])
        server_cpu = echo.cpu_seconds() - before
        self.add(Row(group, f"server CPU per short echo stream ({n} on one tunnel)", "µs", server_cpu / n * 1e6, None, "quic-echo serve", None))
        self.add(Row(group, f"client CPU per short echo stream ({n} on one tunnel)", "µs", client_cpu / n * 1e6, None, "quic-echo connect", None))
        echo.stop()

    def worker_rows(self) -> None:
        """h3serve on 1 and on 2 workers under the same h3load run. h3load shares this machine's
        cores with the server, so the throughput ratio understates what more cores give; the
        spread over workers and the hand-over count are what the run shows exactly."""
        group = "scale-out (h3serve --workers; the load generator shares the cores)"
        n = self.load_requests
        load = lambda server: self.h3load(server, n, 8, 10)
        results = {}
        for workers in (1, 2):
            log = os.path.join(self.work, f"h3serve-{workers}.log")
            server = self.h3serve(workers=workers, log=log)
            run(self.h3load(server, 500, 8, 10))
            cpu_before, threads_before = server.cpu_seconds(), server.thread_cpu_seconds()
            started = time.monotonic()
            run(load(server))
            elapsed = time.monotonic() - started
            cpu = server.cpu_seconds() - cpu_before
            threads_after = server.thread_cpu_seconds()
            shares = sorted((threads_after[t] - threads_before.get(t, 0) for t in threads_after), reverse=True)[:workers]
            server.stop()
            with open(log) as f:
                stats = [line for line in f if line.startswith("workers: datagrams")]
            if not stats:
                raise SystemExit(f"bench: h3serve --workers {workers} printed no worker statistics")
            numbers = re.match(r"workers: datagrams \[([\d, ]+)\], connections \[([\d, ]+)\], hand-overs (\d+)", stats[-1])
            if not numbers:
                raise SystemExit(f"bench: cannot read h3serve's worker statistics: {stats[-1].strip()}")
            datagrams = [int(x) for x in numbers.group(1).split(",")]
            connections = [int(x) for x in numbers.group(2).split(",")]
            results[workers] = dict(rps=n / elapsed, cpu_per_request=cpu / n * 1e6, shares=shares, datagrams=datagrams,
                                    connections=connections, handovers=int(numbers.group(3)))
        one, two = results[1], results[2]
        self.add(Row(group, f"requests/s, h3load -c 8 -m 10 ({n}): 2 workers vs 1", "req/s", two["rps"], one["rps"],
                     "h3serve --workers 2", "h3serve --workers 1", True))
        self.add(Row(group, f"server CPU per 1 KiB GET, same load: 2 workers vs 1", "µs", two["cpu_per_request"],
                     one["cpu_per_request"], "h3serve --workers 2", "h3serve --workers 1"))
        total = sum(two["shares"]) or 1
        self.add(Row(group, "busiest worker's share of the workers' CPU (2 workers; 50% is even)", "%",
                     100 * two["shares"][0] / total, None, "h3serve --workers 2", None))
        self.add(Row(group, f"connections per worker: {two['connections']}; busiest worker's share", "%",
                     100 * max(two["connections"]) / max(1, sum(two["connections"])), None, "h3serve --workers 2", None))
        self.add(Row(group, f"hand-overs per million datagrams ({sum(two['datagrams'])} datagrams)", "ppm",
                     two["handovers"] / max(1, sum(two["datagrams"])) * 1e6, None, "h3serve --workers 2", None))

    def callgrind_rows(self) -> None:
        """Instructions per request and per handshake, counted by callgrind after a warm-up.

        Under valgrind a server runs some fifty times slower, so with 50 requests in flight
        they pile up and each pass of its loop serves a dozen or more: that row hides what a
        pass costs. In real time the server keeps up and makes one or two passes per request,
        as the row with one request in flight does under valgrind too.
        """
        group = "instructions (valgrind --tool=callgrind; server side)"
        # valgrind 3.19 cannot read the DWARF 5 that Swift 6 writes; the symbol table is enough.
        stripped = os.path.join(self.work, "h3serve.stripped")
        shutil.copy(os.path.join(self.bin, "h3serve"), stripped)
        run(["objcopy", "--strip-debug", stripped])
        requests = 300 if self.args.quick else 1000
        sequential = 200 if self.args.quick else 500
        handshakes = 20 if self.args.quick else 50
        results = {}
        for name, start in (("h3serve", lambda prefix: self.h3serve(prefix=prefix, binary=stripped)),
                            ("gtlsserver", lambda prefix: self.gtlsserver(prefix=prefix))):
            out = os.path.join(self.work, f"callgrind.{name}")
            # h3serve runs itself again with its malloc tunables (CommandLineSupport's
            # runWithMallocTunables); valgrind follows that exec and counts the tuned process.
            server = start(["valgrind", "--tool=callgrind", "--trace-children=yes", f"--callgrind-out-file={out}"])
            run(self.aioquic_requests(server, 50), timeout=300)
            per_request = self.count_instructions(server, out, self.aioquic_requests(server, requests)) / requests
            per_sequential = self.count_instructions(server, out, self.aioquic_requests(server, sequential, in_flight=1)) / sequential
            per_handshake = self.count_instructions(server, out, self.aioquic_churn(server, handshakes, timeout=120)) / handshakes
            bulk = os.path.join(self.dl, "bulk.bin")
            per_kib = self.count_instructions(server, out, self.h3get_bulk_command(server, bulk)) / (self.bulk_bytes >> 10)
            self.check_size(bulk)
            server.stop()
            results[name] = (per_request, per_sequential, per_handshake, per_kib)
        (our_request, our_sequential, our_handshake, our_kib) = results["h3serve"]
        (c_request, c_sequential, c_handshake, c_kib) = results["gtlsserver"]
        self.add(Row(group, f"per 1 KiB GET, aioquic, 50 in flight ({requests})", "k instr", our_request / 1e3, c_request / 1e3, "h3serve", "gtlsserver"))
        self.add(Row(group, f"per 1 KiB GET, aioquic, 1 in flight ({sequential})", "k instr", our_sequential / 1e3, c_sequential / 1e3, "h3serve", "gtlsserver"))
        self.add(Row(group, f"per new connection (handshake + GET), aioquic ({handshakes})", "k instr", our_handshake / 1e3, c_handshake / 1e3, "h3serve", "gtlsserver"))
        self.add(Row(group, f"per KiB served, bulk {self.bulk_bytes >> 20} MiB to h3get", "instr", our_kib, c_kib, "h3serve", "gtlsserver"))

    def count_instructions(self, server: Server, out: str, load: list[str]) -> float:
        return count_instructions(server.pid, out, load)

    # -- output -------------------------------------------------------------------

    @staticmethod
    def format_row(row: Row) -> str:
        ours = f"{row.ours:,.1f}"
        theirs = f"{row.theirs:,.1f}" if row.theirs is not None else "–"
        ratio = f"{row.ratio:.2f}" if row.ratio is not None else "–"
        spread = f"{row.paired.low:.2f}–{row.paired.high:.2f}" if row.paired else ""
        return f"{row.what:<62} {row.unit:>8} {ours:>12} {theirs:>12} {ratio:>7} {spread:>11}"

    def header(self) -> None:
        print(f"{'':<62} {'unit':>8} {'ours':>12} {'C peer':>12} {'ours/C':>7} {'rounds':>11}")

    def run(self) -> None:
        self.header()
        only = self.args.only
        try:
            if only in (None, "server", "client", "rest"):
                ours, theirs = self.h3serve(), self.gtlsserver()
                if only in (None, "server"):
                    self.server_rows(ours, theirs)
                if only in (None, "client"):
                    self.client_rows(theirs)
                if only in (None, "rest"):
                    self.rest_rows(ours, theirs)
                ours.stop()
                theirs.stop()
            if only in (None, "echo"):
                self.echo_rows()
            if only in (None, "workers"):
                self.worker_rows()
            if only in (None, "callgrind") and not self.args.no_callgrind:
                self.callgrind_rows()
        finally:
            self.stop_all()
            shutil.rmtree(self.work, ignore_errors=True)
        print()
        print("ours/C: for MB/s above 1 is better; for µs, KiB, MiB and instructions below 1 is better.")
        print(f"Compared rows: {self.rounds} rounds, each side measured back to back in turn; ours and C peer are the")
        print("medians of each side, ours/C the median of the rounds' ratios, and rounds their lowest and highest.")
        print("Servers: h3serve -q and gtlsserver -q (no request log). Clients: h3get, gtlsclient, aioquic 1.7.2, h3load.")
        if self.args.json:
            with open(self.args.json, "w") as f:
                json.dump([{"what": r.what, "unit": r.unit, "ours": r.ours, "ours_name": r.ours_name, "theirs": r.theirs,
                            "theirs_name": r.theirs_name, "ratio": r.ratio,
                            "ratio_range": [r.paired.low, r.paired.high] if r.paired else None} for r in self.rows], f, indent=1)


def main() -> int:
    p = argparse.ArgumentParser(description="HTTP/3 server and client benchmark beside ngtcp2's examples")
    p.add_argument("--bin", required=True, help="directory of the release binaries")
    p.add_argument("--python", required=True, help="python with aioquic 1.7.2")
    p.add_argument("--quick", action="store_true", help="smaller runs, about 3 minutes")
    p.add_argument("--no-callgrind", action="store_true", help="skip the instruction counts")
    p.add_argument("--json", help="also write the rows to this file")
    p.add_argument("--only", choices=["server", "client", "rest", "echo", "workers", "callgrind"], help="run one group of rows")
    args = p.parse_args()
    for tool in ("gtlsserver", "gtlsclient", "valgrind", "callgrind_control", "objcopy", "openssl"):
        if shutil.which(tool) is None:
            raise SystemExit(f"bench: {tool} not found; run bash scripts/setup")
    Bench(args).run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
