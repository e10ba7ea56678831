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
#   * short-header packets and long-header packets whose DCID has our length go to the
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
# Runs in network and mount namespaces of its own: as root directly, as any other user inside a
# user namespace (unshare --user --map-root-user) where the kernel allows one. Cleans up
# everything it made, even on failure.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
SELF="$HERE/$(basename "${BASH_SOURCE[0]}")"
ARGUMENTS=("$@")
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
  --sid-len N             server ID length in bytes, 1-15 (default 2)
  --sid1 HEX, --sid2 HEX  server IDs of host1 and host2 (default 0a01 and 0a02, padded to --sid-len)
  --cid-len N             our server's connection ID length (default 18)
  --config-id N           config rotation codepoint, 0-6 (default 0)
  --bin-dir DIR           where h3serve, h3get and quic-netem are (default \$BIN_DIR or
                          $REPO_ROOT/.build/debug)
  --connections N         connections per scenario (default 100)
  --blob-size BYTES       size of the file each connection fetches (default 262144)
  --port N                the VIP's UDP port (default 4433)
  --no-server-id          run h3serve without --server-id (only to check the plumbing before the
                          server has the flag: its IDs then carry the unroutable codepoint)
EOF
}

MODE=real BALANCER=both NAT=stateless SID_LEN=2 SID1="" SID2="" CID_LEN=18 CONFIG_ID=0
BIN_DIR="${BIN_DIR:-$REPO_ROOT/.build/debug}" CONNECTIONS=100 BLOB_SIZE=262144
# Time bounds stretch as the Swift tests' do (QUIC_TEST_TIME_SCALE; scripts/test sets it for
# sanitizer runs, whose binaries are several times slower).
TIME_SCALE="${QUIC_TEST_TIME_SCALE:-1}"
scaled() { awk -v s="$1" -v k="$TIME_SCALE" 'BEGIN { v = s * k; printf "%d\n", (v == int(v)) ? v : int(v) + 1 }'; }
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

log() { printf 'quic-lb-hosts: [%3ds] %s\n' "$SECONDS" "$*" >&2; }
die() { printf 'quic-lb-hosts: ERROR: %s\n' "$*" >&2; exit 2; }

[[ $BALANCER =~ ^(cid|4tuple|both)$ ]] || die "--balancer is cid, 4tuple or both"
[[ $NAT =~ ^(stateless|conntrack)$ ]] || die "--nat is stateless or conntrack"
[[ $SID_LEN =~ ^([1-9]|1[0-5])$ ]] || die "--sid-len is 1 to 15 (bytes)"
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

# --- A world of its own, and tools --------------------------------------------------------------
# The script re-runs itself in network and mount namespaces of its own, so the machine's routes,
# /run/netns and /etc are never touched and two runs never meet. Root makes them directly; any
# other user inside a user namespace where it is root, where the kernel allows that. Never skip
# quietly: without either this test cannot run, and says so.
if [[ -z ${QUIC_LB_OWN_NAMESPACES:-} ]]; then
  command -v unshare >/dev/null || die "unshare is missing (util-linux); this test makes its network namespaces with it"
  WORLD=(--net --mount)
  [[ $(id -u) -eq 0 ]] || WORLD=(--user --map-root-user "${WORLD[@]}")
  reason=$(unshare "${WORLD[@]}" true 2>&1) \
    || die "needs root, or unprivileged user namespaces, to make network namespaces: unshare ${WORLD[*]} failed ($reason)"
  QUIC_LB_OWN_NAMESPACES=1 exec unshare "${WORLD[@]}" bash "$SELF" "${ARGUMENTS[@]}"
fi
# ip netns keeps its names in /run/netns: a /run of this world's own (mounts here stay here).
mount -t tmpfs tmpfs /run || die "cannot mount a /run of its own for ip netns"
for tool in nft ip ss tc; do
  command -v "$tool" >/dev/null || die "$tool is missing: run \`bash scripts/setup\` (apt-get install -y nftables iproute2)"
