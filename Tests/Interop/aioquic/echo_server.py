#!/usr/bin/env python3
"""quic-echo server built on aioquic 1.7.2 (interop peer for the Swift QUIC stack).

Protocol ("quic-echo", ALPN ``quic-echo`` by default):

* client-opened bidirectional stream: every byte is written back, in order, on the
  same stream; the server sends FIN once the client's FIN has been received.
* client-opened unidirectional stream: the server opens one server-initiated
  unidirectional stream, streams the same bytes through it and sends FIN after the
  client's FIN.
* RESET_STREAM (client resets its sending side) or STOP_SENDING with application
  error code C: the server resets its own sending side of that stream -- or of the
  paired server unidirectional stream -- with the same code C.
* DATAGRAM frames (only when both sides advertise max_datagram_frame_size > 0,
  i.e. with ``--datagrams``): each datagram is echoed unchanged.

Usage:
    echo_server.py --host 127.0.0.1 --port 0 --cert cert.pem --key key.pem \
        [--alpn quic-echo] [--datagrams] [--retry] [--request-client-certificate]
        [--qlog-dir DIR] [-v]

Prints ``LISTENING <port>`` on stdout once the UDP socket is bound, then serves until
SIGTERM/SIGINT. Everything else is logged to stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import logging
import os
import signal
import sys

from aioquic import tls
from aioquic.asyncio import QuicConnectionProtocol, serve
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.events import (
    ConnectionTerminated,
    DatagramFrameReceived,
    HandshakeCompleted,
    QuicEvent,
    StopSendingReceived,
    StreamDataReceived,
    StreamReset,
)
from aioquic.quic.logger import QuicFileLogger
from cryptography.hazmat.primitives import serialization

log = logging.getLogger("echo_server")

# Largest DATAGRAM frame payload we accept (advertised as max_datagram_frame_size).
MAX_DATAGRAM_FRAME_SIZE = 65536

# With --request-client-certificate: ask every client for a certificate (CertificateRequest,
# RFC 8446 §4.3.2) and print the SHA-256 of the one it sends. aioquic's server can only do this
# through the tls.Context attribute it keeps for its own tests.
REQUEST_CLIENT_CERTIFICATE = False


def request_client_certificates() -> None:
    global REQUEST_CLIENT_CERTIFICATE
    REQUEST_CLIENT_CERTIFICATE = True
    original_init = tls.Context.__init__

    def init(self, *args, **kwargs) -> None:
        original_init(self, *args, **kwargs)
        if not self._is_client:
            self._request_client_certificate = True

    tls.Context.__init__ = init


def is_unidirectional(stream_id: int) -> bool:
    return bool(stream_id & 0x2)


def is_client_initiated(stream_id: int) -> bool:
    return not (stream_id & 0x1)


class EchoServerProtocol(QuicConnectionProtocol):
    """One instance per QUIC connection; echoes streams and datagrams."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        # client uni stream id -> server uni stream id carrying its echo
        self._uni_pairs: dict[int, int] = {}
        # streams whose sending side we have reset (aioquic refuses writes on them)
        self._send_reset: set[int] = set()
        self._peer = "?"
        self._report_client_certificate = REQUEST_CLIENT_CERTIFICATE

    # -- helpers ---------------------------------------------------------------

    def _echo_target(self, stream_id: int, create: bool) -> int | None:
        """Return the stream on which data received on ``stream_id`` is echoed."""
        if not is_unidirectional(stream_id):
            return stream_id
        target = self._uni_pairs.get(stream_id)
        if target is None and create:
            target = self._quic.get_next_available_stream_id(is_unidirectional=True)
            # The stream only exists (and the next id only advances) once something
            # is written to it, so open it right away with an empty write.
            self._quic.send_stream_data(target, b"")
            self._uni_pairs[stream_id] = target
            log.debug("%s: uni stream %d paired with %d", self._peer, stream_id, target)
        return target

    def _write(self, stream_id: int, data: bytes, end_stream: bool) -> None:
        if stream_id in self._send_reset:
            return  # sending side already reset: drop the data silently
        try:
            self._quic.send_stream_data(stream_id, data, end_stream=end_stream)
        except (ValueError, RuntimeError) as exc:  # finished / reset underneath us
            log.debug("%s: cannot write to stream %d: %s", self._peer, stream_id, exc)

    def _reset(self, stream_id: int, error_code: int) -> None:
        if stream_id in self._send_reset:
            return
        self._send_reset.add(stream_id)
        try:
            # No effect if already reset (aioquic does it itself on STOP_SENDING)
            # or if everything we sent has already been acknowledged.
            self._quic.reset_stream(stream_id, error_code)
        except ValueError as exc:
            log.debug("%s: cannot reset stream %d: %s", self._peer, stream_id, exc)

    # -- events ------------------------------------------------------------------

    def quic_event_received(self, event: QuicEvent) -> None:
        # Deliberately not calling super(): its StreamReader plumbing would buffer
        # every stream without bound, and we handle the raw events ourselves.
        if isinstance(event, HandshakeCompleted):
            addr = self._quic._network_paths[0].addr if self._quic._network_paths else "?"
            self._peer = f"{addr[0]}:{addr[1]}" if isinstance(addr, tuple) else str(addr)
            log.info(
                "%s: handshake completed, alpn=%s, datagrams=%s",
                self._peer,
                event.alpn_protocol,
                self._quic._remote_max_datagram_frame_size,
            )
            if self._report_client_certificate:
                peer = self._quic.tls._peer_certificate
                der = peer.public_bytes(serialization.Encoding.DER) if peer is not None else None
                print(f"CLIENT-CERTIFICATE {hashlib.sha256(der).hexdigest() if der else 'none'}", flush=True)

        elif isinstance(event, StreamDataReceived):
            sid = event.stream_id
            if not is_client_initiated(sid):
                return  # data on our own streams cannot happen (uni) / is not echoed
            target = self._echo_target(sid, create=True)
            self._write(target, event.data, event.end_stream)
            if event.end_stream:
                log.debug("%s: stream %d finished -> FIN on %d", self._peer, sid, target)

        elif isinstance(event, StreamReset):
            # The client reset its sending side of `stream_id`: mirror the code.
            sid = event.stream_id
            target = self._echo_target(sid, create=True)
            log.info(
                "%s: RESET_STREAM on %d code=%d -> reset %d",
                self._peer, sid, event.error_code, target,
            )
            self._reset(target, event.error_code)

        elif isinstance(event, StopSendingReceived):
            # The client no longer wants what we send on `stream_id` (a bidi stream,
            # or one of our uni streams). aioquic has already queued RESET_STREAM with
            # the same code (RFC 9000 §3.5); record it and make it explicit.
            log.info(
                "%s: STOP_SENDING on %d code=%d -> reset it",
                self._peer, event.stream_id, event.error_code,
            )
            self._reset(event.stream_id, event.error_code)

        elif isinstance(event, DatagramFrameReceived):
            self._quic.send_datagram_frame(event.data)

        elif isinstance(event, ConnectionTerminated):
            log.info(
                "%s: connection terminated: error_code=0x%x reason=%r",
                self._peer, event.error_code, event.reason_phrase,
            )
            return

        self.transmit()


