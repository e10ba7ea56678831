#!/usr/bin/env python3
"""Many requests on one connection with aioquic 1.7.2 (an independent load for server benchmarks).

Opens one HTTP/3 connection, then sends --requests GETs of one URL on it, keeping --in-flight
of them outstanding, and closes with H3_NO_ERROR. Prints one JSON line:

    {"requests": 2000, "ok": 2000, "failed": 0, "seconds": 3.2, "errors": []}

Usage:
    h3_requests.py URL [--requests N] [--in-flight M] [--cacert PEM | -k] [--timeout S]

Exit status: 0 when every request got a 200 with a body, 1 otherwise.
"""

from __future__ import annotations

import argparse
import asyncio
import sys

from client_trust import add_verification_arguments
from h3_client import parse_urls
from load_support import H3_NO_ERROR, Tally, h3_connection, report, require_body


async def run(args: argparse.Namespace) -> dict:
    host, port, authority, paths = parse_urls([args.url])
    remaining = args.requests
    tally = Tally()
    async with h3_connection(args, host, port, handshake_timeout=args.timeout) as proto:

        async def one_request() -> None:
            response = proto.request(args.url, authority, paths[0], None)
            await asyncio.wait_for(response.done, args.timeout)
            require_body(response)

        async def worker() -> None:
            nonlocal remaining
            while remaining > 0:
                remaining -= 1
                await tally.attempt(one_request())

        await asyncio.gather(*(worker() for _ in range(max(1, args.in_flight))))
        proto.close(error_code=H3_NO_ERROR)
    return tally.summary("requests", args.requests)


def main() -> int:
    p = argparse.ArgumentParser(description="HTTP/3 requests on one connection (aioquic)")
    p.add_argument("url", metavar="URL")
    p.add_argument("--requests", type=int, default=2000)
    p.add_argument("--in-flight", type=int, default=50)
    add_verification_arguments(p)
    p.add_argument("--timeout", type=float, default=30.0, help="per request, seconds")
    return report(asyncio.run(run(p.parse_args())))


if __name__ == "__main__":
    sys.exit(main())
