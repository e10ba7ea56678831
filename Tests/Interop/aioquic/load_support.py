"""What the aioquic load clients (h3_requests.py, h3_churn.py) share.

One HTTP/3 connection opened and handshaken, the check that a response is a 200 with a body,
and the tally of attempts that each script prints as one JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import time
from typing import AsyncIterator, Awaitable

from aioquic.asyncio import connect
from aioquic.h3.connection import H3_ALPN
from aioquic.quic.configuration import QuicConfiguration

from client_trust import apply_verification
from h3_client import H3ClientProtocol, Response

H3_NO_ERROR = 0x100


@contextlib.asynccontextmanager
async def h3_connection(args: argparse.Namespace, host: str, port: int,
                        handshake_timeout: float | None = None) -> AsyncIterator[H3ClientProtocol]:
    """A connection to host:port, verified as args say (client_trust), once its handshake is done."""
    configuration = QuicConfiguration(is_client=True, alpn_protocols=H3_ALPN, server_name=host)
    apply_verification(configuration, args)
    async with connect(host, port, configuration=configuration, create_protocol=H3ClientProtocol,
                       wait_connected=False) as proto:
        proto.transmit()
        await asyncio.wait_for(proto.wait_handshake(), handshake_timeout)
        yield proto


def require_body(response: Response) -> None:
    """A load only counts a 200 that carried a body."""
    if response.status != 200 or response.length == 0:
        raise RuntimeError(f"status {response.status}, {response.length} bytes")


class Tally:
    """How a run went: attempts that succeeded, the failures (the first five are reported), time."""

    def __init__(self) -> None:
        self.ok = 0
        self.errors: list[str] = []
        self.started = time.monotonic()

    async def attempt(self, operation: Awaitable[None]) -> None:
        try:
            await operation
            self.ok += 1
        except Exception as exc:  # count it and go on: the figure needs every attempt's fate
            self.errors.append(f"{type(exc).__name__}: {exc}")

    def summary(self, unit: str, total: int) -> dict:
        return {unit: total, "ok": self.ok, "failed": len(self.errors),
                "seconds": round(time.monotonic() - self.started, 3), "errors": self.errors[:5]}


def report(summary: dict) -> int:
    """Prints the summary line; the exit status is 0 only when nothing failed."""
    print(json.dumps(summary), flush=True)
    return 0 if summary["failed"] == 0 else 1