done
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
  disown -a 2>/dev/null || true  # no "Killed" notices for the servers stopped below
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  # Whatever still runs inside our namespaces was started by this script.
  for ns in "${NAMESPACES[@]}"; do
    for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$pid" 2>/dev/null || true; done
  done
  for ns in "${NAMESPACES[@]}"; do ip netns del "$ns" 2>/dev/null || true; done
  # KEEP_WORK=1 keeps the logs, bodies and rulesets for a post-mortem.
  if [[ -n ${KEEP_WORK:-} ]]; then log "kept $WORK"; else rm -rf "$WORK"; fi
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
#   long header (RFC 8999 §5.1):    byte 0 top bit 1; in every version the DCID length is byte 5
#                                   and the DCID starts at byte 6 → config bits at bit 112, server
#                                   ID from byte 7 (bit 120). Any type: a client's Initials carry our
#                                   ID once it has the server's first Initial, and the draft routes
#                                   every packet with a routable CID by it (§4.3, step 1)
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
  local by_cid_long="$match @th,64,1 1 @th,104,8 $CID_LEN @th,112,3 $CONFIG_ID $set_dst @th,120,$sid_bits map $sids"
  local rules=""
  if [[ $mode == cid ]]; then
    # A server ID not in the map fails the lookup, and the packet falls through to the jhash.
    rules+="$by_cid_short"$'\n'"$by_cid_long"$'\n'
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

