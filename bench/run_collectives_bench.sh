#!/usr/bin/env bash
# strata's collectives against Open MPI's own calls (bench/mpi_collectives_bench.cc),
# 2 processes: on this host over shared memory, then across two hosts made
# of network namespaces (as tests/tools/netns_hosts.h makes them: a bridge,
# a namespace per host with an address of its own, mpirun on host 0, TCP
# only). Needs root for the namespaces; without it only the first runs.
#
#   bench/run_collectives_bench.sh          # 4 KiB to 256 MiB
#   MAX_MIB=16 bench/run_collectives_bench.sh
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build-bench}
MAX_MIB=${MAX_MIB:-256}
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DBUILD_TESTING=OFF >/dev/null
ninja -C "$BUILD_DIR" mpi_collectives_bench >/dev/null
bench=$(realpath "$BUILD_DIR/mpi_collectives_bench")
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
echo "$(date -u +%FT%TZ) $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2) load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "== one host, shared memory (btl vader)"
mpirun --oversubscribe --bind-to none --mca btl self,vader -np 2 "$bench" "$MAX_MIB"

tag=cb$$ subnet=10.254.$(($$ % 250))
dir=$(mktemp -d)
cleanup() {
  for i in 0 1; do ip netns del "$tag-$i" 2>/dev/null || true; done
  ip link del "br$tag" 2>/dev/null || true
  rm -rf "$dir"
}
trap cleanup EXIT
if ! ip link add "br$tag" type bridge 2>/dev/null; then
  echo "== across namespaces: skipped (cannot make network namespaces here)"
  exit 0
fi
ip link set "br$tag" up
for i in 0 1; do
  ip netns add "$tag-$i"
  ip link add "v$tag$i" type veth peer name eth0 netns "$tag-$i"
  ip link set "v$tag$i" master "br$tag" up
  ip netns exec "$tag-$i" ip addr add "$subnet.$((10 + i))/24" dev eth0
  ip netns exec "$tag-$i" ip link set eth0 up
  ip netns exec "$tag-$i" ip link set lo up
  echo "$tag-$i slots=1" >>"$dir/hosts"
done
cat >"$dir/agent.sh" <<'AGENT'
#!/bin/sh
host=$1; shift
[ "$1" = -x ] && shift
exec ip netns exec "$host" unshare --uts sh -c "hostname $host && $*"
AGENT
chmod +x "$dir/agent.sh"
echo "== across two namespace hosts, TCP (btl tcp) over a veth bridge"
ip netns exec "$tag-0" mpirun --hostfile "$dir/hosts" -np 2 --bind-to none \
  --mca plm_rsh_agent "$dir/agent.sh" --mca plm_rsh_no_tree_spawn 1 \
  --mca oob_tcp_if_include "$subnet.0/24" --mca btl tcp,self --mca btl_tcp_if_include "$subnet.0/24" \
  "$bench" "$MAX_MIB"
echo "$(date -u +%FT%TZ) load $(cut -d' ' -f1-3 /proc/loadavg)"
