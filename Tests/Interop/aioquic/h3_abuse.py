#!/usr/bin/env python3
"""An HTTP/3 client that breaks the rules on purpose (aioquic 1.7.2), to check what a server does.

    h3_abuse.py ATTACK https://HOST:PORT/PATH [--cacert PEM | -k] [--size N] [--fields N] [--timeout S]

Attacks:
    stream-limit    opens one bidirectional stream more than the server's
                    initial_max_streams_bidi allows; the server must close the connection with
                    STREAM_LIMIT_ERROR, 0x4 (RFC 9000 §4.6, §19.11).
    qpack-capacity  sets the QPACK dynamic table capacity on its encoder stream above the
                    server's SETTINGS_QPACK_MAX_TABLE_CAPACITY; the server must close with
                    QPACK_ENCODER_STREAM_ERROR, 0x201 (RFC 9204 §4.3.1, §6).
    big-headers     sends a GET whose header section holds --fields fields (1 by default) of
                    --size bytes each (100,000 by default); past its SETTINGS_MAX_FIELD_SECTION_SIZE
                    the server may answer 431 or reset the stream (RFC 9114 §4.2.2), and the
                    connection should live on.
    slowloris       sends the first half of a GET's HEADERS frame and nothing more; the server
                    should reset the stream with H3_REQUEST_INCOMPLETE, 0x10d, once its
                    request-header timeout has passed (RFC 9114 §4.1.2, §10.5), and serve on.

Prints one JSON line with what the server did, e.g. {"attack": "stream-limit", "outcome":
"connection-closed", "error_code": 4, "reason": "..."} or {"outcome": "response", "status": 431}
or {"outcome": "stream-reset", "error_code": 270}; after a stream-level answer, "then_status"
is the status of a well-formed GET sent next on the same connection. Exits 0 once it has seen
an outcome, 1 when the server did nothing before --timeout.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time

from aioquic.asyncio import connect
from aioquic.asyncio.protocol import QuicConnectionProtocol
from aioquic.h3.connection import H3_ALPN, H3Connection
from aioquic.h3.events import HeadersReceived
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.events import ConnectionTerminated, QuicEvent, StreamReset

from client_trust import add_verification_arguments, apply_verification
from h3_client import parse_urls


class AbuseProtocol(QuicConnectionProtocol):
    """Records the first thing the server does to us: a close, a reset or a response."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.h3 = H3Connection(self._quic)
        self.outcome: asyncio.Future[dict] = asyncio.get_running_loop().create_future()
        self.statuses: dict[int, asyncio.Future[int]] = {}

    def settle(self, outcome: dict) -> None:
        if not self.outcome.done():
            self.outcome.set_result(outcome)

    def quic_event_received(self, event: QuicEvent) -> None:
        if isinstance(event, ConnectionTerminated):
            self.settle({"outcome": "connection-closed", "error_code": event.error_code, "reason": event.reason_phrase})
        elif isinstance(event, StreamReset):
            self.settle({"outcome": "stream-reset", "stream_id": event.stream_id, "error_code": event.error_code})
        for h3_event in self.h3.handle_event(event):
            if isinstance(h3_event, HeadersReceived):
                status = int(dict(h3_event.headers).get(b":status", b"0"))
                waiting = self.statuses.get(h3_event.stream_id)
                if waiting is not None and not waiting.done():
                    waiting.set_result(status)
                else:
                    self.settle({"outcome": "response", "stream_id": h3_event.stream_id, "status": status})

    async def get(self, authority: str, path: str, timeout: float) -> int:
        """A well-formed GET on a new stream of this connection; its status."""
        stream_id = self._quic.get_next_available_stream_id()
        self.statuses[stream_id] = asyncio.get_running_loop().create_future()
        self.h3.send_headers(stream_id, [(b":method", b"GET"), (b":scheme", b"https"),
                                         (b":authority", authority.encode()), (b":path", path.encode())], end_stream=True)
        self.transmit()
        return await asyncio.wait_for(self.statuses[stream_id], timeout)


def prefix_integer(value: int, prefix_bits: int, flags: int) -> bytes:
    """An integer with an N-bit prefix (RFC 7541 §5.1), the prefix's other bits set to `flags`."""
    limit = (1 << prefix_bits) - 1
    if value < limit:
        return bytes([flags | value])
    out = bytearray([flags | limit])
    rest = value - limit
    while rest >= 128:
        out.append(0x80 | (rest & 0x7F))
        rest >>= 7
    out.append(rest)
    return bytes(out)


def encoder_capacity_instruction(capacity: int) -> bytes:
    """Set Dynamic Table Capacity (RFC 9204 §4.3.1): 001 and a 5-bit prefix integer."""
    return prefix_integer(capacity, 5, 0x20)


