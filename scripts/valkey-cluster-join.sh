#!/bin/sh
# valkey-cluster-join.sh MASTER[,REPLICA...] ...
#
# Joins running nodes (valkey-server --cluster-enabled yes) into one Valkey
# Cluster: one argument per master, its HOST:PORT then its replicas',
# comma-separated. Exits 0 once every node reports cluster_state:ok and knows
# every other, after printing the slots and the nodes. A cluster already
# formed is left as it is. The one bootstrap of the cluster tests
# (tests/support/cluster.rs), `make bench` (scripts/bench/cluster.py) and
# compose's `cluster-init` (envoy/compose/cluster-init.sh); the callers start
# the nodes, on ports and bus ports of their choice.
#
# - CLUSTER MEET by address, from the first master to every node and from
#   every node to it: each node receives a MEET and learns its own address
#   from it (on a compose network its container's IP, which the slot map then
#   reports). A node's address is the local end of a connection to it (CLIENT
#   INFO laddr), its bus port the one it reports for itself (CLUSTER NODES).
#   A lone master receives no MEET: start it with --cluster-announce-ip.
# - CLUSTER ADDSLOTSRANGE: the 16384 slots split evenly over the masters, in
#   the order given, as `valkey-cli --cluster create` splits them (3 masters:
#   0-5460, 5461-10922, 10923-16383).
# - CLUSTER REPLICATE: each replica follows its master, once it knows it.
#
# Commands go through $VALKEY_CLI if set, else the first of valkey-cli,
# redis-cli and scripts/lib/resp.bash (bash's /dev/tcp) found. Each wait
# polls every 0.05 s, at most $VALKEY_CLUSTER_TRIES times (600). POSIX sh:
# it also runs in the compose stand-in image's busybox.
set -eu
[ $# -gt 0 ] || { echo "usage: valkey-cluster-join.sh MASTER[,REPLICA...] ..." >&2; exit 2; }
if [ -z "${VALKEY_CLI:-}" ]; then
  VALKEY_CLI=$(command -v valkey-cli || command -v redis-cli || echo "$(dirname "$0")/lib/resp.bash")
fi
tries=${VALKEY_CLUSTER_TRIES:-600}

cli() {
  node=$1
  shift
  "$VALKEY_CLI" -h "${node%:*}" -p "${node##*:}" "$@" 2>/dev/null
}

# until_ok CMD...: runs CMD until it succeeds, at most $tries times.
until_ok() {
  left=$tries
  while ! "$@"; do
    left=$((left - 1))
    if [ "$left" -le 0 ]; then
      echo "valkey-cluster-join: gave up waiting for: $*" >&2
      exit 1
    fi
    sleep 0.05
  done
}

answers() { [ "$(cli "$1" PING)" = PONG ]; }
says_ok() { [ "$(cli "$@")" = OK ]; }
address() { cli "$1" CLIENT INFO | sed -n 's/.* laddr=\([0-9.]*\):.*/\1/p'; }
bus_port() { cli "$1" CLUSTER NODES | grep myself | sed -n 's/^[^ ]* [^ @]*@\([0-9]*\).*/\1/p'; }
formed() {
  info=$(cli "$1" CLUSTER INFO) || return 1
  case "$info" in *cluster_state:ok*) return 0 ;; *) return 1 ;; esac
}
knows_all() {
  known=$(cli "$1" CLUSTER NODES | grep -v handshake | grep -c ' connected') || true
  [ "${known:-0}" -eq "$count" ]
}

masters=""
replicas=""
follows="" # REPLICA=MASTER ...
for shard in "$@"; do
  master=${shard%%,*}
  masters="$masters $master"
  rest=${shard#"$master"}
  for replica in $(echo "${rest#,}" | tr , ' '); do
    replicas="$replicas $replica"
    follows="$follows $replica=$master"
  done
done
set -- $masters
first=$1
shards=$#
count=$(echo $masters $replicas | wc -w)

for node in $masters $replicas; do
  until_ok answers "$node"
done
if formed "$first" && knows_all "$first"; then
  echo "valkey-cluster-join: the cluster is formed already"
else
  first_ip=$(address "$first")
  first_bus=$(bus_port "$first")
  for node in $masters $replicas; do
    [ "$node" = "$first" ] && continue
    ip=$(address "$node")
    bus=$(bus_port "$node")
    [ -n "$ip" ] && [ -n "$bus" ] || { echo "valkey-cluster-join: no address for $node" >&2; exit 1; }
    until_ok says_ok "$first" CLUSTER MEET "$ip" "${node##*:}" "$bus"
    until_ok says_ok "$node" CLUSTER MEET "$first_ip" "${first##*:}" "$first_bus"
  done
  i=0
  from=0
  for master in $masters; do
    i=$((i + 1))
    to=$(((i * 16384 + shards / 2) / shards - 1))
    until_ok says_ok "$master" CLUSTER ADDSLOTSRANGE "$from" "$to"
    from=$((to + 1))
  done
  for pair in $follows; do
    id=$(cli "${pair#*=}" CLUSTER MYID)
    until_ok says_ok "${pair%%=*}" CLUSTER REPLICATE "$id"
  done
fi
for node in $masters $replicas; do
  until_ok formed "$node"
  until_ok knows_all "$node"
done
echo "valkey-cluster-join: formed (masters: $shards, replicas: $(echo $replicas | wc -w)):"
cli "$first" CLUSTER NODES | cut -d' ' -f2,3,9
