#!/usr/bin/env bash
# Multi-"node" test: two network namespaces joined by a veth pair stand in
# for two machines. examples/mlp trains with -num-nodes 2 -devices 2 (two
# ranks on each "node") and must end with the same weights_sha256 as the same
# run on one node (-devices 4, loopback).
#
# Runs as root (it creates namespaces); needs iproute2, util-linux (unshare,
# nsenter), coreutils (timeout) and Go; the mpirun checks also need Open MPI.
# The addresses 10.99.0.1/24 and 10.99.0.2/24 exist only inside the
# namespaces this script creates: no traffic leaves the machine. Everything
# it creates is removed on exit, whatever the exit, and every run is bounded
# by a timeout, so a hang fails the script instead of blocking CI.
#
# Usage, from the repository root:
#   deploy/ci/netns.sh [plumbing] [tcp] [mpirun-tcp] [mpi]
# No argument runs them all. "plumbing" always runs first: a TCP echo both
# ways between the nodes. "tcp": this script launches the four ranks as
# torchrun would (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, NODE_RANK,
# MASTER_ADDR, MASTER_PORT), two in each node, tcp backend. "mpirun-tcp":
# mpirun starts them (2 slots per node), the tcp backend carries the
# gradients. "mpi": the mpi backend (build tag mpi) under mpirun, against the
# same on one node; skipped, saying why, while DDP does not take
# FULGUR_BACKEND=mpi.
#
# Environment: FULGUR_NETNS_RUN_TIMEOUT (seconds per training run, default
# 300), FULGUR_NETNS_KEEP=1 (keep the work directory and its logs),
# FULGUR_NETNS_REQUIRE_MPI=1 (fail instead of skipping the mpi check).
set -euo pipefail

run_timeout=${FULGUR_NETNS_RUN_TIMEOUT:-300}
addr=(10.99.0.1 10.99.0.2)
subnet=10.99.0.0/24
port=29500
# Small, seeded, deterministic: 20 optimizer steps of the mlp workload.
train_args=(-max-steps 20 -limit-val-batches 2 -limit-test-batches 2 -seed 7 -deterministic -no-progress-bar)

say() { printf '[netns] %s\n' "$*" >&2; }
die() {
  say "FAIL: $*"
  exit 1
}

[ "$(id -u)" = 0 ] || die "run as root: creating network namespaces needs CAP_SYS_ADMIN"
for tool in ip unshare nsenter timeout go; do
  command -v "$tool" >/dev/null || die "$tool is not installed (iproute2, util-linux, coreutils, Go)"
done
[ -f go.mod ] && [ -d examples/mlp ] || die "run from the repository root (deploy/ci/netns.sh)"

checks=("$@")
[ ${#checks[@]} -gt 0 ] || checks=(tcp mpirun-tcp mpi)
for c in "${checks[@]}"; do
  case "$c" in plumbing | tcp | mpirun-tcp | mpi) ;; *) die "unknown check $c: use plumbing, tcp, mpirun-tcp or mpi" ;; esac
done
want() {
  local c
  for c in "${checks[@]}"; do [ "$c" = "$1" ] && return 0; done
  return 1
}

# Names carry this shell's pid so two runs on one machine never collide
# (interface names are limited to 15 bytes).
ns=("fulgur$$-n0" "fulgur$$-n1")
veth=("fg$$a" "fg$$b")
work=$(mktemp -d -t fulgur-netns.XXXXXX)
pids=()    # runs started with start (each leads its own process group)
holders=() # one process per node holding its namespaces

cleanup() {
  local rc=$? p n alive
  set +e
  trap - INT TERM
  # Stop each run's process group, give it a moment, then kill what is left.
  for p in "${pids[@]}"; do kill -TERM -- "-$p" 2>/dev/null || kill -TERM "$p" 2>/dev/null; done
  for _ in 1 2 3 4 5; do
    alive=0
    for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
    [ $alive = 0 ] && break
    sleep 1
  done
  for p in "${pids[@]}"; do kill -KILL -- "-$p" 2>/dev/null || kill -KILL "$p" 2>/dev/null; done
  for n in "${ns[@]}"; do
    if ip netns list | grep -qw "$n"; then
      # Whatever still runs in our namespaces was started by this script.
      for p in $(ip netns pids "$n" 2>/dev/null); do kill -KILL "$p" 2>/dev/null; done
      ip netns del "$n" 2>/dev/null
    fi
  done
  for p in "${holders[@]}"; do kill -KILL "$p" 2>/dev/null; done
  ip link del "${veth[0]}" 2>/dev/null
  if [ "${FULGUR_NETNS_KEEP:-0}" = 1 ] || [ $rc != 0 ]; then
    say "exit $rc; logs kept in $work"
  else
    rm -rf "$work"
  fi
  exit $rc
}
trap cleanup EXIT
trap 'say "interrupted"; exit 130' INT TERM

