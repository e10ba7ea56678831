#!/usr/bin/env python3
"""Stand-ins for quic-lb-hosts.sh --selftest (Python standard library only).

  respond NAME PORT          a UDP responder for one "host": answers every datagram with NAME
  probe [options]            sends QUIC-shaped datagrams to the VIP and prints what it saw (JSON)
  flush-conntrack            empties the conntrack table of the current network namespace

The probe checks the balancer, not QUIC: the datagrams only have the shape a balancer reads
(draft-ietf-quic-load-balancers-21 §5, RFC 9000 §17), never valid packet protection.
Every probe datagram leaves from a port of its own, taken in order from --base-port, so no two
probes share a 4-tuple, and so no probe meets a conntrack entry left by an earlier one.
"""
import argparse
import json
import os
import random
import signal
import socket
import struct
import sys


def respond(name, port):
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("0.0.0.0", port))
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    reply = name.encode()
    while True:
        data, peer = sock.recvfrom(2048)
        sock.sendto(reply + b" " + data[:1].hex().encode(), peer)


# --- QUIC-shaped datagrams ---------------------------------------------------------------------

def dcid(sid, cid_len, config_id):
    """A server connection ID in plaintext mode (draft §5.3): first octet, server ID, nonce.

    The first octet carries the config rotation bits (§3) and, in its low 5 bits, the length
    of the rest of the ID (the length self-encoding, §3.1)."""
    first = (config_id << 5) | ((cid_len - 1) & 0x1F)
    nonce = os.urandom(cid_len - 1 - len(sid))
    return bytes([first]) + sid + nonce


def short_header(cid):
    # RFC 9000 §17.3.1: 0b01SRRKPP (header form 0, fixed bit 1), DCID, packet number, payload.
    return bytes([0x40 | random.randrange(0x40)]) + cid + os.urandom(40)


def long_header(packet_type, cid, padded=False):
    # RFC 9000 §17.2: 0b11TT.... (form 1, fixed 1, type), version, DCID len, DCID, SCID len, SCID.
    first = 0xC0 | (packet_type << 4) | random.randrange(0x10)
    scid = os.urandom(8)
    body = bytes([first]) + struct.pack("!I", 1) + bytes([len(cid)]) + cid + bytes([len(scid)]) + scid
    return body + os.urandom(1200 - len(body) if padded else 40)


def initial():
    # Client Initial (type 0): a random DCID of 8 bytes, padded to 1200 bytes (RFC 9000 §14.1).
    return long_header(0, os.urandom(8), padded=True)


def handshake(cid):
    return long_header(2, cid)


def initial_to(cid):
    # A client's later Initial: it carries the server's ID once the server's first Initial came.
    return long_header(0, cid, padded=True)


# --- Sending ------------------------------------------------------------------------------------

class Prober:
    def __init__(self, vip, port, base_port, timeout):
        self.vip, self.port, self.next_port, self.timeout = vip, port, base_port, timeout
        self.wrong_source = 0

    def send(self, payload):
        """Sends one datagram from a new source port; returns the name that answered, or None."""
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        sock.bind(("0.0.0.0", self.next_port))
        self.next_port += 1
        sock.settimeout(self.timeout)
        try:
            sock.sendto(payload, (self.vip, self.port))
            data, peer = sock.recvfrom(2048)
        except socket.timeout:
            return None
        finally:
            sock.close()
        # The balancer must undo its rewrite: the answer comes from the VIP, never from a host.
        if peer != (self.vip, self.port):
            self.wrong_source += 1
        return data.split(b" ")[0].decode()


def tally(names):
    counts = {}
    for name in names:
        key = name or "none"
        counts[key] = counts.get(key, 0) + 1
    return counts


