#!/usr/bin/env python3
"""curl as an HTTP/3 client (interop peer): libcurl 8.23 on ngtcp2 1.25, nghttp3 1.18 and
OpenSSL 3.6, through the pinned ``pycurl`` wheel.

Runs transfers in rounds on one ``CurlMulti`` (``PIPE_MULTIPLEX``), so every round can reuse
the connection of the one before. The transfers of a round start together; with ``PIPEWAIT``
they wait for the first one's connection and share it. Rounds are separated by ``then``:

    h3_curl.py --cacert ca.pem --resolve localhost:4433:127.0.0.1 \\
        GET@https://localhost:4433/a GET@https://localhost:4433/b then HEAD@https://localhost:4433/a

A transfer is ``METHOD[,OPTION...]@URL``; METHOD is GET, HEAD or POST. Options:

* ``range=A-B``: a byte range (``Range: bytes=A-B``);
* ``size=N``: for POST, a body of N bytes (byte i is ``i % 251``);
* ``fresh``: a new connection (``FRESH_CONNECT``), which may resume the TLS session of an
  earlier one from curl's session cache, and send 0-RTT with ``--early-data``.

Prints one JSON line per transfer, in order:

    {"round": 0, "method": "GET", "url": "...", "status": 200, "length": 1000, "sha256": "...",
     "http_version": 3, "num_connects": 1, "early_data_sent": 0, "resumed": false, ...}

``num_connects`` is curl's ``NUM_CONNECTS``: 0 when the transfer reused a connection.
``resumed`` says whether curl's log shows it reusing a TLS session for the connection;
``early_data_sent`` is ``EARLYDATA_SENT_T``, the bytes curl sent as 0-RTT. With
``--log FILE``, curl's verbose log goes there. With ``--qlog-dir DIR``, libcurl writes a qlog
trace per connection there; the script ignores ``QLOGDIR``, which libcurl would otherwise
read, so that curl's traces (whose header has no title) stay out of directories that hold
only our traces and are checked as such (scripts/test runs the suite with ``QLOGDIR`` set).

Exit status: 0 every transfer got a response (any status), 1 some failed (the JSON line has
``error``), 2 bad usage.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import sys
import time

import pycurl

POST_PATTERN_MODULUS = 251


class Transfer:
    def __init__(self, index: int, round_index: int, spec: str, args: argparse.Namespace, share: pycurl.CurlShare,
                 log: list[str]):
        head, sep, url = spec.partition("@")
        if not sep or not url:
            raise ValueError(f"'{spec}' is not METHOD[,OPTION...]@URL")
        parts = head.split(",")
        self.method = parts[0].upper()
        if self.method not in ("GET", "HEAD", "POST"):
            raise ValueError(f"'{spec}': method {self.method} is not GET, HEAD or POST")
        options = {}
        for part in parts[1:]:
            key, _, value = part.partition("=")
            options[key] = value
        unknown = set(options) - {"range", "size", "fresh"}
        if unknown:
            raise ValueError(f"'{spec}': unknown options {sorted(unknown)}")
        self.index = index
        self.round = round_index
        self.url = url
        self.options = options
        self.body = hashlib.sha256()
        self.length = 0
        self.headers: dict[str, str] = {}
        self.log = log
        self.sent = 0
        self.upload_size = int(options.get("size", "0") or 0)

        c = pycurl.Curl()
        self.curl = c
        c.setopt(pycurl.URL, url)
        c.setopt(pycurl.HTTP_VERSION, pycurl.CURL_HTTP_VERSION_3ONLY)
        c.setopt(pycurl.PIPEWAIT, 1)
        c.setopt(pycurl.SHARE, share)
        c.setopt(pycurl.SSL_SESSIONID_CACHE, 1)
        c.setopt(pycurl.TIMEOUT_MS, int(args.timeout * 1000))
        c.setopt(pycurl.WRITEFUNCTION, self._write)
        c.setopt(pycurl.HEADERFUNCTION, self._header)
        c.setopt(pycurl.VERBOSE, 1)
        c.setopt(pycurl.DEBUGFUNCTION, self._debug)
        if args.cacert:
            c.setopt(pycurl.CAINFO, args.cacert)
        if args.resolve:
            c.setopt(pycurl.RESOLVE, args.resolve)
        if args.early_data:
            c.setopt(pycurl.SSL_OPTIONS, pycurl.SSLOPT_EARLYDATA)
        if args.tls13_ciphers:
            c.setopt(pycurl.TLS13_CIPHERS, args.tls13_ciphers)
        if "fresh" in options:
            c.setopt(pycurl.FRESH_CONNECT, 1)
        if "range" in options:
            c.setopt(pycurl.RANGE, options["range"])
        if self.method == "HEAD":
            c.setopt(pycurl.NOBODY, 1)
        elif self.method == "POST":
            c.setopt(pycurl.POST, 1)
            c.setopt(pycurl.POSTFIELDSIZE_LARGE, self.upload_size)
            c.setopt(pycurl.READFUNCTION, self._read)
        self.resumed = False

    def _write(self, data: bytes) -> None:
        self.body.update(data)
        self.length += len(data)

    def _header(self, line: bytes) -> None:
        text = line.decode("latin-1").strip()
        if ":" in text and not text.startswith("HTTP/"):
            name, _, value = text.partition(":")
            self.headers[name.strip().lower()] = value.strip()

    def _read(self, size: int) -> bytes:
        count = min(size, self.upload_size - self.sent)
        chunk = bytes((self.sent + i) % POST_PATTERN_MODULUS for i in range(count))
        self.sent += count
        return chunk

    def _debug(self, kind: int, data: bytes) -> None:
        if kind != pycurl.INFOTYPE_TEXT:
            return
        text = data.decode("utf-8", "replace").rstrip()
        self.log.append(f"[{self.index}] {text}")
        # vtls_scache: "SSL reusing session with ALPN 'h3'" when a cached session is offered.
        if "reusing session" in text.lower():
            self.resumed = True

    def result(self, error: str | None) -> dict:
        c = self.curl
        out = {
            "round": self.round,
            "method": self.method,
            "url": self.url,
            "status": c.getinfo(pycurl.RESPONSE_CODE),
            "length": self.length,
            "sha256": self.body.hexdigest(),
            "http_version": c.getinfo(pycurl.INFO_HTTP_VERSION),
            "num_connects": c.getinfo(pycurl.NUM_CONNECTS),
            "early_data_sent": c.getinfo(pycurl.EARLYDATA_SENT_T),
            "resumed": self.resumed,
            "uploaded": self.sent,
            "local_port": c.getinfo(pycurl.LOCAL_PORT),
            "headers": self.headers,
        }
        if error:
            out["error"] = error
        return out


def run_round(multi: pycurl.CurlMulti, transfers: list[Transfer], deadline: float) -> dict[int, str | None]:
    """Runs the transfers together until all finish; returns each one's error (None if none)."""
    by_handle = {id(t.curl): t for t in transfers}
    errors: dict[int, str | None] = {}
    for transfer in transfers:
        multi.add_handle(transfer.curl)
    remaining = len(transfers)
    while remaining > 0:
        if time.time() > deadline:
            for transfer in transfers:
                errors.setdefault(transfer.index, "timed out")
            break
        while True:
            status, _ = multi.perform()
            if status != pycurl.E_CALL_MULTI_PERFORM:
                break
        while True:
            queued, succeeded, failed = multi.info_read()
            for handle in succeeded:
                errors[by_handle[id(handle)].index] = None
                remaining -= 1
            for handle, code, message in failed:
                errors[by_handle[id(handle)].index] = f"curl error {code}: {message}"
                remaining -= 1
            if queued == 0:
                break
        if remaining > 0:
            multi.select(0.1)
    for transfer in transfers:
        multi.remove_handle(transfer.curl)
    return errors


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cacert", help="PEM file of the CA that signed the server's certificate")
    parser.add_argument("--resolve", action="append", default=[], help="HOST:PORT:ADDRESS, as curl's --resolve")
    parser.add_argument("--early-data", action="store_true", help="send 0-RTT on resumed connections (SSLOPT_EARLYDATA)")
    parser.add_argument("--tls13-ciphers", help="TLS 1.3 cipher suites to offer, e.g. TLS_CHACHA20_POLY1305_SHA256")
    parser.add_argument("--timeout", type=float, default=30, help="seconds for each round")
    parser.add_argument("--log", help="write curl's verbose log here")
    parser.add_argument("--qlog-dir", help="have libcurl write a qlog trace per connection here")
    parser.add_argument("transfers", nargs="+", help="METHOD[,OPTION...]@URL, rounds separated by 'then'")
    args = parser.parse_args()

    # libcurl reads QLOGDIR when it opens a connection: only --qlog-dir sets it.
    os.environ.pop("QLOGDIR", None)
    if args.qlog_dir:
        os.environ["QLOGDIR"] = args.qlog_dir

    rounds: list[list[str]] = [[]]
    for word in args.transfers:
        if word == "then":
            rounds.append([])
        else:
            rounds[-1].append(word)
    if any(not r for r in rounds):
        parser.error("every round needs at least one transfer")

    share = pycurl.CurlShare()
    share.setopt(pycurl.SH_SHARE, pycurl.LOCK_DATA_SSL_SESSION)
    multi = pycurl.CurlMulti()
    multi.setopt(pycurl.M_PIPELINING, pycurl.PIPE_MULTIPLEX)
    log: list[str] = []
    results: list[dict] = []
    failed = False
    index = 0
    try:
        for round_index, specs in enumerate(rounds):
            transfers = []
            for spec in specs:
                try:
                    transfers.append(Transfer(index, round_index, spec, args, share, log))
                except ValueError as error:
                    parser.error(str(error))
                index += 1
            errors = run_round(multi, transfers, time.time() + args.timeout)
            for transfer in transfers:
                error = errors.get(transfer.index)
                failed = failed or error is not None
                results.append(transfer.result(error))
                print(json.dumps(results[-1]), flush=True)
    finally:
        if args.log:
            with io.open(args.log, "w") as handle:
                handle.write("\n".join(log) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
