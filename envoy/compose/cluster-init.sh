#!/bin/sh
# The one-shot `cluster-init` of profile `cluster` (envoy/docker-compose.yml):
# joins the masters cluster-1..3 (ports 7000-7002), each with its replica
# cluster-replica-1..3 (7003-7005), into one Valkey Cluster, then exits 0
# once every node reports cluster_state:ok. Runs in the valkey image (sh,
# valkey-cli, sed, grep); the joining is scripts/valkey-cluster-join.sh,
# mounted at /valkey-cluster-join.sh (CLUSTER MEET both ways, so that each
# node learns its container's IP, which the slot map then reports and Envoy
# connects to; ADDSLOTSRANGE 0-5460, 5461-10922, 10923-16383; REPLICATE).
set -eu
sh /valkey-cluster-join.sh cluster-1:7000,cluster-replica-1:7003 cluster-2:7001,cluster-replica-2:7004 \
  cluster-3:7002,cluster-replica-3:7005
echo "cluster-init: 3 masters (slots 0-5460, 5461-10922, 10923-16383), each with a replica"
