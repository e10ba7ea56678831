#!/usr/bin/env bash
# Tests/Interop/netns/quic-lb-hosts.sh — QUIC-LB routing across hosts, on one machine (issue 14).
#
# The "hosts" are network namespaces this script makes (iproute2: ip netns, veth, a bridge) and
# the load balancer is the kernel's own nftables in a namespace of its own. Nothing home-made
# sits in the data path.
#
#      client ──veth── lb ──bridge br0──┬── host1   server ID 0a01
#   10.77.0.2/.3      VIP 10.77.1.1     └── host2   server ID 0a02
#
# The balancer (draft-ietf-quic-load-balancers-21):
#   * short-header packets and QUIC v1 Handshake packets whose DCID has our length go to the
#     host named by the server-ID bytes of the DCID (plaintext mode, §5.3: DCID[0] is the first
#     octet, §3; DCID[1 ..< 1+sidLen] is the server ID);
#   * everything else (Initials, 0-RTT, unknown server IDs, the unroutable codepoint 0b111 of
#     §3.2) goes by a jhash of the 4-tuple;
#   * --balancer 4tuple (the negative control) sends everything by the jhash.
#
# Modes:
#   --selftest   python stand-ins (a UDP responder per host, QUIC-shaped datagrams from the
#                client) prove the rules without our server: server IDs reach their host,
#                Initials spread, and after a port change short headers stay on their host
#                while the 4-tuple balancer splits them about half and half.
#   (default)    h3serve --server-id on each host; h3get, gtlsclient and quic-netem clients.
#
# Output: progress on stderr, one JSON line on stdout. Exit 0 when every expectation held,
# 1 when one failed, 2 on a set-up problem (no privileges for namespaces, missing tools).
# Needs root (CAP_SYS_ADMIN and CAP_NET_ADMIN). Cleans up everything it made, even on failure.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "$HERE/../../.." && pwd)"
PROBE="$HERE/quic_lb_probe.py"
PYTHON="${PYTHON:-python3}"

usage() {
  cat <<EOF
usage: $0 [--selftest] [options]
  --selftest              stand-in servers and hand-made packets (no Swift binaries needed)
  --balancer MODE         cid (QUIC-LB routing), 4tuple (negative control) or both (default:
                          the cid scenarios, then the migration again through the 4-tuple balancer)
  --nat KIND              stateless (default): nftables rewrites every packet on its own
                          (ip daddr set / ip saddr set, notrack), as Katran or Maglev do;
                          conntrack: dnat with connection tracking, decided once per flow
  --sid-len N             server ID length in bytes, 1-8 (default 2)
  --sid1 HEX, --sid2 HEX  server IDs of host1 and host2 (default 0a01 and 0a02, padded to --sid-len)
  --cid-len N             our server's connection ID length (default 18)
  --config-id N           config rotation codepoint, 0-6 (default 0)
  --quic-lb-key HEX       pass to h3serve (encrypted mode, §5.4.1); the balancer then needs the
                          key too, which nftables cannot use: only for a server-side check
  --bin-dir DIR           where h3serve, h3get and quic-netem are (default \$BIN_DIR or
                          $REPO_ROOT/.build/debug)
  --connections N         connections per scenario (default 100)
  --blob-size BYTES       size of the file each connection fetches (default 1048576)
  --port N                the VIP's UDP port (default 4433)
  --no-server-id          run h3serve without --server-id (only to check the plumbing before the
                          server has the flag: its IDs then carry the unroutable codepoint)
EOF
}

