#!/usr/bin/env python3
"""Small HTTP/3 server built on aioquic 1.7.2's H3Connection (interop peer).

Routes (ALPN ``h3``):

* ``GET /bytes/N``  -> 200, N bytes of a deterministic pattern: byte i is
  ``(i * 31 + 7) & 0xff``, so a client can check the body without a file.
* ``POST /echo``    -> 200, the request body echoed back.
* ``GET /<path>``   -> the file ``<root>/<path>`` (404 if missing or not a regular
  file, 403 for paths that leave the root).

Every 200 response carries ``content-length`` and
``content-type: application/octet-stream``. Other methods get 405.

``--misbehave data-before-headers``: every request is answered, instead, with a raw
HTTP/3 DATA frame (type 0x00, length, payload ``oops``) written straight onto the
request stream *before* any HEADERS frame, followed by FIN. The control stream and
SETTINGS still go out normally. A correct client treats this as H3_FRAME_UNEXPECTED
(0x105, RFC 9114 section 4.1).

``--reject-requests N``: the first N requests this process receives (over all its
connections) are refused unprocessed: their stream is reset and read-stopped with
H3_REQUEST_REJECTED (0x10b, RFC 9114 section 4.1.1), and each is logged as
``REJECTED <path>`` on stdout. Later requests are served as usual.

Usage:
    h3_server.py --host 127.0.0.1 --port 0 --cert cert.pem --key key.pem \
        [--root DIR] [--misbehave data-before-headers] [--reject-requests N]
        [--qlog-dir DIR] [-v]

Prints ``LISTENING <port>`` on stdout once the UDP socket is bound, then serves until
SIGTERM/SIGINT. Everything else is logged to stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import logging
import os
import signal
import sys
from urllib.parse import unquote, urlsplit

from aioquic.asyncio import QuicConnectionProtocol, serve
from aioquic.buffer import encode_uint_var
from aioquic.h3.connection import H3_ALPN, H3Connection
from aioquic.h3.events import DataReceived, H3Event, HeadersReceived
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.events import (
    ConnectionTerminated,
    ProtocolNegotiated,
    QuicEvent,
    StopSendingReceived,
    StreamReset,
)
from aioquic.quic.logger import QuicFileLogger

log = logging.getLogger("h3_server")

# Response bodies are written in chunks of this size ...
CHUNK_SIZE = 256 * 1024
# ... and a writer pauses while more than this many bytes of its stream are still
# queued in aioquic but not yet sent (waiting for flow control / congestion window).
MAX_UNSENT = 1024 * 1024
# Larger than aioquic's 1 MB defaults so one connection can move 50 MB quickly.
FLOW_CONTROL_WINDOW = 16 * 1024 * 1024
# Largest request body accepted for POST /echo.
MAX_REQUEST_BODY = 64 * 1024 * 1024

# /bytes/N pattern: byte i = (i * 31 + 7) & 0xff, which repeats every 256 bytes.
PATTERN = bytes((i * 31 + 7) & 0xFF for i in range(256))
PATTERN_BLOCK = PATTERN * (CHUNK_SIZE // 256 + 1)  # one chunk plus a period of slack

FRAME_TYPE_DATA = 0x00


def pattern_chunk(offset: int, size: int) -> bytes:
    """`size` bytes of the /bytes/N pattern starting at body offset `offset`."""
    start = offset % 256
    return PATTERN_BLOCK[start : start + size]


class Request:
    """A request whose headers have arrived and whose body is being collected."""

    def __init__(self, stream_id: int, headers: dict[bytes, bytes]) -> None:
        self.stream_id = stream_id
        self.method = headers.get(b":method", b"").decode(errors="replace")
        self.path = headers.get(b":path", b"").decode(errors="replace")
        self.body = bytearray()
        self.too_large = False


class Rejections:
    """How many more requests the process refuses (``--reject-requests``), over all connections."""

    def __init__(self, count: int) -> None:
        self.left = count


class H3ServerProtocol(QuicConnectionProtocol):
    """One instance per QUIC connection."""

    def __init__(self, *args, root: str | None, misbehave: str | None, rejections: Rejections, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.root = root
        self.misbehave = misbehave
        self.rejections = rejections
        self._http: H3Connection | None = None
        self._requests: dict[int, Request] = {}
        # Response writers still running, by stream id.
        self._writers: dict[int, asyncio.Task] = {}
        # Set whenever a datagram arrives: ACKs and MAX_DATA/MAX_STREAM_DATA may
        # have made room, so paused writers re-check their stream.
        self._progress = asyncio.Event()
        self._peer = "?"

    # -- QUIC plumbing -------------------------------------------------------------

    def datagram_received(self, data, addr) -> None:
        super().datagram_received(data, addr)
        self._progress.set()

    def quic_event_received(self, event: QuicEvent) -> None:
        # Not calling super(): its StreamReader plumbing is not used here.
        if isinstance(event, ProtocolNegotiated):
            addr = self._quic._network_paths[0].addr if self._quic._network_paths else "?"
            self._peer = f"{addr[0]}:{addr[1]}" if isinstance(addr, tuple) else str(addr)
            if event.alpn_protocol in H3_ALPN:
                # Creating the H3Connection opens the control and QPACK streams and
                # queues our SETTINGS frame.
                self._http = H3Connection(self._quic)
                log.info("%s: connected, alpn=%s", self._peer, event.alpn_protocol)
        elif isinstance(event, StopSendingReceived):
            # The client does not want the response any more (aioquic has already
            # reset our sending side): stop writing it.
            self._cancel(event.stream_id, f"STOP_SENDING code=0x{event.error_code:x}")
        elif isinstance(event, StreamReset):
            # The client aborted its request body. If the request was still incomplete,
            # nothing will answer it: reset our side too (H3_REQUEST_INCOMPLETE).
            # (H3Connection does this itself when not even the headers had arrived.)
            if self._requests.pop(event.stream_id, None) is not None:
                log.info("%s: stream %d: request reset by client", self._peer, event.stream_id)
                self._quic.reset_stream(event.stream_id, 0x10D)
        elif isinstance(event, ConnectionTerminated):
            log.info(
                "%s: connection terminated: error_code=0x%x reason=%r",
                self._peer, event.error_code, event.reason_phrase,
            )
            for stream_id in list(self._writers):
                self._cancel(stream_id, "connection terminated")
            self._progress.set()

        if self._http is not None:
            for http_event in self._http.handle_event(event):
                self._http_event_received(http_event)

    def _cancel(self, stream_id: int, why: str) -> None:
        task = self._writers.pop(stream_id, None)
        if task is not None:
            log.info("%s: stream %d: response aborted (%s)", self._peer, stream_id, why)
            task.cancel()

    # -- HTTP/3 ----------------------------------------------------------------------

    def _http_event_received(self, event: H3Event) -> None:
        if isinstance(event, HeadersReceived):
            if event.stream_id in self._requests:
                return  # trailers: nothing to do with them
            request = Request(event.stream_id, dict(event.headers))
            log.info("%s: stream %d: %s %s", self._peer, event.stream_id, request.method, request.path)
            if self.misbehave == "data-before-headers":
                self._send_data_before_headers(event.stream_id)
                return
            if self.rejections.left > 0:
                self.rejections.left -= 1
                self._reject(event.stream_id, request.path)
                return
            self._requests[event.stream_id] = request
            if event.stream_ended:
                self._dispatch(request)
        elif isinstance(event, DataReceived):
            request = self._requests.get(event.stream_id)
            if request is None:
                return  # request already answered (or misbehaving mode): drop the body
            if len(request.body) + len(event.data) > MAX_REQUEST_BODY:
                request.too_large = True
            elif not request.too_large:
                request.body += event.data
            if event.stream_ended:
                self._dispatch(request)

    def _reject(self, stream_id: int, path: str) -> None:
        """Refuses a request unprocessed: H3_REQUEST_REJECTED both ways (RFC 9114 §4.1.1)."""
        # Printed before the reset leaves, so the line is written before the client can react.
        print(f"REJECTED {path}", flush=True)
        self._quic.reset_stream(stream_id, 0x10B)
        self._quic.stop_stream(stream_id, 0x10B)
        self.transmit()
        log.info("%s: stream %d: rejected with H3_REQUEST_REJECTED", self._peer, stream_id)

    def _send_data_before_headers(self, stream_id: int) -> None:
        """Protocol violation on purpose: DATA frame with no HEADERS before it, then FIN.

        H3Connection would refuse to do this, so the frame is written directly to the
        QUIC stream.
        """
        payload = b"oops"
        frame = encode_uint_var(FRAME_TYPE_DATA) + encode_uint_var(len(payload)) + payload
        self._quic.send_stream_data(stream_id, frame, end_stream=True)
        self.transmit()
        log.info("%s: stream %d: sent DATA before HEADERS (misbehaving)", self._peer, stream_id)

    def _dispatch(self, request: Request) -> None:
        """The whole request has arrived: pick the response and start writing it."""
        del self._requests[request.stream_id]
        path = unquote(urlsplit(request.path).path)

        if path == "/echo":
            if request.method != "POST":
                return self._respond_simple(request, 405, b"use POST for /echo\n")
            if request.too_large:
                return self._respond_simple(request, 413, b"request body too large\n")
            body = bytes(request.body)
            return self._respond(request, 200, len(body), self._bytes_body(body))

        if request.method != "GET":
            return self._respond_simple(request, 405, b"method not allowed\n")

        if path.startswith("/bytes/"):
            try:
                size = int(path[len("/bytes/"):])
                if size < 0:
                    raise ValueError
            except ValueError:
                return self._respond_simple(request, 400, b"bad size\n")
            return self._respond(request, 200, size, self._pattern_body(size))

        if self.root is None:
            return self._respond_simple(request, 404, b"not found (no --root)\n")
        root = os.path.realpath(self.root)
        target = os.path.realpath(os.path.join(root, path.lstrip("/")))
        if os.path.commonpath([root, target]) != root:
            return self._respond_simple(request, 403, b"path outside the root\n")
        if not os.path.isfile(target):
            return self._respond_simple(request, 404, b"not found\n")
        size = os.path.getsize(target)
        return self._respond(request, 200, size, self._file_body(target))

    def _respond_simple(self, request: Request, status: int, text: bytes) -> None:
        log.info("%s: stream %d: %d", self._peer, request.stream_id, status)
        headers = [
            (b":status", str(status).encode()),
            (b"content-type", b"text/plain"),
            (b"content-length", str(len(text)).encode()),
        ]
        self._http.send_headers(request.stream_id, headers)
        self._http.send_data(request.stream_id, text, end_stream=True)
        self.transmit()

    def _respond(self, request: Request, status: int, length: int, body) -> None:
        """Send the headers now; a task streams `body` (an async iterator of chunks)."""
        headers = [
            (b":status", str(status).encode()),
            (b"content-type", b"application/octet-stream"),
            (b"content-length", str(length).encode()),
        ]
        self._http.send_headers(request.stream_id, headers, end_stream=(length == 0))
        self.transmit()
        if length == 0:
            return
        task = asyncio.ensure_future(self._write_body(request.stream_id, length, body))
        self._writers[request.stream_id] = task

    # -- response bodies -------------------------------------------------------------

    async def _bytes_body(self, data: bytes):
        for offset in range(0, len(data), CHUNK_SIZE):
            yield data[offset : offset + CHUNK_SIZE]

    async def _pattern_body(self, size: int):
        for offset in range(0, size, CHUNK_SIZE):
            yield pattern_chunk(offset, min(CHUNK_SIZE, size - offset))

    async def _file_body(self, path: str):
        with open(path, "rb") as f:
            while chunk := f.read(CHUNK_SIZE):
                yield chunk

    def _unsent(self, stream_id: int) -> int:
        """Bytes queued on the stream that aioquic has not put into a packet yet."""
        stream = self._quic._streams.get(stream_id)
        if stream is None:
            return 0
        return stream.sender._buffer_stop - stream.sender.highest_offset

    async def _write_body(self, stream_id: int, length: int, body) -> None:
        """Write `body` as DATA frames, pausing while aioquic's queue is full.

        Small chunks plus the pause keep one 50 MB response from being copied into
        aioquic in one go and let many responses share the connection fairly.
        """
        sent = 0
        try:
            async for chunk in body:
                while self._unsent(stream_id) > MAX_UNSENT:
                    self._progress.clear()
                    await self._progress.wait()
                sent += len(chunk)
                self._http.send_data(stream_id, chunk, end_stream=(sent >= length))
                self.transmit()
                await asyncio.sleep(0)  # let other streams / incoming packets run
            if sent != length:  # e.g. the file shrank while being served
                log.warning("%s: stream %d: body was %d bytes, not %d", self._peer, stream_id, sent, length)
                self._quic.reset_stream(stream_id, 0x102)  # H3_INTERNAL_ERROR
                self.transmit()
            else:
                log.info("%s: stream %d: 200, %d bytes sent", self._peer, stream_id, length)
        except asyncio.CancelledError:
            pass
        except Exception:  # stream reset underneath us, connection closed, ...
            log.exception("%s: stream %d: writing the response failed", self._peer, stream_id)
        finally:
            self._writers.pop(stream_id, None)


async def main(args: argparse.Namespace) -> None:
    configuration = QuicConfiguration(
        is_client=False,
        alpn_protocols=H3_ALPN,
        max_data=FLOW_CONTROL_WINDOW,
        max_stream_data=FLOW_CONTROL_WINDOW,
    )
    configuration.load_cert_chain(args.cert, args.key)
    if args.qlog_dir:
        os.makedirs(args.qlog_dir, exist_ok=True)
        configuration.quic_logger = QuicFileLogger(args.qlog_dir)

    # Session tickets for resumption (RFC 8446 §2.2), kept in memory for this process.
    tickets: dict[bytes, object] = {}
    server = await serve(
        args.host,
        args.port,
        configuration=configuration,
        retry=args.retry,
        session_ticket_fetcher=tickets.pop,
        session_ticket_handler=lambda ticket: tickets.__setitem__(ticket.ticket, ticket),
        create_protocol=functools.partial(
            H3ServerProtocol, root=args.root, misbehave=args.misbehave,
            rejections=Rejections(args.reject_requests),
        ),
    )
    port = server._transport.get_extra_info("sockname")[1]
    log.info(
        "serving on %s:%d root=%s misbehave=%s", args.host, port, args.root, args.misbehave
    )
    print(f"LISTENING {port}", flush=True)

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()

    log.info("shutting down")
    if args.qlog_dir:
        # aioquic writes a connection's trace when its closing or draining period ends (3 PTO,
        # RFC 9000 §10.2); connections the clients just closed get the time to finish.
        await asyncio.sleep(1.0)
    server.close()
    await asyncio.sleep(0.05)  # let CONNECTION_CLOSE packets leave


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description="HTTP/3 server (aioquic H3Connection)")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=4433, help="UDP port, 0 = pick a free one")
    p.add_argument("--cert", required=True, help="certificate chain (PEM)")
    p.add_argument("--key", required=True, help="private key (PEM)")
    p.add_argument("--root", help="directory served for GET /<path>")
    p.add_argument(
        "--misbehave",
        choices=["data-before-headers"],
        help="answer every request with a protocol violation",
    )
    p.add_argument(
        "--reject-requests",
        type=int,
        default=0,
        metavar="N",
        help="refuse the first N requests with H3_REQUEST_REJECTED",
    )
    p.add_argument("--qlog-dir", help="write one <ODCID>.qlog per connection here")
    p.add_argument("--retry", action="store_true", help="validate client addresses with Retry")
    p.add_argument("-v", "--verbose", action="store_true", help="aioquic debug logging")
    args = p.parse_args()
    if args.root is not None and not os.path.isdir(args.root):
        p.error(f"--root {args.root!r} is not a directory")
    return args


if __name__ == "__main__":
    args = parse_args()
    logging.basicConfig(
        stream=sys.stderr,
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(name)s %(levelname)s %(message)s",
    )
    if not args.verbose:
        logging.getLogger("quic").setLevel(logging.WARNING)
    try:
        asyncio.run(main(args))
    except KeyboardInterrupt:
        pass
