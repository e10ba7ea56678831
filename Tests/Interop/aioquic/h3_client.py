#!/usr/bin/env python3
"""Small HTTP/3 client built on aioquic 1.7.2's H3Connection (interop peer).

Fetches every URL concurrently on ONE QUIC connection (so all URLs must share the
same https://host:port authority) and prints one JSON line per URL, in the order
given:

    {"url": "https://127.0.0.1:4433/bytes/10", "status": 200, "length": 10, "sha256": "..."}
    {"url": "https://127.0.0.1:4433/nope", "error": "stream reset by server: ..."}

Usage:
    h3_client.py URL... [--cacert PEM | -k] [--data-file FILE] [--timeout S]
        [--qlog-dir D] [-v]

The server certificate is verified by default: against --cacert, otherwise against
the system store (/etc/ssl/certs/ca-certificates.crt). -k turns verification off.
--data-file sends a POST with the file's content as body instead of a GET.

Exit status: 0 every request got a response (any status), 1 some request failed
(stream reset, connection closed mid-way, timeout), 2 the connection could not be
established (handshake failure, no answer, bad URL); the reason goes to stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import logging
import pickle
import os
import socket
import sys
from urllib.parse import urlsplit

from aioquic.asyncio import QuicConnectionProtocol, connect
from aioquic.h3.connection import H3_ALPN, H3Connection
from aioquic.h3.events import DataReceived, H3Event, HeadersReceived
from aioquic.quic.configuration import QuicConfiguration
from aioquic.tls import CipherSuite
from aioquic.quic.events import (
    ConnectionTerminated,
    HandshakeCompleted,
    ProtocolNegotiated,
    QuicEvent,
    StreamReset,
)
from aioquic.quic.logger import QuicFileLogger

from client_trust import apply_verification

log = logging.getLogger("h3_client")

# Larger than aioquic's 1 MB defaults so big downloads are not throttled.
FLOW_CONTROL_WINDOW = 16 * 1024 * 1024
USER_AGENT = b"aioquic-h3_client"

# Names for the error codes most likely to show up (RFC 9000 / RFC 9114).
ERROR_NAMES = {
    0x0: "NO_ERROR", 0x1: "INTERNAL_ERROR", 0x2: "CONNECTION_REFUSED",
    0x3: "FLOW_CONTROL_ERROR", 0x4: "STREAM_LIMIT_ERROR", 0x5: "STREAM_STATE_ERROR",
    0x6: "FINAL_SIZE_ERROR", 0x7: "FRAME_ENCODING_ERROR", 0x8: "TRANSPORT_PARAMETER_ERROR",
    0xA: "PROTOCOL_VIOLATION",
    0x100: "H3_NO_ERROR", 0x101: "H3_GENERAL_PROTOCOL_ERROR", 0x102: "H3_INTERNAL_ERROR",
    0x103: "H3_STREAM_CREATION_ERROR", 0x104: "H3_CLOSED_CRITICAL_STREAM",
    0x105: "H3_FRAME_UNEXPECTED", 0x106: "H3_FRAME_ERROR", 0x107: "H3_EXCESSIVE_LOAD",
    0x108: "H3_ID_ERROR", 0x109: "H3_SETTINGS_ERROR", 0x10A: "H3_MISSING_SETTINGS",
    0x10B: "H3_REQUEST_REJECTED", 0x10C: "H3_REQUEST_CANCELLED",
    0x10D: "H3_REQUEST_INCOMPLETE", 0x10E: "H3_MESSAGE_ERROR",
}


class ConnectionFailed(Exception):
    """The connection could not be established (exit status 2)."""


def describe_code(code: int, transport: bool = False) -> str:
    """`0x105 H3_FRAME_UNEXPECTED`; transport codes 0x100-0x1ff are TLS alerts."""
    text = f"0x{code:x}"
    if transport and 0x100 <= code <= 0x1FF:
        text += f" (TLS alert {code - 0x100})"
    elif (code >= 0x100) != transport and code in ERROR_NAMES:
        text += f" {ERROR_NAMES[code]}"
    return text


def describe_close(event: ConnectionTerminated) -> str:
    # aioquic sets frame_type only for transport CONNECTION_CLOSE (type 0x1c);
    # for an application close (0x1d) the code is an HTTP/3 one.
    transport = event.frame_type is not None
    text = f"{'transport' if transport else 'application'} "
    text += f"error_code={describe_code(event.error_code, transport)}"
    if event.reason_phrase:
        text += f" reason={event.reason_phrase!r}"
    return text


class Response:
    """The response to one request, hashed as it arrives (the body is not kept)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.status: int | None = None
        self.length = 0
        self.sha256 = hashlib.sha256()
        self.done: asyncio.Future = asyncio.get_running_loop().create_future()

    def fail(self, reason: str) -> None:
        if not self.done.done():
            self.done.set_exception(RuntimeError(reason))

    def result(self) -> dict:
        return {
            "url": self.url,
            "status": self.status,
            "length": self.length,
            "sha256": self.sha256.hexdigest(),
        }