MODE=real BALANCER=both NAT=stateless SID_LEN=2 SID1="" SID2="" CID_LEN=18 CONFIG_ID=0
LB_KEY="" BIN_DIR="${BIN_DIR:-$REPO_ROOT/.build/debug}" CONNECTIONS=100 BLOB_SIZE=1048576
PORT=4433 SERVER_ID_FLAG=1
while [[ $# -gt 0 ]]; do
  case "$1" in
    --selftest) MODE=selftest ;;
    --balancer) BALANCER="$2"; shift ;;
    --nat) NAT="$2"; shift ;;
    --sid-len) SID_LEN="$2"; shift ;;
    --sid1) SID1="$2"; shift ;;
    --sid2) SID2="$2"; shift ;;
    --cid-len) CID_LEN="$2"; shift ;;
    --config-id) CONFIG_ID="$2"; shift ;;
    --quic-lb-key) LB_KEY="$2"; shift ;;
    --bin-dir) BIN_DIR="$2"; shift ;;
    --connections) CONNECTIONS="$2"; shift ;;
    --blob-size) BLOB_SIZE="$2"; shift ;;
    --port) PORT="$2"; shift ;;
    --no-server-id) SERVER_ID_FLAG=0 ;;
    -h|--help) usage; exit 0 ;;
    *) usage >&2; exit 2 ;;
  esac
  shift
done

log() { printf 'quic-lb-hosts: %s\n' "$*" >&2; }
die() { printf 'quic-lb-hosts: ERROR: %s\n' "$*" >&2; exit 2; }

