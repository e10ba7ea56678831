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
import json
import sys
import time

from aioquic.asyncio import connect
from aioquic.h3.connection import H3_ALPN
from aioquic.quic.configuration import QuicConfiguration

from client_trust import add_verification_arguments, apply_verification
from h3_client import H3ClientProtocol, parse_urls

H3_NO_ERROR = 0x100


async def run(args: argparse.Namespace) -> dict:
    host, port, authority, paths = parse_urls([args.url])
    configuration = QuicConfiguration(is_client=True, alpn_protocols=H3_ALPN, server_name=host)
    apply_verification(configuration, args)
    remaining = args.requests
    ok, errors = 0, []
    started = time.monotonic()
    async with connect(host, port, configuration=configuration, create_protocol=H3ClientProtocol,
                       wait_connected=False) as proto:
        proto.transmit()
        await asyncio.wait_for(proto.wait_handshake(), args.timeout)

        async def one_request() -> None:
            response = proto.request(args.url, authority, paths[0], None)
            await asyncio.wait_for(response.done, args.timeout)
            if response.status != 200 or response.length == 0:
                raise RuntimeError(f"status {response.status}, {response.length} bytes")

        async def worker() -> None:
            nonlocal remaining, ok
            while remaining > 0:
                remaining -= 1
                try:
                    await one_request()
                    ok += 1
                except Exception as exc:  # count it and go on: the figure needs every request's fate
                    errors.append(f"{type(exc).__name__}: {exc}")

        await asyncio.gather(*(worker() for _ in range(max(1, args.in_flight))))
        proto.close(error_code=H3_NO_ERROR)
    return {"requests": args.requests, "ok": ok, "failed": len(errors),
            "seconds": round(time.monotonic() - started, 3), "errors": errors[:5]}


def main() -> int:
    p = argparse.ArgumentParser(description="HTTP/3 requests on one connection (aioquic)")
    p.add_argument("url", metavar="URL")
    p.add_argument("--requests", type=int, default=2000)
    p.add_argument("--in-flight", type=int, default=50)
    add_verification_arguments(p)
    p.add_argument("--timeout", type=float, default=30.0, help="per request, seconds")
    args = p.parse_args()
    summary = asyncio.run(run(args))
    print(json.dumps(summary), flush=True)
    return 0 if summary["failed"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