def probe(args):
    sids = {name: bytes.fromhex(sid) for name, sid in (item.split("=") for item in args.sids.split(","))}
    hosts = list(sids)
    unknown_sid = bytes([0xFF] * args.sid_len)
    assert unknown_sid not in sids.values()
    p = Prober(args.vip, args.port, args.base_port, args.timeout)
    n = args.n
    out = {}

    if args.only_sid:
        # After a host stopped: short headers for the named hosts only.
        for name in args.only_sid.split(","):
            out["short_" + name] = tally(p.send(short_header(dcid(sids[name], args.cid_len, args.config_id))) for _ in range(n))
        out["wrong_source"] = p.wrong_source
        print(json.dumps(out))
        return

    # (a) Short-header and long-header packets with one of our IDs go to the host its server ID names (§5).
    for name, sid in sids.items():
        out["short_" + name] = tally(p.send(short_header(dcid(sid, args.cid_len, args.config_id))) for _ in range(n))
        out["handshake_" + name] = tally(p.send(handshake(dcid(sid, args.cid_len, args.config_id))) for _ in range(n))
        out["initial_ours_" + name] = tally(p.send(initial_to(dcid(sid, args.cid_len, args.config_id))) for _ in range(n))
    # (b) Initials, unknown server IDs and the unroutable codepoint 0b111 (§3.2) go by 4-tuple.
    out["initial"] = tally(p.send(initial()) for _ in range(n))
    out["short_unknown_sid"] = tally(p.send(short_header(dcid(unknown_sid, args.cid_len, args.config_id))) for _ in range(n))
    other_config = 0b111 if args.config_id != 0b111 else 0
    out["short_unroutable_config"] = tally(
        p.send(short_header(dcid(sids[hosts[0]], args.cid_len, other_config))) for _ in range(n))
    # A Handshake packet whose DCID is not our length is not read as ours: 4-tuple.
    out["handshake_other_length"] = tally(
        p.send(handshake(dcid(sids[hosts[0]], args.cid_len - 1, args.config_id))) for _ in range(n))
    # (c) Migration: a "connection" starts with an Initial, which lands on some host by 4-tuple;
    # that host's server ID goes into the CID. Then the client moves to a new port and sends
    # short headers: they must reach the same host.
    ok = broken = lost = 0
    for _ in range(n):
        first = p.send(initial())
        if first is None:
            lost += 1
            continue
        after = p.send(short_header(dcid(sids[first], args.cid_len, args.config_id)))
        if after == first:
            ok += 1
        else:
            broken += 1
    out["migration"] = {"ok": ok, "broken": broken, "lost": lost}
    out["wrong_source"] = p.wrong_source
    print(json.dumps(out))


# --- conntrack --------------------------------------------------------------------------------

def flush_conntrack():
    """IPCTNL_MSG_CT_DELETE with no tuple: ctnetlink's "flush the table" (what conntrack -F sends)."""
    NETLINK_NETFILTER, NFNL_SUBSYS_CTNETLINK, IPCTNL_MSG_CT_DELETE = 12, 1, 2
    NLM_F_REQUEST, NLM_F_ACK = 1, 4
    sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_NETFILTER)
    sock.bind((0, 0))
    nfgen = struct.pack("!BBH", socket.AF_INET, 0, 0)  # nfgenmsg: family, version, res_id
    header = struct.pack("=IHHII", 16 + len(nfgen), (NFNL_SUBSYS_CTNETLINK << 8) | IPCTNL_MSG_CT_DELETE,
                         NLM_F_REQUEST | NLM_F_ACK, 1, 0)
    sock.send(header + nfgen)
    reply = sock.recv(4096)
    _, kind, _, _, _ = struct.unpack("=IHHII", reply[:16])
    error = struct.unpack("=i", reply[16:20])[0] if kind == 2 else 0  # NLMSG_ERROR carries the ack
    if error != 0:
        sys.exit(f"conntrack flush failed: {os.strerror(-error)}")


def main():
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command", required=True)
    r = sub.add_parser("respond")
    r.add_argument("name")
    r.add_argument("port", type=int)
    q = sub.add_parser("probe")
    q.add_argument("--vip", required=True)
    q.add_argument("--port", type=int, required=True)
    q.add_argument("--sids", required=True, help="host1=0a01,host2=0a02")
    q.add_argument("--sid-len", type=int, required=True)
    q.add_argument("--cid-len", type=int, required=True)
    q.add_argument("--config-id", type=int, default=0)
    q.add_argument("--n", type=int, default=50)
    q.add_argument("--base-port", type=int, required=True)
    q.add_argument("--timeout", type=float, default=1.0)
    q.add_argument("--only-sid", help="only short headers for these hosts (comma-separated)")
    sub.add_parser("flush-conntrack")
    args = parser.parse_args()
    if args.command == "respond":
        respond(args.name, args.port)
    elif args.command == "probe":
        probe(args)
    else:
        flush_conntrack()


if __name__ == "__main__":
    main()