[[ $BALANCER =~ ^(cid|4tuple|both)$ ]] || die "--balancer is cid, 4tuple or both"
[[ $NAT =~ ^(stateless|conntrack)$ ]] || die "--nat is stateless or conntrack"
[[ $SID_LEN =~ ^[1-8]$ ]] || die "--sid-len is 1 to 8 (bytes)"
[[ $CONFIG_ID =~ ^[0-6]$ ]] || die "--config-id is 0 to 6 (0b111 is the unroutable codepoint, §3.2)"
(( CID_LEN >= SID_LEN + 2 && CID_LEN <= 20 )) || die "--cid-len must hold the first octet, the server ID and a nonce, and be at most 20"
# Default server IDs: 0x0a, then the host number in the remaining bytes.
pad_sid() { printf '0a%0*x' $(( 2 * (SID_LEN - 1) )) "$1"; }
[[ $SID_LEN -eq 1 ]] && { SID1=${SID1:-01}; SID2=${SID2:-02}; }
SID1=${SID1:-$(pad_sid 1)} SID2=${SID2:-$(pad_sid 2)}
for sid in "$SID1" "$SID2"; do
  [[ ${#sid} -eq $(( 2 * SID_LEN )) && $sid =~ ^[0-9a-fA-F]+$ ]] || die "server ID '$sid' is not $SID_LEN bytes of hex"
done
[[ ${SID1,,} != "${SID2,,}" ]] || die "the two hosts need different server IDs"

# --- Privileges and tools ------------------------------------------------------------------------
# Never skip quietly: without the privileges this test cannot run, and says so.
[[ $(id -u) -eq 0 ]] || die "needs root (CAP_SYS_ADMIN and CAP_NET_ADMIN) to create network namespaces; this test cannot run here"
if ! command -v nft >/dev/null || ! command -v ip >/dev/null || ! command -v ss >/dev/null; then
  log "installing nftables and iproute2"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends nftables iproute2 >/dev/null 2>&1 \
    || { DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null && \
         DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends nftables iproute2 >/dev/null; } \
    || die "cannot install nftables and iproute2"
fi
command -v "$PYTHON" >/dev/null || die "python3 not found"

# --- Names, addresses, clean-up ------------------------------------------------------------------
TAG="qlb$$"
NS_C="$TAG-client" NS_L="$TAG-lb" NS_1="$TAG-host1" NS_2="$TAG-host2"
CLIENT_IP=10.77.0.2 CLIENT_IP2=10.77.0.3 LB_CLIENT_IP=10.77.0.1
VIP=10.77.1.1
LB_SERVER_IP=10.77.2.1 HOST1_IP=10.77.2.11 HOST2_IP=10.77.2.12
WORK="$(mktemp -d "${TMPDIR:-/tmp}/quic-lb-hosts.XXXXXX")"
NAMESPACES=()
PIDS=()

cleanup() {
  local status=$? pid ns
  trap - EXIT INT TERM
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  # Whatever still runs inside our namespaces was started by this script.
  for ns in "${NAMESPACES[@]}"; do
    for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$pid" 2>/dev/null || true; done
  done
  for ns in "${NAMESPACES[@]}"; do ip netns del "$ns" 2>/dev/null || true; done
  rm -rf "/etc/netns/$NS_C" "$WORK"
  exit "$status"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

in_ns() { local ns="$1"; shift; ip netns exec "$ns" "$@"; }
# Start background processes with ip netns exec itself (it execs the command), never through a
# function: then $! is the process to stop, not a subshell above it.

# --- Topology ------------------------------------------------------------------------------------
make_topology() {
  local ns i
  for ns in "$NS_C" "$NS_L" "$NS_1" "$NS_2"; do
    ip netns add "$ns" 2>"$WORK/netns.err" \
      || die "cannot create network namespace $ns ($(cat "$WORK/netns.err")); this test needs CAP_SYS_ADMIN and CAP_NET_ADMIN"
    NAMESPACES+=("$ns")
    ip -n "$ns" link set lo up
  done
  # Client: one link to the balancer, two addresses (the second for address changes).
  ip -n "$NS_C" link add eth0 type veth peer name client netns "$NS_L"
  ip -n "$NS_C" addr add "$CLIENT_IP/24" dev eth0
  ip -n "$NS_C" addr add "$CLIENT_IP2/24" dev eth0
  ip -n "$NS_C" link set eth0 up
  ip -n "$NS_C" route add default via "$LB_CLIENT_IP"
  # Balancer: routes between the client link and the servers' bridge; holds the VIP.
  ip -n "$NS_L" addr add "$LB_CLIENT_IP/24" dev client
  ip -n "$NS_L" link set client up
  ip -n "$NS_L" addr add "$VIP/32" dev lo
  ip -n "$NS_L" link add br0 type bridge
  ip -n "$NS_L" addr add "$LB_SERVER_IP/24" dev br0
  ip -n "$NS_L" link set br0 up
  in_ns "$NS_L" sysctl -qw net.ipv4.ip_forward=1
  # Servers: one bridge port each, default route back through the balancer.
  for i in 1 2; do
    ns="$TAG-host$i"
    ip -n "$ns" link add eth0 type veth peer name "host$i" netns "$NS_L"
    ip -n "$NS_L" link set "host$i" master br0 up
    ip -n "$ns" addr add "10.77.2.1$i/24" dev eth0
    ip -n "$ns" link set eth0 up
    ip -n "$ns" route add default via "$LB_SERVER_IP"
  done
}

# --- The balancer --------------------------------------------------------------------------------
# nftables reads the UDP payload with raw payload expressions: @th is the transport header, so
# UDP payload byte k starts at bit 64 + 8k (the UDP header is 8 bytes).
#   short header (RFC 9000 §17.3):  byte 0 top bit 0; DCID from byte 1 → config bits at bit 72,
#                                   server ID from byte 2 (bit 80)
#   Handshake (RFC 9000 §17.2.4):   byte 0 & 0xf0 == 0xe0 (form 1, fixed 1, type 2), version 1 in
#                                   bytes 1-4, DCID length in byte 5, DCID from byte 6 → config
#                                   bits at bit 112, server ID from byte 7 (bit 120)
balancer_rules() {  # balancer_rules cid|4tuple [hosts...]: the ruleset, for nft -f
  local mode="$1"; shift
  local hosts=("$@")
  local sid_bits=$(( 8 * SID_LEN )) match="ip daddr $VIP udp dport $PORT"
  local sid_map=() hash_map=() i
  for i in "${!hosts[@]}"; do
    case "${hosts[$i]}" in
      host1) sid_map+=("0x$SID1 : $HOST1_IP") ;;
      host2) sid_map+=("0x$SID2 : $HOST2_IP") ;;
    esac
    hash_map+=("$i : $([[ ${hosts[$i]} == host1 ]] && echo "$HOST1_IP" || echo "$HOST2_IP")")
  done
  local sids="{ $(IFS=,; echo "${sid_map[*]}") }"
  # jhash of the 4-tuple; the seed is fixed so a run repeats.
  local by_tuple="jhash ip saddr . udp sport . ip daddr . udp dport mod ${#hosts[@]} seed 0x51c0 map { $(IFS=,; echo "${hash_map[*]}") }"
  local set_dst
  if [[ $NAT == stateless ]]; then set_dst="ip daddr set"; else set_dst="dnat to"; fi
  local by_cid_short="$match @th,64,1 0 @th,72,3 $CONFIG_ID $set_dst @th,80,$sid_bits map $sids"
  local by_cid_handshake="$match @th,64,4 0xe @th,72,32 1 @th,104,8 $CID_LEN @th,112,3 $CONFIG_ID $set_dst @th,120,$sid_bits map $sids"
  local rules=""
  if [[ $mode == cid ]]; then
    # A server ID not in the map fails the lookup, and the packet falls through to the jhash.
    rules+="$by_cid_short"$'\n'"$by_cid_handshake"$'\n'
  fi
  rules+="$match $set_dst $by_tuple"
  if [[ $NAT == stateless ]]; then
    # Every packet is decided on its own: no flow state, so a migrated or rebound client is
    # routed by what its packets carry (the design the draft assumes, §1).
    cat <<EOF
table ip quic_lb {
  chain prerouting {
    type filter hook prerouting priority raw; policy accept;
    $match notrack
    ip saddr { $HOST1_IP, $HOST2_IP } udp sport $PORT notrack
$rules
  }
  chain postrouting {
    type filter hook postrouting priority srcnat; policy accept;
    ip saddr { $HOST1_IP, $HOST2_IP } udp sport $PORT ip saddr set $VIP
  }
}
EOF
  else
    # dnat is decided on a flow's first packet; conntrack un-NATs the replies.
    cat <<EOF
table ip quic_lb {
  chain prerouting {
    type nat hook prerouting priority dstnat; policy accept;
$rules
  }
}
EOF
  fi
}

load_balancer() {  # load_balancer cid|4tuple [hosts...]
  local mode="$1"; shift
  [[ $# -gt 0 ]] || set -- host1 host2
  balancer_rules "$mode" "$@" >"$WORK/balancer.nft"
  { in_ns "$NS_L" nft delete table ip quic_lb 2>/dev/null || true; }
  in_ns "$NS_L" nft -f "$WORK/balancer.nft" || die "nft rejected the ruleset: $(cat "$WORK/balancer.nft")"
  # A new policy must not inherit decisions conntrack made under the old one.
  [[ $NAT == conntrack ]] && in_ns "$NS_L" "$PYTHON" "$PROBE" flush-conntrack
  log "balancer: $mode ($NAT) for $*"
}

wait_for_udp() {  # wait_for_udp NS PORT SECONDS
  local deadline=$(( SECONDS + $3 ))
  until in_ns "$1" ss -Hlun "sport = :$2" | grep -q .; do
    (( SECONDS < deadline )) || die "nothing listens on UDP port $2 in $1 after $3 s"
    sleep 0.1
  done
}

# --- Self-test with stand-ins --------------------------------------------------------------------
selftest() {
  local n=$CONNECTIONS i
  for i in 1 2; do
    ip netns exec "$TAG-host$i" "$PYTHON" "$PROBE" respond "host$i" "$PORT" &
    PIDS+=($!)
    eval "RESPONDER$i=$!"
  done
  wait_for_udp "$NS_1" "$PORT" 10
  wait_for_udp "$NS_2" "$PORT" 10
  local probe=(in_ns "$NS_C" "$PYTHON" "$PROBE" probe --vip "$VIP" --port "$PORT"
    --sids "host1=$SID1,host2=$SID2" --sid-len "$SID_LEN" --cid-len "$CID_LEN" --config-id "$CONFIG_ID")
  # Each probe run takes its source ports from its own range, so none meets an old flow.
  load_balancer cid
  "${probe[@]}" --n "$n" --base-port 20000 >"$WORK/cid.json"
  load_balancer 4tuple
  "${probe[@]}" --n "$n" --base-port 30000 >"$WORK/4tuple.json"
  # Stop host2: host1's server ID still reaches host1, host2's reaches nothing. Then the
  # operator drains host2 from the balancer: its server ID falls through to the jhash (§3.2's
  # fallback), which now names host1 only.
  kill "$RESPONDER2"; wait "$RESPONDER2" 2>/dev/null || true
  load_balancer cid
  "${probe[@]}" --n 20 --base-port 40000 --timeout 0.3 --only-sid host1,host2 >"$WORK/stopped.json"
  load_balancer cid host1
  "${probe[@]}" --n 20 --base-port 41000 --timeout 0.3 --only-sid host1,host2 >"$WORK/drained.json"
  "$PYTHON" - "$n" "$NAT" "$WORK/cid.json" "$WORK/4tuple.json" "$WORK/stopped.json" "$WORK/drained.json" <<'EOF'
import json, sys
n, nat = int(sys.argv[1]), sys.argv[2]
cid, tuple4, stopped, drained = (json.load(open(p)) for p in sys.argv[3:7])
failures = []
def expect(ok, what):
    if not ok: failures.append(what)
def spread(counts, what):
    expect(all(counts.get(h, 0) >= n // 5 for h in ("host1", "host2")), f"{what} not spread over both hosts: {counts}")
for h in ("host1", "host2"):
    expect(cid[f"short_{h}"] == {h: n}, f"cid: short headers for {h} reached {cid[f'short_{h}']}")
    expect(cid[f"handshake_{h}"] == {h: n}, f"cid: Handshake packets for {h} reached {cid[f'handshake_{h}']}")
for key in ("initial", "short_unknown_sid", "short_unroutable_config", "handshake_other_length"):
    spread(cid[key], f"cid: {key}")
expect(cid["migration"] == {"ok": n, "broken": 0, "lost": 0}, f"cid: migration {cid['migration']}")
spread(tuple4["short_host1"], "4tuple: short headers for host1")
m = tuple4["migration"]
expect(m["lost"] == 0 and n // 4 <= m["broken"] <= 3 * n // 4, f"4tuple: migration should break about half: {m}")
expect(stopped["short_host1"] == {"host1": 20}, f"host2 stopped: host1's packets reached {stopped['short_host1']}")
expect(stopped["short_host2"] == {"none": 20}, f"host2 stopped: host2's packets got {stopped['short_host2']}")
expect(drained["short_host1"] == {"host1": 20}, f"host2 drained: host1's packets reached {drained['short_host1']}")
expect(drained["short_host2"] == {"host1": 20}, f"host2 drained: host2's packets reached {drained['short_host2']}")
expect(all(r["wrong_source"] == 0 for r in (cid, tuple4, stopped, drained)), "replies did not come from the VIP")
for f in failures: print("quic-lb-hosts: FAILED:", f, file=sys.stderr)
print(json.dumps({"mode": "selftest", "nat": nat, "connections": n, "cid": cid, "4tuple": tuple4,
                  "host2_stopped": stopped, "host2_drained": drained, "pass": not failures}))
sys.exit(1 if failures else 0)
EOF
}

# --- Real mode -----------------------------------------------------------------------------------
real_mode() { die "the real mode is not written yet; use --selftest"; }

make_topology
log "namespaces $NS_C, $NS_L, $NS_1, $NS_2; VIP $VIP:$PORT; server IDs host1=$SID1 host2=$SID2"
case "$MODE" in
  selftest) selftest ;;
  real) real_mode ;;
esac
