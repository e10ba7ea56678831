#!/usr/bin/env python3
"""Connection churn with aioquic 1.7.2 (an independent load for server benchmarks).

Opens --connections short HTTP/3 connections to one URL, --parallel at a time. Each one does a
full handshake (no resumption), one GET, and closes with H3_NO_ERROR. Prints one JSON line:

    {"connections": 300, "ok": 300, "failed": 0, "seconds": 4.1, "errors": []}

With --hold S, all connections open at once and stay open, idle, once each has its response:
the line `HOLDING <n>` is printed when all are there, and they close S seconds later (for
measuring a server's memory per idle connection).

Usage:
    h3_churn.py URL [--connections N] [--parallel P] [--hold S] [--cacert PEM | -k] [--timeout S]

Exit status: 0 when every connection got a 200 with a body, 1 otherwise.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Awaitable

from client_trust import add_verification_arguments
from h3_client import parse_urls
from load_support import H3_NO_ERROR, Tally, h3_connection, report, require_body


class Hold:
    """Connections that have their response and wait, idle, for `release`."""

    def __init__(self) -> None:
        self.arrived = 0
        self.release = asyncio.Event()


async def one_connection(args: argparse.Namespace, host: str, port: int, authority: str, path: str,
                         hold: Hold | None = None) -> None:
    async with h3_connection(args, host, port) as proto:
        response = proto.request(args.url, authority, path, None)
        await response.done
        require_body(response)
        if hold is not None:
            hold.arrived += 1
            await hold.release.wait()
        proto.close(error_code=H3_NO_ERROR)


async def run(args: argparse.Namespace) -> dict:
    host, port, authority, paths = parse_urls([args.url])
    tally = Tally()
    if args.hold > 0:
        hold = Hold()

        def held_connection() -> Awaitable[None]:
            return asyncio.wait_for(one_connection(args, host, port, authority, paths[0], hold), args.timeout + args.hold)

        tasks = [asyncio.ensure_future(tally.attempt(held_connection())) for _ in range(args.connections)]
        # Every connection has its response (held at the event) or has failed.
        while hold.arrived + len(tally.errors) < args.connections:
            await asyncio.sleep(0.05)
        print(f"HOLDING {hold.arrived}", flush=True)
        await asyncio.sleep(args.hold)
        hold.release.set()
        await asyncio.gather(*tasks)
        return tally.summary("connections", args.connections)

    remaining = args.connections

    async def worker() -> None:
        nonlocal remaining
        while remaining > 0:
            remaining -= 1
            await tally.attempt(asyncio.wait_for(one_connection(args, host, port, authority, paths[0]), args.timeout))

    await asyncio.gather(*(worker() for _ in range(max(1, args.parallel))))
    return tally.summary("connections", args.connections)


def main() -> int:
    p = argparse.ArgumentParser(description="HTTP/3 connection churn (aioquic)")
    p.add_argument("url", metavar="URL")
    p.add_argument("--connections", type=int, default=300)
    p.add_argument("--parallel", type=int, default=8)
    p.add_argument("--hold", type=float, default=0, help="open all at once, keep them idle this long")
    add_verification_arguments(p)
    p.add_argument("--timeout", type=float, default=10.0, help="per connection, seconds")
    return report(asyncio.run(run(p.parse_args())))


if __name__ == "__main__":
    sys.exit(main())
