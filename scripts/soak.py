#!/usr/bin/env python3
"""scripts/soak.py — a mixed churn against h3serve and quic-echo for minutes, and what it leaves.

Run through scripts/soak, which builds the release tools. Workloads run side by side until the
time is up, each in a loop, and every transfer's fate is counted:

  h3load      bursts of handshakes and many small GETs (-c 10 -m 10 for 5 s)
  aioquic     h3_churn.py: 40 short connections, a full handshake and one GET each
  bulk        h3get of a 20 MiB file, its size checked; every third one SIGKILLed after
              0.2-1.0 s on purpose (a client that vanishes mid-transfer)
  0-RTT       h3get --session-file --0rtt against h3serve --early-data, then quic-echo's
  echo        quic-echo connect with 8 bidirectional and 2 unidirectional streams; every fourth
              migrates (--migrate), every fifth resets streams (--reset-code)

Every 5 s each server's RSS (VmRSS), open descriptors and CPU time are sampled. The verdict:
  1. RSS after warm-up grows by at most 10%: the median of the samples in the last fifth of the
     run against the median of the second fifth (the first fifth is warm-up: arenas, caches
     and the open-file cache fill there; medians, because one sample can land on a burst);
  2. once the load has stopped and the idle timeout (30 s) has passed, each server's open
     descriptors are back at the count taken before the load (after one request for each
     file, since h3serve keeps served files open for a while);
  3. no connection outlives its idle timeout: each server, stopped then, prints how many
     connections it still holds in memory, and that must be 0;
  4. no transfer failed, other than those killed on purpose.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

IDLE_TIMEOUT = 30.0  # QUICConfiguration.idleTimeoutMilliseconds


class Server:
    def __init__(self, name: str, cmd: list[str], port_pattern: str) -> None:
        self.name = name
        self.log = tempfile.TemporaryFile(mode="w+")
        self.process = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, text=True)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            self.log.seek(0)
            match = re.search(port_pattern, self.log.read())
            if match:
                self.port = int(match.group(1))
                break
            if self.process.poll() is not None:
                raise SystemExit(f"soak: {name} exited at start: {self.output()}")
            time.sleep(0.1)
        else:
            raise SystemExit(f"soak: {name} did not start: {self.output()}")
        self.samples: list[tuple[float, int, int, float]] = []
        self.baseline_fds = self.fds()

    def output(self) -> str:
        self.log.seek(0)
        return self.log.read()

    def rss_kib(self) -> int:
        with open(f"/proc/{self.process.pid}/status") as status:
            return int(next(line for line in status if line.startswith("VmRSS")).split()[1])

    def fds(self) -> int:
        return len(os.listdir(f"/proc/{self.process.pid}/fd"))

    def cpu_seconds(self) -> float:
        with open(f"/proc/{self.process.pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def sample(self) -> None:
        self.samples.append((time.monotonic(), self.rss_kib(), self.fds(), self.cpu_seconds()))

    def stop(self) -> int | None:
        """SIGINT, and the count of connections it says it still holds (None if it says nothing)."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
        match = re.search(r"(\d+) connections still in memory", self.output())
        return int(match.group(1)) if match else None


class Tally:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.ok: dict[str, int] = {}
        self.failed: dict[str, list[str]] = {}
        self.killed = 0
        self.requests = 0

    def record(self, kind: str, ok: bool, detail: str = "", requests: int = 0) -> None:
        with self.lock:
            self.requests += requests
            if ok:
                self.ok[kind] = self.ok.get(kind, 0) + 1
            else:
                self.failed.setdefault(kind, []).append(detail[-300:])

    def kill(self) -> None:
        with self.lock:
            self.killed += 1


def run(cmd: list[str], timeout: float = 120) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as expired:
        return subprocess.CompletedProcess(cmd, 124, expired.stdout or "", f"timed out after {timeout} s")