# start CMD...: run CMD in the background under the per-run timeout
# (SIGTERM, then SIGKILL 15 s later) and record its pid. timeout leads a new
# process group holding the whole run (mpirun's children included), so one
# signal reaches all of it. The shell then waits with the wait builtin, which
# a signal interrupts at once: Ctrl-C or a CI cancel cleans up right away.
start() {
  timeout -k 15 "$run_timeout" "$@" &
  pids+=($!)
}
# finish: wait for the last start and return its exit status.
finish() { wait "${pids[-1]}"; }
# status RC: an exit status in words.
status() {
  case $1 in
    124 | 137) echo "timed out after ${run_timeout}s (FULGUR_NETNS_RUN_TIMEOUT)" ;;
    *) echo "exit status $1" ;;
  esac
}
# fail_run NAME RC LOG...: report a failed or hung run with the end of each
# of its logs (for a hang, the last thing each rank said), and stop.
fail_run() {
  local name=$1 rc=$2 f
  shift 2
  say "$name failed: $(status "$rc"); the end of each log:"
  for f in "$@"; do
    printf -- '--- %s\n' "$f" >&2
    tail -n 25 "$f" >&2 || true
  done
  exit 1
}

say "work directory $work"
say "build examples/mlp and deploy/ci/netcheck"
go build -o "$work/mlp" ./examples/mlp
go build -o "$work/netcheck" ./deploy/ci/netcheck

say "nodes ${ns[*]} joined by ${veth[*]}: ${addr[0]}/24 <-> ${addr[1]}/24"
ip netns add "${ns[0]}"
ip netns add "${ns[1]}"
ip link add "${veth[0]}" type veth peer name "${veth[1]}"
for i in 0 1; do
  ip link set "${veth[$i]}" netns "${ns[$i]}"
  ip -n "${ns[$i]}" link set lo up
  ip -n "${ns[$i]}" addr add "${addr[$i]}/24" dev "${veth[$i]}"
  ip -n "${ns[$i]}" link set "${veth[$i]}" up
done

# A node is its network namespace plus a host name of its own (so the
# collectives do not take both nodes for one host) and a /dev/shm of its own
# (so nothing passes between them through memory), held by one sleeping
# process per node that every command of that node joins with nsenter.
for i in 0 1; do
  ip netns exec "${ns[$i]}" unshare --uts --mount --propagation private \
    sh -c 'hostname "$0" && mount -t tmpfs -o size=1g tmpfs /dev/shm && exec sleep infinity' "fulgur-node$i" &
  holders+=($!)
  disown $! # killed by cleanup; no "Killed" notice
done
# $node I CMD...: run CMD on node I. A script, not a function, so that
# timeout and mpirun's remote-shell agent can run it.
node=$work/node
cat >"$node" <<EOF
#!/bin/sh
case "\$1" in 0) t=${holders[0]} ;; 1) t=${holders[1]} ;; *) echo "node: no node \$1" >&2; exit 2 ;; esac
shift
exec nsenter -t "\$t" -n -u -m -- "\$@"
EOF
chmod +x "$node"
for i in 0 1; do
  for _ in $(seq 50); do
    [ "$("$node" "$i" hostname 2>/dev/null)" = "fulgur-node$i" ] && break
    sleep 0.1
  done
  [ "$("$node" "$i" hostname)" = "fulgur-node$i" ] || die "node $i did not come up (host name $("$node" "$i" hostname))"
done

