"""How the aioquic client peers verify a server's certificate, shared by echo_client.py,
h3_client.py, h3_churn.py and h3_requests.py: -k turns verification off, --cacert trusts that
file, and otherwise the system trust store is used (aioquic's own default is certifi's bundle)."""

from __future__ import annotations

import argparse
import os
import ssl

from aioquic.quic.configuration import QuicConfiguration

SYSTEM_CA_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"


def apply_verification(configuration: QuicConfiguration, args: argparse.Namespace) -> None:
    if args.insecure:
        configuration.verify_mode = ssl.CERT_NONE
    elif args.cacert:
        configuration.load_verify_locations(cafile=args.cacert)
    elif os.path.exists(SYSTEM_CA_BUNDLE):
        configuration.load_verify_locations(cafile=SYSTEM_CA_BUNDLE)


def add_verification_arguments(parser: argparse.ArgumentParser) -> None:
    """--cacert PEM | -k, the flags apply_verification reads."""
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--cacert", help="CA (or self-signed) certificate PEM to trust")
    group.add_argument("-k", "--insecure", action="store_true", help="skip certificate verification")