def quic_varint(value: int) -> bytes:
    """A QUIC variable-length integer (RFC 9000 §16)."""
    for length, tag in ((1, 0x00), (2, 0x40), (4, 0x80), (8, 0xC0)):
        if value < 1 << (8 * length - 2):
            encoded = bytearray(value.to_bytes(length, "big"))
            encoded[0] |= tag
            return bytes(encoded)
    raise ValueError("too large for a varint")


def literal_headers_frame(fields: list[tuple[bytes, bytes]]) -> bytes:
    """A HEADERS frame whose field lines are all literals with literal names and no dynamic
    table (RFC 9204 §4.5.1, §4.5.6): what any size of field takes, since aioquic's encoder
    refuses long values."""
    section = bytearray(b"\x00\x00")  # Required Insert Count 0, Base 0
    for name, value in fields:
        section += prefix_integer(len(name), 3, 0x20) + name  # 001 N=0 H=0, name length
        section += prefix_integer(len(value), 7, 0x00) + value  # H=0, value length
    return quic_varint(0x01) + quic_varint(len(section)) + bytes(section)


def stream_limit(proto: AbuseProtocol, authority: str, path: str, size: int, count: int) -> None:
    quic = proto._quic
    limit = quic._remote_max_streams_bidi
    # aioquic holds back streams past the peer's limit; pretend the limit is higher.
    quic._remote_max_streams_bidi = limit + 1
    stream_id = 4 * limit  # the first client bidirectional stream beyond the limit
    quic.send_stream_data(stream_id, b"\x01\x00", end_stream=False)


def qpack_capacity(proto: AbuseProtocol, authority: str, path: str, size: int, count: int) -> None:
    # The H3Connection already opened the encoder stream (type 0x02); write onto it.
    encoder = proto.h3._local_encoder_stream_id
    proto._quic.send_stream_data(encoder, encoder_capacity_instruction(1 << 20), end_stream=False)


def big_headers(proto: AbuseProtocol, authority: str, path: str, size: int, count: int) -> None:
    stream_id = proto._quic.get_next_available_stream_id()
    fields = [(b":method", b"GET"), (b":scheme", b"https"), (b":authority", authority.encode()),
              (b":path", path.encode())]
    fields += [(f"x-padding-{index}".encode(), b"a" * size) for index in range(count)]
    proto._quic.send_stream_data(stream_id, literal_headers_frame(fields), end_stream=True)


def slowloris(proto: AbuseProtocol, authority: str, path: str, size: int, count: int) -> None:
    stream_id = proto._quic.get_next_available_stream_id()
    frame = literal_headers_frame([(b":method", b"GET"), (b":scheme", b"https"), (b":authority", authority.encode()),
                                   (b":path", path.encode())])
    proto._quic.send_stream_data(stream_id, frame[: len(frame) // 2], end_stream=False)


ATTACKS = {"stream-limit": stream_limit, "qpack-capacity": qpack_capacity, "big-headers": big_headers,
           "slowloris": slowloris}


async def run(args: argparse.Namespace) -> dict:
    host, port, authority, (path,) = parse_urls([args.url])
    configuration = QuicConfiguration(is_client=True, alpn_protocols=H3_ALPN, server_name=host,
                                      max_stream_data=1 << 22)
    apply_verification(configuration, args)
    async with connect(host, port, configuration=configuration, create_protocol=AbuseProtocol) as proto:
        # Let the server's SETTINGS arrive, and the control and QPACK streams that the
        # H3Connection opened at creation leave.
        proto.transmit()
        await asyncio.sleep(0.2)
        started = time.monotonic()
        ATTACKS[args.attack](proto, authority, path, args.size, args.fields)
        proto.transmit()
        try:
            outcome = await asyncio.wait_for(asyncio.shield(proto.outcome), args.timeout)
        except asyncio.TimeoutError:
            outcome = {"outcome": "nothing"}
        outcome["seconds"] = round(time.monotonic() - started, 3)
        if outcome["outcome"] in ("response", "stream-reset"):
            # A stream error must leave the connection serving.
            try:
                outcome["then_status"] = await proto.get(authority, path, args.timeout)
            except (asyncio.TimeoutError, ConnectionError) as error:
                outcome["then_status"] = f"no answer: {type(error).__name__}"
        return outcome


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("attack", choices=sorted(ATTACKS))
    parser.add_argument("url")
    parser.add_argument("--size", type=int, default=100_000, help="big-headers: the field's size in bytes")
    parser.add_argument("--fields", type=int, default=1, help="big-headers: how many such fields")
    parser.add_argument("--timeout", type=float, default=10.0)
    add_verification_arguments(parser)
    args = parser.parse_args()
    outcome = {"attack": args.attack, **asyncio.run(run(args))}
    print(json.dumps(outcome), flush=True)
    return 0 if outcome["outcome"] != "nothing" else 1


if __name__ == "__main__":
    sys.exit(main())