class Soak:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.bin = args.bin
        self.work = tempfile.mkdtemp(prefix="soak-")
        self.root = os.path.join(self.work, "www")
        os.makedirs(self.root)
        with open(os.path.join(self.root, "1k"), "wb") as f:
            f.write(os.urandom(1024))
        self.bulk_size = 20 << 20
        with open(os.path.join(self.root, "bulk"), "wb") as f:
            f.write(os.urandom(self.bulk_size))
        self.tally = Tally()
        self.stop_at = 0.0

    def tool(self, name: str) -> str:
        return os.path.join(self.bin, name)

    def url(self, path: str) -> str:
        return f"https://127.0.0.1:{self.h3.port}/{path}"

    # -- workloads, each a loop until stop_at ---------------------------------------

    def h3load(self) -> None:
        while time.monotonic() < self.stop_at:
            result = run([self.tool("h3load"), "-k", "-c", "10", "-m", "10", "-D", "5", "--json", self.url("1k")], 60)
            try:
                report = json.loads(result.stdout.strip().splitlines()[-1])
                done = int(report["succeeded"])
            except (ValueError, IndexError, KeyError):
                done = 0
            self.tally.record("h3load", result.returncode == 0, result.stdout[-300:] + result.stderr[-300:], done)

    def aioquic(self) -> None:
        script = os.path.join(self.args.repo, "Tests/Interop/aioquic/h3_churn.py")
        while time.monotonic() < self.stop_at:
            result = run([self.args.python, script, "-k", self.url("1k"), "--connections", "40", "--parallel", "10"], 120)
            try:
                report = json.loads(result.stdout.strip().splitlines()[-1])
            except (ValueError, IndexError):
                report = {"ok": 0}
            self.tally.record("aioquic", result.returncode == 0, result.stdout[-300:] + result.stderr[-300:], report.get("ok", 0))

    def bulk(self) -> None:
        output = os.path.join(self.work, "bulk.out")
        count = 0
        while time.monotonic() < self.stop_at:
            count += 1
            cmd = [self.tool("h3get"), "-k", "--http3-only", "-s", "-o", output, self.url("bulk")]
            if count % 3 == 0:
                process = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                time.sleep(random.uniform(0.2, 1.0))
                if process.poll() is None:
                    process.kill()
                    self.tally.kill()
                process.wait()
                continue
            result = run(cmd, 120)
            size = os.path.getsize(output) if os.path.exists(output) else -1
            self.tally.record("bulk", result.returncode == 0 and size == self.bulk_size, f"exit {result.returncode}, {size} bytes: {result.stderr}", 1)

    def zero_rtt(self) -> None:
        sessions = os.path.join(self.work, "sessions")
        echo_sessions = os.path.join(self.work, "echo-sessions")
        while time.monotonic() < self.stop_at:
            result = run([self.tool("h3get"), "-k", "--http3-only", "-s", "--session-file", sessions, "--0rtt", "-o", "/dev/null", self.url("1k")], 60)
            self.tally.record("0-RTT (h3get)", result.returncode == 0, result.stderr, 1)
            result = run([self.tool("quic-echo"), "connect", "127.0.0.1", str(self.echo.port), "-k", "--data", "early",
                          "--session-file", echo_sessions, "--0rtt"], 60)
            self.tally.record("0-RTT (quic-echo)", result.returncode == 0, result.stderr)
            time.sleep(0.2)

    def echo_loop(self) -> None:
        count = 0
        while time.monotonic() < self.stop_at:
            count += 1
            cmd = [self.tool("quic-echo"), "connect", "127.0.0.1", str(self.echo.port), "-k", "--streams", "8", "--uni", "2", "--size", "65536"]
            kind = "echo"
            if count % 4 == 0:
                cmd.append("--migrate")
                kind = "echo, migrating"
            elif count % 5 == 0:
                cmd += ["--reset-code", "7"]
                kind = "echo, resets"
            result = run(cmd, 60)
            self.tally.record(kind, result.returncode == 0, result.stderr)

    # -- the run ------------------------------------------------------------------

    def sampler(self) -> None:
        while time.monotonic() < self.stop_at:
            for server in (self.h3, self.echo):
                server.sample()
            time.sleep(5)

    def growth(self, server: Server) -> tuple[float, float, float]:
        rss = [kib for _, kib, _, _ in server.samples]
        fifth = max(1, len(rss) // 5)
        early = statistics.median(rss[fifth:2 * fifth] or rss)
        late = statistics.median(rss[-fifth:])
        return early / 1024, late / 1024, 100 * (late - early) / early

    def run(self) -> int:
        self.h3 = Server("h3serve", [self.tool("h3serve"), "-q", "--no-tcp", "--workers", "2", "--early-data",
                                     "--port", "0", "--root", self.root], r"https://[^:]+:(\d+)/")
        self.echo = Server("quic-echo", [self.tool("quic-echo"), "serve", "--port", "0", "--workers", "2", "--early-data"],
                           r"listening on [^ ]+:(\d+)")
        # h3serve keeps a served file open for later requests (its open-file cache), so the
        # descriptor baseline is taken once each file has been served.
        for path in ("1k", "bulk"):
            run([self.tool("h3get"), "-k", "--http3-only", "-s", "-o", "/dev/null", self.url(path)], 60)
        time.sleep(1)
        for server in (self.h3, self.echo):
            server.baseline_fds = server.fds()
        started = time.monotonic()
        self.stop_at = started + self.args.seconds
        workloads = [self.h3load, self.aioquic, self.bulk, self.zero_rtt, self.echo_loop, self.sampler]
        threads = [threading.Thread(target=work, daemon=True) for work in workloads]
        try:
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            loaded = time.monotonic() - started
            # Every connection is now idle or gone: wait out the idle timeout and the closing period.
            time.sleep(IDLE_TIMEOUT + 5)
            fds = {server.name: (server.baseline_fds, server.fds()) for server in (self.h3, self.echo)}
            growth = {server.name: self.growth(server) for server in (self.h3, self.echo)}
            cpu = {server.name: server.cpu_seconds() for server in (self.h3, self.echo)}
        finally:
            remaining = {server.name: server.stop() for server in (self.h3, self.echo)}

        verdicts = []
        for name in ("h3serve", "quic-echo"):
            early, late, percent = growth[name]
            verdicts.append((f"{name} RSS {early:.1f} -> {late:.1f} MiB ({percent:+.1f}%)", percent <= 10))
            before, after = fds[name]
            verdicts.append((f"{name} fds {before} -> {after}", after <= before))
            verdicts.append((f"{name} connections in memory after the idle timeout: {remaining[name]}", remaining[name] == 0))
        failed = sum(len(v) for v in self.tally.failed.values())
        verdicts.append((f"failed transfers: {failed}", failed == 0))
        for text, ok in verdicts:
            print(f"soak: {'ok  ' if ok else 'FAIL'} {text}")
        for kind, details in self.tally.failed.items():
            print(f"soak: {kind}: {len(details)} failed; first: {details[0]!r}")
        passed = all(ok for _, ok in verdicts)
        kinds = ", ".join(f"{kind} {count}" for kind, count in sorted(self.tally.ok.items()))
        print(f"soak: {loaded / 60:.1f} min, {self.tally.requests:,} requests; runs ok: {kinds}; killed on purpose "
              f"{self.tally.killed}; server CPU h3serve {cpu['h3serve']:.0f} s, quic-echo {cpu['quic-echo']:.0f} s: "
              f"{'PASS' if passed else 'FAIL'}")
        if self.args.json:
            with open(self.args.json, "w") as f:
                json.dump({"minutes": loaded / 60, "requests": self.tally.requests, "ok": self.tally.ok,
                           "failed": self.tally.failed, "killed": self.tally.killed, "fds": fds,
                           "rss_mib": growth, "remaining": remaining, "pass": passed}, f, indent=1)
        return 0 if passed else 1


def main() -> int:
    parser = argparse.ArgumentParser(description="Soak h3serve and quic-echo under a mixed churn")
    parser.add_argument("--bin", required=True, help="directory of the release binaries")
    parser.add_argument("--python", required=True, help="python with aioquic 1.7.2")
    parser.add_argument("--repo", required=True)
    parser.add_argument("--seconds", type=float, default=600)
    parser.add_argument("--json", help="also write the figures to this file")
    return Soak(parser.parse_args()).run()


if __name__ == "__main__":
    sys.exit(main())
