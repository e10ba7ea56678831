#!/usr/bin/env python3
"""quic-echo client built on aioquic 1.7.2 (interop peer for the Swift QUIC stack).

Connects to a quic-echo server (see echo_server.py / README.md for the protocol) and
exercises it concurrently:

* ``--streams N``: N bidirectional streams, each sends a distinct payload + FIN and
  expects exactly the same bytes back followed by FIN.
* ``--uni N``: N unidirectional streams, each sends a distinct payload ("uni-<i>:...")
  + FIN and expects a server-initiated unidirectional stream carrying the same bytes
  + FIN (matched by content, so the server may open them in any order).
* ``--reset-code C``: one extra bidi stream is reset by us (RESET_STREAM, code C)
  after some data was echoed, and another gets STOP_SENDING (code C); the server must
  reset its sending side of both with code C (observed as StreamReset events).
* ``--datagrams N``: N DATAGRAM frames, each expected back unchanged.

Prints one JSON line on stdout:
    {"ok": ..., "bidi": n, "uni": n, "resets": [...], "datagrams": n,
     "alpn": "...", "errors": [...]}
Exit status: 0 everything matched, 1 some check failed or timed out,
2 connection/handshake error (details on stderr).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
from collections import Counter

from aioquic.asyncio import QuicConnectionProtocol, connect
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.events import (
    ConnectionTerminated,
    DatagramFrameReceived,
    HandshakeCompleted,
    QuicEvent,
    StreamDataReceived,
    StreamReset,
)
from aioquic.quic.logger import QuicFileLogger

from client_trust import apply_verification

log = logging.getLogger("echo_client")

MAX_DATAGRAM_FRAME_SIZE = 65536
# How many times a datagram that has not come back is sent (RFC 9221 datagrams are unreliable).
DATAGRAM_ATTEMPTS = 5
# Keep datagram payloads well inside one QUIC packet (aioquic's default 1200-byte MTU).
MAX_DATAGRAM_PAYLOAD = 1000
# TLS alert names for CRYPTO_ERROR close codes (0x100 + alert), for clearer messages.
TLS_ALERTS = {
    40: "handshake_failure", 42: "bad_certificate", 43: "unsupported_certificate",
    45: "certificate_expired", 46: "certificate_unknown", 48: "unknown_ca",
    50: "decode_error", 51: "decrypt_error", 70: "protocol_version",
    80: "internal_error", 109: "missing_extension", 120: "no_application_protocol",
}


class ConnectionFailed(Exception):
    """The connection was closed (or never established) unexpectedly."""


def describe_close(event: ConnectionTerminated) -> str:
    code = event.error_code
    text = f"error_code=0x{code:x}"
    if 0x100 <= code <= 0x1FF:
        text += f" (TLS alert {code - 0x100}: {TLS_ALERTS.get(code - 0x100, '?')})"
    if event.reason_phrase:
        text += f" reason={event.reason_phrase!r}"
    return text


class StreamState:
    """Bytes received on one stream plus how it ended."""

    def __init__(self) -> None:
        self.data = bytearray()
        self.fin = False
        self.reset_code: int | None = None
        self.changed = asyncio.Event()


class EchoClientProtocol(QuicConnectionProtocol):
    """Collects raw stream/datagram events and lets coroutines wait on them."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.streams: dict[int, StreamState] = {}
        self.server_uni_done = asyncio.Queue()  # finished server uni StreamStates
        self.datagrams = asyncio.Queue()
        self.terminated: ConnectionTerminated | None = None
        self.terminated_event = asyncio.Event()
        self.handshake_done = asyncio.Event()

    def stream(self, stream_id: int) -> StreamState:
        state = self.streams.get(stream_id)
        if state is None:
            state = self.streams[stream_id] = StreamState()
        return state

    def quic_event_received(self, event: QuicEvent) -> None:
        # Not calling super(): we do not use aioquic's StreamReader plumbing.
        if isinstance(event, HandshakeCompleted):
            self.handshake_done.set()
        elif isinstance(event, StreamDataReceived):
            state = self.stream(event.stream_id)
            state.data += event.data
            if event.end_stream:
                state.fin = True
                if event.stream_id & 0x3 == 0x3:  # server-initiated unidirectional
                    self.server_uni_done.put_nowait(state)
            state.changed.set()
        elif isinstance(event, StreamReset):
            state = self.stream(event.stream_id)
            state.reset_code = event.error_code
            state.changed.set()
            log.info("stream %d reset by server, code=%d", event.stream_id, event.error_code)
        elif isinstance(event, DatagramFrameReceived):
            self.datagrams.put_nowait(event.data)
        elif isinstance(event, ConnectionTerminated):
            self.terminated = event
            self.terminated_event.set()
            for state in self.streams.values():
                state.changed.set()  # wake waiters so they notice

    # -- helpers for the test coroutines ------------------------------------------

    def check_alive(self) -> None:
        if self.terminated is not None:
            raise ConnectionFailed("connection closed by peer: " + describe_close(self.terminated))

    async def wait_stream(self, stream_id: int, predicate) -> StreamState:
        """Wait until predicate(state) holds for `stream_id`."""
        state = self.stream(stream_id)
        while not predicate(state):
            self.check_alive()
            state.changed.clear()
            await state.changed.wait()
        return state

    async def wait_handshake(self) -> None:
        """Wait for HandshakeCompleted; raise ConnectionFailed if the connection closes.

        Used instead of aioquic's wait_connected(), which only raises a bare
        ConnectionError (and leaves an unretrieved future behind on timeout).
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

    async def next_item(self, queue: asyncio.Queue):
        """queue.get(), but raise ConnectionFailed if the connection closes first."""
        self.check_alive()
        getter = asyncio.ensure_future(queue.get())
        closed = asyncio.ensure_future(self.terminated_event.wait())
        try:
            await asyncio.wait({getter, closed}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            closed.cancel()
            if not getter.done():
                getter.cancel()
        if getter.done() and not getter.cancelled():
            return getter.result()
        self.check_alive()
        raise ConnectionFailed("connection closed")

    def send(self, stream_id: int, data: bytes, end_stream: bool) -> None:
        self._quic.send_stream_data(stream_id, data, end_stream=end_stream)
        self.transmit()

    def new_stream(self, unidirectional: bool = False) -> int:
        return self._quic.get_next_available_stream_id(is_unidirectional=unidirectional)


def make_payload(label: str, text: bytes, size: int | None) -> bytes:
    """`<label>:<text>`, or, with --size, exactly `size` bytes of that pattern repeated."""
    unit = label.encode() + b":" + text
    if size is None:
        return unit
    return (unit * (size // len(unit) + 1))[:size]


def preview(data: bytes) -> str:
    return repr(bytes(data[:40])) + ("..." if len(data) > 40 else "") + f" ({len(data)} B)"


class Results:
    def __init__(self) -> None:
        self.bidi = 0
        self.uni = 0
        self.resets: list[int] = []
        self.datagrams = 0
        self.errors: list[str] = []


async def run_bidi(proto: EchoClientProtocol, index: int, payload: bytes, res: Results) -> None:
    sid = proto.new_stream()
    proto.send(sid, payload, end_stream=True)
    state = await proto.wait_stream(sid, lambda s: s.fin or s.reset_code is not None)
    if state.reset_code is not None:
        res.errors.append(f"bidi[{index}] stream {sid}: reset by server (code {state.reset_code})")
    elif bytes(state.data) != payload:
        res.errors.append(
            f"bidi[{index}] stream {sid}: echo mismatch: sent {preview(payload)}, "
            f"got {preview(state.data)}"
        )
    else:
        res.bidi += 1


async def run_uni(proto: EchoClientProtocol, payloads: list[bytes], res: Results) -> None:
    for payload in payloads:
        proto.send(proto.new_stream(unidirectional=True), payload, end_stream=True)
    expected = Counter(payloads)
    for _ in payloads:
        # Finished server uni streams arrive in whatever order the server opened them.
        state = await proto.next_item(proto.server_uni_done)
        got = bytes(state.data)
        if expected[got] > 0:
            expected[got] -= 1
            res.uni += 1
        else:
            res.errors.append(f"uni: unexpected server stream content {preview(got)}")


async def run_reset(proto: EchoClientProtocol, code: int, res: Results) -> None:
    """Two extra bidi streams: one we RESET_STREAM, one we STOP_SENDING, both code C."""

    async def one(kind: str) -> None:
        sid = proto.new_stream()
        first = f"{kind}-probe:".encode()
        proto.send(sid, first, end_stream=False)
        # Wait for the echo so the server has certainly seen (and is using) the stream.
        state = await proto.wait_stream(
            sid, lambda s: len(s.data) >= len(first) or s.fin or s.reset_code is not None
        )
        if state.reset_code is None and not state.fin:
            if kind == "reset":
                proto._quic.reset_stream(sid, code)  # RESET_STREAM(code)
            else:
                proto._quic.stop_stream(sid, code)  # STOP_SENDING(code)
            proto.transmit()
            state = await proto.wait_stream(sid, lambda s: s.reset_code is not None or s.fin)
        if state.reset_code is not None:
            res.resets.append(state.reset_code)
            if state.reset_code != code:
                res.errors.append(
                    f"{kind} stream {sid}: server reset with code {state.reset_code}, "
                    f"expected {code}"
                )
        else:
            res.errors.append(f"{kind} stream {sid}: server sent FIN instead of RESET_STREAM({code})")

    await asyncio.gather(one("reset"), one("stop-sending"))


async def run_datagrams(proto: EchoClientProtocol, payloads: list[bytes], res: Results) -> None:
    """Sends each payload in a DATAGRAM frame and expects each back unchanged. DATAGRAM frames
    are unreliable (RFC 9221 §5), so what has not come back within a second is sent again, up to
    DATAGRAM_ATTEMPTS times; a second echo of a payload sent twice is not an error."""
    if not proto._quic._remote_max_datagram_frame_size:
        res.errors.append("datagrams: server did not advertise max_datagram_frame_size")
        return
    loop = asyncio.get_running_loop()
    sent = set(payloads)
    assert len(sent) == len(payloads), "datagram payloads must differ"
    missing = set(payloads)
    for _ in range(DATAGRAM_ATTEMPTS):
        for payload in payloads:
            if payload in missing:
                proto._quic.send_datagram_frame(payload)
        proto.transmit()
        deadline = loop.time() + 1.0
        while missing:
            try:
                got = await asyncio.wait_for(proto.next_item(proto.datagrams), max(0.0, deadline - loop.time()))
            except asyncio.TimeoutError:
                break
            if got in missing:
                missing.discard(got)
                res.datagrams += 1
            elif got not in sent:
                res.errors.append(f"datagrams: unexpected datagram {preview(got)}")
        if not missing:
            return
    res.errors.append(f"datagrams: {len(missing)} of {len(payloads)} never came back in {DATAGRAM_ATTEMPTS} attempts")


async def run(args: argparse.Namespace, res: Results, meta: dict) -> None:
    configuration = QuicConfiguration(
        is_client=True,
        alpn_protocols=[args.alpn],
        server_name=args.sni or args.host,
        max_datagram_frame_size=MAX_DATAGRAM_FRAME_SIZE if args.datagrams else None,
    )
    apply_verification(configuration, args)
    if args.qlog_dir:
        os.makedirs(args.qlog_dir, exist_ok=True)
        configuration.quic_logger = QuicFileLogger(args.qlog_dir)

    text = args.data.encode()
    # wait_connected=False: connect() then neither sends the first flight nor waits;
    # we do both ourselves to get the close reason of a failed handshake.
    async with connect(
        args.host,
        args.port,
        configuration=configuration,
        create_protocol=EchoClientProtocol,
        wait_connected=False,
    ) as proto:
        assert isinstance(proto, EchoClientProtocol)
        proto.transmit()
        await proto.wait_handshake()
        meta["connected"] = True
        meta["alpn"] = proto._quic.tls.alpn_negotiated
        if meta["alpn"] != args.alpn:
            raise ConnectionFailed(
                f"ALPN mismatch: offered {args.alpn!r}, server selected {meta['alpn']!r}"
            )
        log.info("connected, alpn=%s", meta["alpn"])

        tasks = [
            run_bidi(proto, i, make_payload(f"bidi-{i}", text, args.size), res)
            for i in range(args.streams)
        ]
        if args.uni:
            uni_payloads = [make_payload(f"uni-{i}", text, args.size) for i in range(args.uni)]
            tasks.append(run_uni(proto, uni_payloads, res))
        if args.reset_code is not None:
            tasks.append(run_reset(proto, args.reset_code, res))
        if args.datagrams:
            dgrams = [
                make_payload(f"dgram-{i}", text, None)[:MAX_DATAGRAM_PAYLOAD]
                for i in range(args.datagrams)
            ]
            tasks.append(run_datagrams(proto, dgrams, res))
        await asyncio.gather(*tasks)


def main() -> int:
    p = argparse.ArgumentParser(description="quic-echo client (aioquic)")
    p.add_argument("host")
    p.add_argument("port", type=int)
    p.add_argument("--alpn", default="quic-echo")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--cacert", help="CA (or self-signed) certificate PEM to trust")
    g.add_argument("-k", "--insecure", action="store_true", help="skip certificate verification")
    p.add_argument("--sni", help="server name for SNI and verification (default: HOST)")
    p.add_argument("--streams", type=int, default=1, help="bidirectional echo streams (default 1)")
    p.add_argument("--uni", type=int, default=0, help="unidirectional echo streams")
    p.add_argument("--data", default="hello quic-echo", help="payload text")
    p.add_argument("--size", type=int, help="exact payload size in bytes (repeats the text)")
    p.add_argument("--reset-code", type=int, help="test RESET_STREAM/STOP_SENDING with this code")
    p.add_argument("--datagrams", type=int, default=0, help="DATAGRAM frames to echo")
    p.add_argument("--timeout", type=float, default=10.0, help="overall timeout, seconds")
    p.add_argument("--qlog-dir", help="write the connection's .qlog file here")
    p.add_argument("-v", "--verbose", action="store_true")
    args = p.parse_args()

    logging.basicConfig(
        stream=sys.stderr,
        level=logging.DEBUG if args.verbose else logging.WARNING,
        format="%(asctime)s %(name)s %(levelname)s %(message)s",
    )

    res = Results()
    meta: dict = {"connected": False, "alpn": None}
    status = 0
    try:
        asyncio.run(asyncio.wait_for(run(args, res, meta), args.timeout))
    except ConnectionFailed as exc:
        res.errors.append(str(exc))
        print(f"echo_client: {exc}", file=sys.stderr)
        status = 2
    except (asyncio.TimeoutError, TimeoutError):
        if meta["connected"]:
            res.errors.append(f"timed out after {args.timeout}s waiting for echoes")
            status = 1
        else:
            res.errors.append(f"timed out after {args.timeout}s: no handshake")
            status = 2
        print(f"echo_client: {res.errors[-1]}", file=sys.stderr)
    except OSError as exc:  # e.g. name resolution, unreachable network
        res.errors.append(f"connection error: {exc}")
        print(f"echo_client: connection error: {exc}", file=sys.stderr)
        status = 2

    if status == 0 and res.errors:
        status = 1
    summary = {
        "ok": status == 0,
        "bidi": res.bidi,
        "uni": res.uni,
        "resets": res.resets,
        "datagrams": res.datagrams,
        "alpn": meta["alpn"],
        "errors": res.errors,
    }
    print(json.dumps(summary), flush=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