wait_for_udp() {  # wait_for_udp NS PORT SECONDS (scaled)
  local deadline=$(( SECONDS + $(scaled "$3") ))
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
    expect(cid[f"initial_ours_{h}"] == {h: n}, f"cid: Initials to an ID of {h} reached {cid[f'initial_ours_{h}']}")
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
# Two h3serve "hosts" with different server IDs behind the VIP. Each host serves /blob: the
# line "hostN" and then random bytes of its own, so a body names the host that sent it, and
# its SHA-256 shows whether it arrived byte-exact.
H3SERVE_PIDS=()

start_server() {  # start_server N
  local i="$1" ns="$TAG-host$1" ip="10.77.2.1$1" sid args=()
  sid=$([[ $1 == 1 ]] && echo "$SID1" || echo "$SID2")
  if [[ $SERVER_ID_FLAG == 1 ]]; then
    # Plaintext mode only: nftables cannot run the AES of the encrypted modes (§5.4).
    args+=(--server-id "$sid" --quic-lb-config "$CONFIG_ID")
  fi
  # shellcheck disable=SC2206 # H3SERVE_ARGS is a word list by design, e.g. "--workers 2"
  args+=(${H3SERVE_ARGS:-})
  ip netns exec "$ns" "$BIN_DIR/h3serve" --host "$ip" --port "$PORT" --root "$WORK/www/host$i" \
    --cert "$WORK/cert.pem" --key "$WORK/key.pem" --no-tcp -q "${args[@]}" >>"$WORK/h3serve$i.log" 2>&1 &
  H3SERVE_PIDS[$i]=$!
  PIDS+=($!)
}

stop_server() {  # stop_server N: the host fails (SIGKILL: no CONNECTION_CLOSE, no goodbye)
  local pid="${H3SERVE_PIDS[$1]}"
  kill -9 "$pid" 2>/dev/null || true
  { wait "$pid" || true; } 2>/dev/null
}

# Per-host egress rate on each host's link, so that transfers last long enough for something
# to happen during them: host_rate CONNECTIONS SECONDS makes CONNECTIONS bodies, half on each
# host, take about SECONDS; host_rate off removes it.
#
# Only short-header packets (1-RTT, the bodies) are held to the rate. Long-header ones (the
# handshake: the first bit of a QUIC packet set, RFC 9000 §17.2, the byte after the 20-byte IP
# and 8-byte UDP headers) go ahead. With every packet behind one queue, which the bodies
# already begun keep full, a connection that starts late can lose its handshake flights again
# and again, its retransmissions backing off: on a busy CI runner, 4 of scenario 4's 100
# transfers had not begun after 20 s. The bodies' queue holds about 2 s, as tbf's latency
# bound did.
host_rate() {
  local i kbit queue ns
  for i in 1 2; do
    ns="$TAG-host$i"
    tc -n "$ns" qdisc del dev eth0 root 2>/dev/null || true
    [[ $1 == off ]] && continue
    kbit=$(( ($1 * (BLOB_SIZE + 6) * 8 / 2 / $2 + 999) / 1000 ))
    queue=$(( kbit * 1000 / 8 * 2 / 1250 + 64 ))  # packets of about 1,250 bytes in 2 s
    tc -n "$ns" qdisc add dev eth0 root handle 1: htb default 2
    tc -n "$ns" class add dev eth0 parent 1: classid 1:1 htb rate 10gbit quantum 60000
    tc -n "$ns" class add dev eth0 parent 1: classid 1:2 htb rate "${kbit}kbit" burst 64kb
    tc -n "$ns" qdisc add dev eth0 parent 1:2 pfifo limit "$queue"
    tc -n "$ns" filter add dev eth0 parent 1: protocol ip prio 1 u32 match u8 0x80 0x80 at 28 flowid 1:1
  done
}

# classify DIR: one JSON object counting the bodies in DIR by the host they came from.
classify() {
  "$PYTHON" - "$1" "$CONNECTIONS_IN_DIR" "$HOST1_SUM" "$HOST2_SUM" <<'EOF'
import hashlib, json, os, sys
d, n, sums = sys.argv[1], int(sys.argv[2]), {sys.argv[3]: "host1", sys.argv[4]: "host2"}
out = {"host1": 0, "host2": 0, "broken_host1": 0, "broken_host2": 0, "missing": 0}
for i in range(1, n + 1):
    path = os.path.join(d, str(i))
    if not os.path.exists(path) or os.path.getsize(path) == 0:
        out["missing"] += 1
        continue
    data = open(path, "rb").read()
    host = sums.get(hashlib.sha256(data).hexdigest())
    if host:
        out[host] += 1
    else:
        # Not byte-exact: the first line still names the host it started on.
        first = data.split(b"\n", 1)[0].decode(errors="replace")
        out["broken_" + first if first in ("host1", "host2") else "missing"] += 1
print(json.dumps(out))
EOF
}

# h3get_start NAME N URL_PREFIX [h3get options...]: one h3get in the background with N
# connections (one per host name: HTTPSession keeps one connection per name and port); the
# bodies go to $WORK/NAME/1..N. H3GET_PID is the timeout(1) in front of it.
h3get_start() {
  local name="$1" n="$2" prefix="$3"; shift 3
  local dir="$WORK/$name" args=() i
  mkdir -p "$dir"
  for i in $(seq 1 "$n"); do args+=(-o "$i" "${prefix/\{i\}/$i}"); done
  ip netns exec "$NS_C" timeout "$(scaled "${H3GET_TIMEOUT:-15}")" "$BIN_DIR/h3get" --http3-only --cacert "$WORK/cert.pem" \
    --output-dir "$dir" "$@" "${args[@]}" >"$WORK/$name.out" 2>"$WORK/$name.err" &
  H3GET_PID=$!
  PIDS+=($!)
}

h3get_finish() {  # h3get_finish NAME N: waits, then counts the bodies by host into NAME.json
  { wait "$H3GET_PID" || true; } 2>/dev/null
  CONNECTIONS_IN_DIR=$2 classify "$WORK/$1" >"$WORK/$1.json"
}

h3get_many() { h3get_start "$@"; h3get_finish "$1" "$2"; }

# gtls_start NAME G: G gtlsclient processes (ngtcp2's example client, one connection each)
# that move to a new local port 10 ms after the handshake (immediate migration, RFC 9000
# §9.2, with path validation); the bodies go to $WORK/NAME/1..G.
gtls_start() {
  local name="$1" g="$2" i
  GTLS_PIDS=()
  mkdir -p "$WORK/$name"
  for i in $(seq 1 "$g"); do
    mkdir -p "$WORK/$name/d$i"
    ip netns exec "$NS_C" timeout "$(scaled 10)" gtlsclient --exit-on-all-streams-close --no-quic-dump --no-http-dump \
      --timeout=5s --change-local-addr=10ms --download="$WORK/$name/d$i" \
      "$VIP" "$PORT" "https://lb.test:$PORT/blob" >"$WORK/$name/$i.log" 2>&1 &
    GTLS_PIDS+=($!)
    PIDS+=($!)
  done
}

gtls_finish() {  # gtls_finish NAME G: bodies by host and "validated" (path validations that succeeded)
  local name="$1" g="$2" i
  for i in "${GTLS_PIDS[@]}"; do { wait "$i" || true; } 2>/dev/null; done
  for i in $(seq 1 "$g"); do cp "$WORK/$name/d$i/blob" "$WORK/$name/$i" 2>/dev/null || true; done
  CONNECTIONS_IN_DIR=$g classify "$WORK/$name" >"$WORK/$name.bodies.json"
  # ngtcp2's client prints "Path validation against path {...} succeeded" (or "failed").
  local validated
  validated=$(cat "$WORK/$name"/*.log | grep -c '^Path validation against .* succeeded' || true)
  "$PYTHON" -c 'import json,sys; d=json.load(open(sys.argv[1])); d["validated"]=int(sys.argv[2]); print(json.dumps(d))' \
    "$WORK/$name.bodies.json" "$validated" >"$WORK/$name.json"
}

# Bodies in DIR (1..N) still arriving from host1, or not begun at all.
host1_pending() {
  local dir="$1" n="$2" i f pending=0
  for i in $(seq 1 "$n"); do
    f="$dir/$i"
    if [[ ! -s $f ]]; then pending=$((pending + 1))
    elif [[ $(head -c 5 "$f") == host1 ]] && (( $(stat -c %s "$f") < BLOB_SIZE + 6 )); then pending=$((pending + 1))
    fi
  done
  echo "$pending"
}
no_host1_pending() { [[ $(host1_pending "$@") -eq 0 ]]; }

all_started() {  # all_started DIR N: every body has begun, so each names its host
  local i
  for i in $(seq 1 "$2"); do [[ -s $1/$i ]] || return 1; done
}

wait_until() {  # wait_until SECONDS COMMAND...: polls every 0.1 s; fails at the (scaled) deadline
  local deadline=$(( SECONDS + $(scaled "$1") )); shift
  until "$@"; do (( SECONDS < deadline )) || return 1; sleep 0.1; done
}


real_mode() {
  local b
  for b in h3serve h3get quic-netem; do
    [[ -x $BIN_DIR/$b ]] || die "no $BIN_DIR/$b: build it (swift build --product $b) or pass --bin-dir / BIN_DIR"
  done
  command -v gtlsclient >/dev/null || die "gtlsclient not found (Debian's ngtcp2-client; scripts/setup installs it)"
  command -v openssl >/dev/null || die "openssl not found"
  # The help is read whole first: with pipefail, `grep -q` closing the pipe early would make a
  # slow writer (a sanitizer build) die of SIGPIPE and the check fail falsely.
  local help
  help=$("$BIN_DIR/h3serve" --help 2>&1 || true)
  if [[ $SERVER_ID_FLAG == 1 && $help != *--server-id* ]]; then
    die "$BIN_DIR/h3serve has no --server-id option yet (issue 14, QUIC-LB connection IDs); --no-server-id runs the plumbing only"
  fi
  local started=$SECONDS n=$CONNECTIONS i

  # Certificate for the VIP and the names the clients use.
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 \
    -subj "/CN=lb.test" -addext "subjectAltName=DNS:lb.test,DNS:*.lb.test,IP:$VIP" \
    -keyout "$WORK/key.pem" -out "$WORK/cert.pem" >/dev/null 2>&1 || die "openssl could not make a certificate"
  for i in 1 2; do
    mkdir -p "$WORK/www/host$i"
    { echo "host$i"; head -c "$BLOB_SIZE" /dev/urandom; } >"$WORK/www/host$i/blob"
  done
  HOST1_SUM=$(sha256sum "$WORK/www/host1/blob" | cut -d' ' -f1)
  HOST2_SUM=$(sha256sum "$WORK/www/host2/blob" | cut -d' ' -f1)
  # Names for the client, mounted over /etc/hosts and /etc/resolv.conf in this script's own
  # mount namespace (the servers and the balancer look up no names):
  # cI.lb.test is the VIP, rI.lb.test is quic-netem on the loopback (distinct names, distinct
  # connections; one address, because quic-netem answers from 127.0.0.1 and h3get's socket is
  # connected).
  # No DNS server: a look-up for an HTTPS record fails at once instead of timing out.
  { echo "127.0.0.1 localhost"; echo "$VIP lb.test"
    for i in $(seq 1 "$n"); do echo "$VIP c$i.lb.test"; echo "127.0.0.1 r$i.lb.test"; done
  } >"$WORK/hosts"
  echo "nameserver 127.0.0.1" >"$WORK/resolv.conf"
  mount --bind "$WORK/hosts" /etc/hosts || die "cannot mount the client's names over /etc/hosts"
  # A resolv.conf that links into /run points into the empty /run mounted above.
  local resolv
  resolv=$(readlink -m /etc/resolv.conf)
  [[ -e $resolv ]] || { mkdir -p "$(dirname "$resolv")"; : >"$resolv"; }
  mount --bind "$WORK/resolv.conf" /etc/resolv.conf || die "cannot mount a resolv.conf over /etc/resolv.conf"

  start_server 1
  start_server 2
  wait_for_udp "$NS_1" "$PORT" 30
  wait_for_udp "$NS_2" "$PORT" 30
  # h3serve says how long its connection IDs are; the long-header rule matches on that length.
  local said
  said=$(grep -o 'QUIC-LB: .* \([0-9]*\)-byte connection IDs' "$WORK/h3serve1.log" | grep -o '[0-9]*-byte' | grep -o '[0-9]*' || true)
  if [[ -n $said && $said != "$CID_LEN" ]]; then
    log "h3serve issues $said-byte connection IDs; the balancer's long-header rule follows"
    CID_LEN=$said
  fi
  local url="https://c{i}.lb.test:$PORT/blob"

  local first=cid
  [[ $BALANCER == 4tuple ]] && first=4tuple
  load_balancer "$first"

  # 1. N connections spread over both hosts.
  log "1. $n connections"
  h3get_many spread "$n" "$url"

  # 2a. Every connection migrates to a new port once its handshake is confirmed (RFC 9000
  # §9.2). A slower link keeps the bodies in flight across the move.
  log "2a. $n connections migrate (h3get --migrate)"
  host_rate "$n" 2
  h3get_many migrate "$n" "$url" --migrate -v
  local migrated
  migrated=$(grep -c 'migrated to' "$WORK/migrate.err" || true)

  # 2b. gtlsclient (ngtcp2's example client) moves to a new local port after the handshake.
  local g=$(( n < 10 ? n : 10 ))
  log "2b. $g gtlsclient --change-local-addr"
  gtls_start gtls "$g"
  gtls_finish gtls "$g"

  # 2c. NAT rebinding: quic-netem gives each client a new source port every 0.2 s (RFC 9000
  # §9.3); the server sees a new 4-tuple with the same connection ID. A slow link makes each
  # transfer last through several rebinds. The rate's queue on a busy runner holds the server's
  # packets longer than 0.2 s, so they reach the relay after the port they were sent to was
  # replaced: as a NAT's old mapping lives until it times out, the relay still delivers them
  # for 2 s (the queue's bound). Closed at once, every reply can land on a dead port while each
  # client retransmission makes a new one, and the connection starves (a relay artefact, not
  # a NAT's behaviour).
  local relay=$(( PORT + 1 ))
  log "2c. $g connections through quic-netem --rebind-every 0.2 --rebind-linger 2"
  ip netns exec "$NS_C" "$BIN_DIR/quic-netem" --listen "0.0.0.0:$relay" --upstream "$VIP:$PORT" \
    --rebind-every 0.2 --rebind-linger 2 >"$WORK/netem.out" 2>"$WORK/netem.err" &
  local netem=$!
  PIDS+=($netem)
  wait_for_udp "$NS_C" "$relay" 10
  host_rate "$g" 2
  # The rate makes the transfers last about 2 s; the bound is for a loaded 2-core runner, where
  # debug builds of h3get and the relay share the cores with the rest of the suite.
  H3GET_TIMEOUT=30 h3get_many rebind "$g" "https://r{i}.lb.test:$relay/blob"
  kill -INT "$netem" 2>/dev/null || true
  { wait "$netem" || true; } 2>/dev/null
  host_rate off
  local rebinds
  rebinds=$(grep -o 'rebinds: [0-9]*' "$WORK/netem.out" "$WORK/netem.err" | grep -o '[0-9]*$' | head -1 || true)

  # 3. Negative control: the same migrations through a balancer that hashes only the 4-tuple.
  # h3get validates the new path before it moves (and stays put when that fails); gtlsclient
  # moves at once, so its connection breaks.
  local control_migrated=null
  if [[ $BALANCER == both ]]; then
    load_balancer 4tuple
    log "3. negative control: $n h3get and $g gtlsclient connections migrate through the 4-tuple balancer"
    host_rate "$n" 2
    h3get_start control "$n" "$url" --migrate -v
    gtls_start gtls-control "$g"
    h3get_finish control "$n"
    gtls_finish gtls-control "$g"
    host_rate off
    control_migrated=$(grep -c 'migrated to' "$WORK/control.err" || true)
    load_balancer cid
  fi

  # 4. Host 2 fails in the middle of N transfers; host 1's connections must not notice.
  # All N run at once, on links slowed so that the bodies would take 30 s: once every body
  # has begun (so each names its host), host2's are still in flight however long starting
  # them took on a busy machine. (With h3get's default of 50 at a time and 3 s, the second 50
  # began only as the first ended, and a slow start let host2's all end before the kill.)
  # Host2 is killed, the links are freed, the script waits for host1's bodies to finish and
  # stops h3get, whose host2 connections would otherwise wait for their idle timeout.
  log "4. host2 stops during $n transfers"
  host_rate "$n" 30
  H3GET_TIMEOUT=60 h3get_start stop "$n" "$url" --parallel-max "$n"
  wait_until 20 all_started "$WORK/stop" "$n" || log "4. not every transfer began within 20 s"
  stop_server 2
  host_rate off
  wait_until 15 no_host1_pending "$WORK/stop" "$n" || log "4. host1 transfers still pending after 15 s"
  # SIGKILL: a test runner may start this script with SIGTERM blocked or ignored, and its
  # children inherit that. h3get runs under timeout(1), so the signal goes to both.
  pkill -KILL -P "$H3GET_PID" 2>/dev/null || true
  kill -KILL "$H3GET_PID" 2>/dev/null || true
  h3get_finish stop "$n"
  host_rate off

  "$PYTHON" - "$BALANCER" "$NAT" "$n" "$g" "$migrated" "$control_migrated" "${rebinds:-0}" \
    "$(( SECONDS - started ))" "$WORK" <<'EOF'
import json, os, sys
balancer, nat, n, g = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
migrated = int(sys.argv[5])
control_migrated = None if sys.argv[6] == "null" else int(sys.argv[6])
rebinds, seconds, work = int(sys.argv[7]), int(sys.argv[8]), sys.argv[9]
load = lambda name: json.load(open(f"{work}/{name}.json")) if os.path.exists(f"{work}/{name}.json") else None
spread, migrate, gtls, rebind, stop = (load(x) for x in ("spread", "migrate", "gtls", "rebind", "stop"))
control, gtls_control = load("control"), load("gtls-control")
failures = []
def expect(ok, what):
    if not ok: failures.append(what)
exact = lambda r: r["host1"] + r["host2"]
about_half = lambda broken, total: total // 4 <= broken <= 3 * total // 4
expect(exact(spread) == n and min(spread["host1"], spread["host2"]) >= n // 5,
       f"1. {n} connections, spread over both hosts: {spread}")
if balancer != "4tuple":
    expect(exact(migrate) == n and migrated == n, f"2a. h3get --migrate: {migrated} of {n} migrated, bodies {migrate}")
    expect(exact(gtls) == g and gtls["validated"] == g, f"2b. gtlsclient --change-local-addr: {gtls}")
    expect(exact(rebind) == g and rebinds >= g, f"2c. NAT rebinding through quic-netem ({rebinds} rebinds): bodies {rebind}")
else:
    expect(about_half(n - migrated, n), f"3. 4-tuple balancer: {n - migrated} of {n} migrations broke, expected about half")
if control_migrated is not None:
    expect(about_half(n - control_migrated, n),
           f"3. negative control: {n - control_migrated} of {n} migrations broke, expected about half")
# 4. Every connection that began on host1 ended byte-exact; the stop hit host2's in flight.
expect(stop["broken_host1"] == 0 and stop["missing"] == 0 and stop["host1"] >= n // 5 and stop["broken_host2"] > 0,
       f"4. host2 stopped: {stop}")
ok = min(migrated, exact(migrate))
summary = {
    "balancer": balancer, "nat": nat, "connections": n,
    "host1": spread["host1"], "host2": spread["host2"],
    "migrated_ok": ok, "migrated_broken": n - ok, "migrate_bodies": migrate,
    "gtlsclient": gtls,
    "rebinding": dict(rebind, rebinds=rebinds),
    "control_4tuple": None if control_migrated is None else {
        "h3get": {"migrated_ok": control_migrated, "migrated_broken": n - control_migrated, "bodies": control},
        "gtlsclient": gtls_control},
    "host2_stopped": stop, "seconds": seconds, "pass": not failures,
}
for f in failures: print("quic-lb-hosts: FAILED:", f, file=sys.stderr)
print(json.dumps(summary))
sys.exit(1 if failures else 0)
EOF
}

make_topology
log "namespaces $NS_C, $NS_L, $NS_1, $NS_2; VIP $VIP:$PORT; server IDs host1=$SID1 host2=$SID2"
case "$MODE" in
  selftest) selftest ;;
  real) real_mode ;;
esac
