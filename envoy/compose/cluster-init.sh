#!/bin/sh
# The one-shot `cluster-init` of profile `cluster` (envoy/docker-compose.yml):
# joins the masters cluster-1..3 (ports 7000-7002) and the replicas
# cluster-replica-1..3 (7003-7005) into one Valkey Cluster, then exits 0 once
# every node reports cluster_state:ok. Runs in the valkey image (valkey-cli,
# sed). A cluster already formed is left as it is.
#
# - CLUSTER MEET by address: cluster-1 meets every node, and every node meets
#   cluster-1, so that each receives a MEET and learns its own address on the
#   compose network (the container's IP, which the slot map then reports and
#   Envoy connects to; no cluster-announce-ip is needed on one network).
# - CLUSTER ADDSLOTSRANGE: 0-5460, 5461-10922, 10923-16383 on cluster-1..3.
# - CLUSTER REPLICATE: cluster-replica-N follows cluster-N.
set -eu
MASTERS="cluster-1:7000 cluster-2:7001 cluster-3:7002"
REPLICAS="cluster-replica-1:7003 cluster-replica-2:7004 cluster-replica-3:7005"
RANGES="0 5460|5461 10922|10923 16383"

cli() {
  node=$1
  shift
  valkey-cli -h "${node%:*}" -p "${node#*:}" "$@" 2>/dev/null
}

# until TENTHS CMD...: runs CMD every 0.1 s until it succeeds, at most TENTHS times.
until_ok() {
  tries=$1
  shift
  while ! "$@"; do
    tries=$((tries - 1))
    if [ "$tries" -le 0 ]; then
      echo "cluster-init: gave up waiting for: $*" >&2
      exit 1
    fi
    sleep 0.1
  done
}

answers() { [ "$(cli "$1" PING)" = PONG ]; }
says_ok() { [ "$(cli "$@")" = OK ]; }
# The node's address on this network: the local end of a connection to it.
address() { cli "$1" CLIENT INFO | sed -n 's/.* laddr=\([0-9.]*\):.*/\1/p'; }
formed() { cli "$1" CLUSTER INFO | grep -q '^cluster_state:ok'; }
knows_all() { [ "$(cli "$1" CLUSTER NODES | grep -c ' connected')" -eq 6 ]; }

for node in $MASTERS $REPLICAS; do
  until_ok 300 answers "$node"
done
if formed cluster-1:7000 && knows_all cluster-1:7000; then
  echo "cluster-init: the cluster is formed already"
  exit 0
fi

first_ip=$(address cluster-1:7000)
for node in $MASTERS $REPLICAS; do
  [ "$node" = cluster-1:7000 ] && continue
  ip=$(address "$node")
  [ -n "$ip" ] || { echo "cluster-init: no address for $node" >&2; exit 1; }
  until_ok 50 says_ok cluster-1:7000 CLUSTER MEET "$ip" "${node#*:}"
  until_ok 50 says_ok "$node" CLUSTER MEET "$first_ip" 7000
done

i=1
for node in $MASTERS; do
  range=$(echo "$RANGES" | cut -d'|' -f"$i")
  # shellcheck disable=SC2086 # the range is two words
  until_ok 50 says_ok "$node" CLUSTER ADDSLOTSRANGE $range
  i=$((i + 1))
done

i=1
for replica in $REPLICAS; do
  master=$(echo "$MASTERS" | cut -d' ' -f"$i")
  id=$(cli "$master" CLUSTER MYID)
  # OK once the replica has heard of its master through the others.
  until_ok 300 says_ok "$replica" CLUSTER REPLICATE "$id"
  i=$((i + 1))
done

for node in $MASTERS $REPLICAS; do
  until_ok 300 formed "$node"
  until_ok 300 knows_all "$node"
done
echo "cluster-init: 3 masters (slots 0-5460, 5461-10922, 10923-16383), each with a replica:"
cli cluster-1:7000 CLUSTER NODES | cut -d' ' -f2,3,9
