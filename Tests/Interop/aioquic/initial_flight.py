#!/usr/bin/env python3
"""Writes an aioquic 1.7.2 client's first flight, for the server-datagram fuzz target's seeds.

    initial_flight.py OUTPUT [--alpn ALPN]

No network: aioquic's QuicConnection is driven in memory and the datagrams it would send are
written as the fuzz target reads them, each a 2-byte big-endian length and its bytes.
"""
import argparse
import struct

from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.connection import QuicConnection


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("output")
    parser.add_argument("--alpn", default="h3")
    args = parser.parse_args()
    configuration = QuicConfiguration(is_client=True, alpn_protocols=[args.alpn], server_name="localhost")
    connection = QuicConnection(configuration=configuration)
    connection.connect(("192.0.2.2", 443), now=0.0)
    with open(args.output, "wb") as output:
        for datagram, _ in connection.datagrams_to_send(now=0.0):
            output.write(struct.pack("!H", len(datagram)) + datagram)


if __name__ == "__main__":
    main()