say "plumbing: TCP echo between the nodes, both ways"
for i in 0 1; do
  j=$((1 - i))
  start "$node" "$i" "$work/netcheck" -listen "${addr[$i]}:$port" -timeout 20s >"$work/netcheck$i.log" 2>&1
  "$node" "$j" "$work/netcheck" -dial "${addr[$i]}:$port" -msg "node$j->node$i" -timeout 20s >&2 ||
    die "node $j cannot reach node $i at ${addr[$i]}:$port (see $work/netcheck$i.log)"
  finish || die "node $i's echo server failed: $(cat "$work/netcheck$i.log")"
done

# sha_of FILE: the weights_sha256 of the JSON summary rank 0 printed last,
# after checking it covers 4 ranks and 20 steps.
sha_of() {
  local line
  line=$(grep '"weights_sha256"' "$1" | tail -n 1)
  [ -n "$line" ] || return 1
  case "$line" in *'"world_size":4'*) ;; *)
    say "$1: world_size is not 4: $line"
    return 1
    ;;
  esac
  case "$line" in *'"global_step":20'*) ;; *)
    say "$1: global_step is not 20: $line"
    return 1
    ;;
  esac
  printf '%s\n' "$line" | sed 's/.*"weights_sha256":"\([0-9a-f]*\)".*/\1/'
}
# expect_same NAME REF_OUT GOT_OUT
expect_same() {
  local a b
  a=$(sha_of "$2") || die "$1: no summary in $2"
  b=$(sha_of "$3") || die "$1: no summary in $3"
  [ "$a" = "$b" ] || die "$1: weights differ: one node $a, two nodes $b (logs in $work)"
  say "$1: ok, one node and two nodes both end with weights_sha256 $a"
  results+=("$1: ok")
}
results=("plumbing: ok")

FULGUR_TOKEN=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
export FULGUR_TOKEN
# The same backend on one node and on two: with "auto", one node would use
# shared memory, whose sums may round differently from the tcp ring's.
export FULGUR_BACKEND=tcp
# Short enough that a lost peer fails the run well inside run_timeout.
export FULGUR_TIMEOUT=${FULGUR_TIMEOUT:-90s}

if want tcp || want mpirun-tcp; then
  say "reference: -devices 4 on one node (DDP starts its own ranks, loopback, tcp)"
  start "$work/mlp" -devices 4 -strategy ddp "${train_args[@]}" >"$work/ref-tcp.out" 2>"$work/ref-tcp.err"
  finish || fail_run "the one-node reference run" $? "$work/ref-tcp.err"
fi

if want tcp; then
  say "tcp: ranks 0,1 on node 0 and 2,3 on node 1, torchrun-style variables, MASTER_ADDR=${addr[0]}, FULGUR_SOCKET_IFNAME=the node's veth"
  logs=()
  for r in 0 1 2 3; do
    i=$((r / 2))
    start "$node" "$i" env RANK=$r WORLD_SIZE=4 LOCAL_RANK=$((r % 2)) LOCAL_WORLD_SIZE=2 NODE_RANK=$i \
      MASTER_ADDR="${addr[0]}" MASTER_PORT=$port FULGUR_SOCKET_IFNAME="${veth[$i]}" \
      "$work/mlp" -num-nodes 2 -devices 2 -strategy ddp "${train_args[@]}" \
      >"$work/tcp-rank$r.out" 2>"$work/tcp-rank$r.err"
    logs+=("$work/tcp-rank$r.err")
  done
  rc=0
  for p in "${pids[@]: -4}"; do wait "$p" || rc=$?; done
  [ $rc = 0 ] || fail_run "the tcp two-node run" $rc "${logs[@]}"
  expect_same tcp "$work/ref-tcp.out" "$work/tcp-rank0.out"
fi

# mpirun reaches node 1 through this agent instead of ssh: "HOST COMMAND"
# becomes COMMAND run on the node that owns HOST's address.
cat >"$work/nsrsh" <<EOF
#!/bin/sh
while [ \$# -gt 0 ]; do case "\$1" in -*) shift ;; *) break ;; esac; done
host=\$1; shift
case "\$host" in
  ${addr[0]}) i=0 ;;
  ${addr[1]}) i=1 ;;
  *) echo "nsrsh: unknown host \$host" >&2; exit 1 ;;