async def main(args: argparse.Namespace) -> None:
    configuration = QuicConfiguration(
        is_client=False,
        alpn_protocols=[args.alpn],
        max_datagram_frame_size=MAX_DATAGRAM_FRAME_SIZE if args.datagrams else None,
    )
    configuration.load_cert_chain(args.cert, args.key)
    if args.qlog_dir:
        os.makedirs(args.qlog_dir, exist_ok=True)
        configuration.quic_logger = QuicFileLogger(args.qlog_dir)

    server = await serve(
        args.host,
        args.port,
        configuration=configuration,
        create_protocol=EchoServerProtocol,
        retry=args.retry,
    )
    port = server._transport.get_extra_info("sockname")[1]
    log.info(
        "serving on %s:%d alpn=%s datagrams=%s retry=%s",
        args.host, port, args.alpn, args.datagrams, args.retry,
    )
    print(f"LISTENING {port}", flush=True)

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()

    log.info("shutting down")
    server.close()
    await asyncio.sleep(0.05)  # let CONNECTION_CLOSE packets leave


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description="quic-echo server (aioquic)")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=4433, help="UDP port; 0 = pick a free one")
    p.add_argument("--cert", required=True, help="certificate chain (PEM)")
    p.add_argument("--key", required=True, help="private key (PEM)")
    p.add_argument("--alpn", default="quic-echo", help="ALPN to accept (default quic-echo)")
    p.add_argument("--datagrams", action="store_true",
                   help="advertise max_datagram_frame_size and echo DATAGRAM frames")
    p.add_argument("--retry", action="store_true", help="validate addresses with Retry")
    p.add_argument("--request-client-certificate", action="store_true",
                   help="ask clients for a certificate and print CLIENT-CERTIFICATE <sha256|none>")
    p.add_argument("--qlog-dir", help="write one .qlog file per connection here")
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    return p.parse_args()


if __name__ == "__main__":
    args = parse_args()
    logging.basicConfig(
        stream=sys.stderr,
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(name)s %(levelname)s %(message)s",
    )
    # aioquic's own per-packet logging is very chatty; only show it with -v.
    logging.getLogger("quic").setLevel(logging.DEBUG if args.verbose else logging.WARNING)
    if args.request_client_certificate:
        request_client_certificates()
    try:
        asyncio.run(main(args))
    except KeyboardInterrupt:
        pass