class H3ClientProtocol(QuicConnectionProtocol):
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._http: H3Connection | None = None
        self._responses: dict[int, Response] = {}
        self.handshake_done = asyncio.Event()
        self.terminated: ConnectionTerminated | None = None
        self.terminated_event = asyncio.Event()

    # -- QUIC / HTTP/3 events ----------------------------------------------------------

    def quic_event_received(self, event: QuicEvent) -> None:
        # Not calling super(): its StreamReader plumbing is not used here.
        if isinstance(event, ProtocolNegotiated):
            if event.alpn_protocol in H3_ALPN:
                # Opens our control + QPACK streams and queues SETTINGS.
                if self._http is None:
                    self._http = H3Connection(self._quic)
        elif isinstance(event, HandshakeCompleted):
            self.handshake_done.set()
        elif isinstance(event, StreamReset):
            response = self._responses.pop(event.stream_id, None)
            if response is not None:
                response.fail(
                    f"stream reset by server: error_code={describe_code(event.error_code)}"
                )
        elif isinstance(event, ConnectionTerminated):
            self.terminated = event
            self.terminated_event.set()
            for response in self._responses.values():
                response.fail("connection closed: " + describe_close(event))
            self._responses.clear()

        if self._http is not None:
            for http_event in self._http.handle_event(event):
                self._http_event_received(http_event)

    def _http_event_received(self, event: H3Event) -> None:
        response = self._responses.get(event.stream_id)
        if response is None:
            return  # push streams or a request we already gave up on
        if isinstance(event, HeadersReceived):
            headers = dict(event.headers)
            status = int(headers.get(b":status", b"0"))
            if response.status is None and status >= 200:  # skip 1xx interim responses
                response.status = status
        elif isinstance(event, DataReceived):
            response.length += len(event.data)
            response.sha256.update(event.data)
        if event.stream_ended:
            del self._responses[event.stream_id]
            if response.status is None:
                response.fail("stream ended without a final response")
            elif not response.done.done():
                response.done.set_result(None)

    # -- used by run() ---------------------------------------------------------------

    async def wait_handshake(self) -> None:
        """Wait for HandshakeCompleted; raise ConnectionFailed if the connection closes.

        aioquic's own wait_connected() raises a bare ConnectionError without the reason.
        """
        done = asyncio.ensure_future(self.handshake_done.wait())
        closed = asyncio.ensure_future(self.terminated_event.wait())
        try:
            await asyncio.wait({done, closed}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            done.cancel()
            closed.cancel()
        if self.terminated is not None:
            raise ConnectionFailed("handshake failed: " + describe_close(self.terminated))
        if self._http is None:
            raise ConnectionFailed(
                f"server did not negotiate ALPN h3 (got {self._quic.tls.alpn_negotiated!r})"
            )

    def request(self, url: str, authority: str, path: str, body: bytes | None) -> Response:
        """Send one request on a new stream; returns the Response to await."""
        if self._http is None:
            # 0-RTT: HTTP/3 starts with the first flight, before the handshake completes.
            self._http = H3Connection(self._quic)
        stream_id = self._quic.get_next_available_stream_id()
        headers = [
            (b":method", b"GET" if body is None else b"POST"),
            (b":scheme", b"https"),
            (b":authority", authority.encode()),
            (b":path", path.encode()),
            (b"user-agent", USER_AGENT),
        ]
        if body is not None:
            headers.append((b"content-length", str(len(body)).encode()))
        response = Response(url)
        self._responses[stream_id] = response
        self._http.send_headers(stream_id, headers, end_stream=not body)
        if body:
            self._http.send_data(stream_id, body, end_stream=True)
        self.transmit()
        return response


def parse_urls(urls: list[str]) -> tuple[str, int, str, list[str]]:
    """Check that all URLs share one https authority; return host, port, authority, paths."""
    authority = None
    paths = []
    for url in urls:
        parts = urlsplit(url)
        if parts.scheme != "https" or not parts.hostname:
            raise ConnectionFailed(f"not an https:// URL: {url}")
        if authority is None:
            authority, host, port = parts.netloc, parts.hostname, parts.port or 443
        elif parts.netloc != authority:
            raise ConnectionFailed(f"all URLs must share one authority: {url} is not on {authority}")
        paths.append((parts.path or "/") + (f"?{parts.query}" if parts.query else ""))
    return host, port, authority, paths


async def migrate(proto: QuicConnectionProtocol) -> None:
    """Moves the connection to a new UDP socket (a new local port) under a fresh connection ID,
    as a client whose network changed (RFC 9000 §9). aioquic tracks no local address, so it
    does not validate the new path itself; the server does, with PATH_CHALLENGE."""
    sock = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
    sock.bind(("::", 0, 0, 0))
    # The protocol now sends from the new socket; the old one still delivers what is in flight.
    await asyncio.get_running_loop().create_datagram_endpoint(lambda: proto, sock=sock)
    proto._quic.change_connection_id()
    proto.transmit()
    log.info("migrated to local port %d", sock.getsockname()[1])


async def run(args: argparse.Namespace, responses: list[Response | None]) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + args.timeout
    host, port, authority, paths = parse_urls(args.urls)
    body = None
    if args.data_file:
        with open(args.data_file, "rb") as f:
            body = f.read()

    configuration = QuicConfiguration(
        is_client=True,
        alpn_protocols=H3_ALPN,
        server_name=host,
        max_data=FLOW_CONTROL_WINDOW,
        max_stream_data=FLOW_CONTROL_WINDOW,
    )
    apply_verification(configuration, args)
    if args.qlog_dir:
        os.makedirs(args.qlog_dir, exist_ok=True)
        configuration.quic_logger = QuicFileLogger(args.qlog_dir)
    if args.cipher == "chacha20":
        configuration.cipher_suites = [CipherSuite.CHACHA20_POLY1305_SHA256]
    if args.session_ticket and os.path.exists(args.session_ticket):
        with open(args.session_ticket, "rb") as f:
            configuration.session_ticket = pickle.load(f)

    def save_ticket(ticket) -> None:
        if args.session_ticket:
            with open(args.session_ticket, "wb") as f:
                pickle.dump(ticket, f)

    # wait_connected=False: we send the first flight and wait for the handshake
    # ourselves, to report why a handshake failed.
    async with connect(
        host,
        port,
        configuration=configuration,
        create_protocol=H3ClientProtocol,
        session_ticket_handler=save_ticket,
        wait_connected=False,
    ) as proto:
        assert isinstance(proto, H3ClientProtocol)
        early = args.zero_rtt and configuration.session_ticket is not None
        if early:
            # 0-RTT: the requests go out with the first flight (RFC 9114 §4.1, RFC 9001 §4.6).
            for i, (url, path) in enumerate(zip(args.urls, paths)):
                responses[i] = proto.request(url, authority, path, body)
        proto.transmit()
        try:
            await asyncio.wait_for(proto.wait_handshake(), deadline - loop.time())
        except asyncio.TimeoutError:
            raise ConnectionFailed(f"timed out after {args.timeout}s: no handshake")
        log.info("connected to %s:%d", host, port)
        if args.key_update:
            proto._quic.request_key_update()
            proto.transmit()

        if not early:
            for i, (url, path) in enumerate(zip(args.urls, paths)):
                responses[i] = proto.request(url, authority, path, body)
        if args.migrate:
            await asyncio.sleep(args.migrate)
            await migrate(proto)
        # Failures are recorded per request, so wait for all of them; mark the
        # unfinished ones before leaving `async with` closes the connection.
        _, pending = await asyncio.wait(
            [r.done for r in responses], timeout=max(0.0, deadline - loop.time())
        )
        for response in responses:
            if response.done in pending:
                response.fail(f"timed out after {args.timeout}s")


def main() -> int:
    p = argparse.ArgumentParser(description="HTTP/3 client (aioquic H3Connection)")
    p.add_argument("urls", nargs="+", metavar="URL", help="https:// URLs, one authority")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--cacert", help="CA (or self-signed) certificate PEM to trust")
    g.add_argument("-k", "--insecure", action="store_true", help="skip certificate verification")
    p.add_argument("--data-file", help="POST this file's content instead of GET")
    p.add_argument("--timeout", type=float, default=30.0, help="overall timeout, seconds")
    p.add_argument("--qlog-dir", help="write the connection's .qlog file here")
    p.add_argument("--session-ticket", help="load a session ticket from FILE and save new ones to it")
    p.add_argument("--zero-rtt", action="store_true", help="with a ticket, send the requests in 0-RTT")
    p.add_argument("--key-update", action="store_true", help="update keys once connected")
    p.add_argument("--cipher", choices=["chacha20"], help="offer only ChaCha20-Poly1305")
    p.add_argument("--migrate", type=float, metavar="SECONDS",
                   help="this long after sending the requests, move to a new local port and connection ID")
    p.add_argument("-v", "--verbose", action="store_true")
    args = p.parse_args()

    logging.basicConfig(
        stream=sys.stderr,
        level=logging.DEBUG if args.verbose else logging.WARNING,
        format="%(asctime)s %(name)s %(levelname)s %(message)s",
    )

    responses: list[Response | None] = [None] * len(args.urls)
    fatal = None  # why the connection could not be established
    try:
        asyncio.run(run(args, responses))
    except ConnectionFailed as exc:
        fatal = str(exc)
    except OSError as exc:  # name resolution, unreachable network, unreadable file
        fatal = f"connection error: {exc}"

    if fatal is not None:
        print(f"h3_client: {fatal}", file=sys.stderr)

    status = 0
    for url, response in zip(args.urls, responses):
        if response is None:
            line = {"url": url, "error": fatal or "request not sent"}
        elif not response.done.done():
            line = {"url": url, "error": fatal or "no response"}
        elif response.done.exception() is not None:
            line = {"url": url, "error": str(response.done.exception())}
        else:
            line = response.result()
        if "error" in line:
            status = 1
        print(json.dumps(line), flush=True)

    return 2 if fatal is not None else status


if __name__ == "__main__":
    sys.exit(main())