esac
exec "$node" "\$i" /bin/sh -c "\$*"
EOF
chmod +x "$work/nsrsh"
printf '%s slots=2\n%s slots=2\n' "${addr[0]}" "${addr[1]}" >"$work/hosts"
printf '%s slots=4\n' "${addr[0]}" >"$work/hosts-one"

# mpirun_on HOSTFILE OUT ARGS...: four ranks from mpirun on node 0, node 1
# reached through nsrsh; ARGS are mpirun's -x exports, then the program.
mpirun_on() {
  local hosts=$1 out=$2
  shift 2
  start "$node" 0 mpirun --allow-run-as-root -np 4 --hostfile "$hosts" --map-by slot \
    --mca plm_rsh_agent "$work/nsrsh" --mca oob_tcp_if_include "$subnet" \
    --mca btl tcp,self,vader --mca btl_tcp_if_include "$subnet" \
    "$@" >"$out" 2>"${out%.out}.err"
  finish
}

if want mpirun-tcp; then
  command -v mpirun >/dev/null || die "mpirun-tcp needs Open MPI (apt-get install openmpi-bin)"
  say "mpirun-tcp: mpirun starts 2+2 ranks across the nodes, tcp backend"
  mpirun_on "$work/hosts" "$work/mpirun-tcp.out" \
    -x FULGUR_TOKEN -x FULGUR_BACKEND -x FULGUR_TIMEOUT -x MASTER_ADDR="${addr[0]}" -x MASTER_PORT=$port \
    "$work/mlp" -num-nodes 2 -devices 2 -strategy ddp "${train_args[@]}" ||
    fail_run "mpirun-tcp" $? "$work/mpirun-tcp.err"
  expect_same mpirun-tcp "$work/ref-tcp.out" "$work/mpirun-tcp.out"
fi

if want mpi; then
  if [ ! -d strategy/collective/mpi ]; then
    say "mpi: SKIPPED: this tree has no strategy/collective/mpi backend yet"
    [ "${FULGUR_NETNS_REQUIRE_MPI:-0}" = 1 ] && die "mpi is required (FULGUR_NETNS_REQUIRE_MPI=1)"
    results+=("mpi: SKIPPED (no backend)")
  else
    command -v mpirun >/dev/null || die "mpi needs Open MPI (apt-get install openmpi-bin libopenmpi-dev)"
    say "mpi: build with -tags mpi; 4 ranks on node 0 against 2+2 across the nodes"
    go build -tags mpi -o "$work/mlp-mpi" ./examples/mlp
    # Does this build's DDP take the mpi backend? A one-rank run says.
    if ! RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 FULGUR_BACKEND=mpi timeout 120 "$work/mlp-mpi" -strategy ddp -fast-dev-run 1 \
      -no-progress-bar >"$work/mpi-probe.out" 2>"$work/mpi-probe.err" && grep -q FULGUR_BACKEND "$work/mpi-probe.err"; then
      say "mpi: SKIPPED: DDP does not take FULGUR_BACKEND=mpi yet: $(grep FULGUR_BACKEND "$work/mpi-probe.err" | head -n 1)"
      [ "${FULGUR_NETNS_REQUIRE_MPI:-0}" = 1 ] && die "mpi is required (FULGUR_NETNS_REQUIRE_MPI=1)"
      results+=("mpi: SKIPPED (DDP rejects FULGUR_BACKEND=mpi)")
    else
      mpirun_on "$work/hosts-one" "$work/ref-mpi.out" -x FULGUR_BACKEND=mpi -x FULGUR_TIMEOUT \
        "$work/mlp-mpi" -num-nodes 1 -devices 4 -strategy ddp "${train_args[@]}" ||
        fail_run "the mpi one-node reference" $? "$work/ref-mpi.err"
      mpirun_on "$work/hosts" "$work/mpi.out" -x FULGUR_BACKEND=mpi -x FULGUR_TIMEOUT \
        "$work/mlp-mpi" -num-nodes 2 -devices 2 -strategy ddp "${train_args[@]}" ||
        fail_run "the mpi two-node run" $? "$work/mpi.err"
      expect_same mpi "$work/ref-mpi.out" "$work/mpi.out"
    fi
  fi
fi
say "done: $(printf '%s; ' "${results[@]}")"
