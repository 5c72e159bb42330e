#!/usr/bin/env bash
# Multi-"node" test: two network namespaces joined by a veth pair stand in
# for two machines. examples/mlp trains with -num-nodes 2 -devices 2 (two
# ranks in each namespace) and must end with the same weights_sha256 as the
# same run on one node (-devices 4 on loopback).
#
# Runs as root (it creates namespaces); needs iproute2, util-linux (unshare),
# coreutils (timeout) and Go; the mpirun runs also need Open MPI. The private
# addresses 10.99.0.1/24 and 10.99.0.2/24 exist only inside the namespaces
# this script creates: no traffic leaves the machine. Everything it creates
# is removed on exit, whatever the exit; every run is bounded by a timeout,
# so a hang fails the script instead of blocking CI.
#
# Usage (from the repository root):
#   deploy/ci/netns.sh [plumbing] [tcp] [mpirun-tcp] [mpi]
# With no argument it runs every check it can: "plumbing" (a TCP echo
# between the namespaces), "tcp" (one launch per node, DDP starts the local
# ranks, tcp backend), "mpirun-tcp" (mpirun starts all four ranks across the
# namespaces, the tcp backend carries the gradients) and "mpi" (the mpi
# backend; needs the mpi build tag, skipped with a message when
# strategy/collective/mpi is absent).
#
# Environment: FULGUR_NETNS_RUN_TIMEOUT (seconds per training run, default
# 300), FULGUR_NETNS_KEEP=1 (keep the work directory with every log).
set -euo pipefail

run_timeout=${FULGUR_NETNS_RUN_TIMEOUT:-300}
addr0=10.99.0.1
addr1=10.99.0.2
subnet=10.99.0.0/24
port=29500
# Small, seeded, deterministic: 20 optimizer steps of the mlp workload.
train_args=(-max-steps 20 -limit-val-batches 2 -limit-test-batches 2 -seed 7 -deterministic -no-progress-bar)

say() { printf '[netns] %s\n' "$*" >&2; }
die() { say "FAIL: $*"; exit 1; }

[ "$(id -u)" = 0 ] || die "run as root: creating network namespaces needs CAP_SYS_ADMIN"
for tool in ip unshare timeout go; do
  command -v "$tool" >/dev/null || die "$tool is not installed (iproute2, util-linux, coreutils, Go)"
done
[ -f go.mod ] && [ -d examples/mlp ] || die "run from the repository root (deploy/ci/netns.sh)"

checks=("$@")
[ ${#checks[@]} -gt 0 ] || checks=(plumbing tcp mpirun-tcp mpi)
for c in "${checks[@]}"; do
  case "$c" in plumbing | tcp | mpirun-tcp | mpi) ;; *) die "unknown check $c: use plumbing, tcp, mpirun-tcp or mpi" ;; esac
done
want() { local c; for c in "${checks[@]}"; do [ "$c" = "$1" ] && return 0; done; return 1; }

# Names carry this shell's pid so two runs on one machine never collide
# (interface names are limited to 15 bytes).
ns=("fulgur$$-n0" "fulgur$$-n1")
veth=("fg$$a" "fg$$b")
work=$(mktemp -d -t fulgur-netns.XXXXXX)
pids=()

cleanup() {
  local rc=$?
  set +e
  trap - INT TERM
  # Each recorded pid leads a process group (timeout puts itself and the
  # run in one): stop the groups, give them a moment, then kill what is left.
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
# (SIGTERM, then SIGKILL 15 s later) and record its pid. timeout makes itself
# the leader of a new process group holding the whole run (re-executed ranks,
# mpirun's children), so one signal to the group reaches all of it. The
# shell waits with the wait builtin, which a signal interrupts at once, so
# Ctrl-C or a CI cancel cleans up without waiting for the run to end.
start() {
  timeout -k 15 "$run_timeout" "$@" &
  pids+=($!)
}
# finish: wait for the last start; returns its exit status (124: timed out).
finish() { wait "${pids[-1]}"; }
# status RC: an exit status in words.
status() {
  case $1 in
    124 | 137) echo "timed out after ${run_timeout}s (FULGUR_NETNS_RUN_TIMEOUT)" ;;
    *) echo "exit status $1" ;;
  esac
}

say "work directory $work"
# $node I CMD...: run CMD on "machine" I: its network namespace, its own host
# name (so the collectives do not take the two namespaces for one host) and
# its own /dev/shm (so nothing is shared between them through memory). A
# script, not a function, so that timeout and mpirun's agent can run it.
node=$work/node
cat >"$node" <<EOF
#!/bin/sh
i=\$1; shift
exec ip netns exec "fulgur$$-n\$i" unshare --uts --mount --propagation private \\
  sh -c 'hostname "\$0" && mount -t tmpfs -o size=1g tmpfs /dev/shm && exec "\$@"' "fulgur-node\$i" "\$@"
EOF
chmod +x "$node"
say "build examples/mlp and deploy/ci/netcheck"
go build -o "$work/mlp" ./examples/mlp
go build -o "$work/netcheck" ./deploy/ci/netcheck

say "namespaces ${ns[*]} joined by ${veth[*]}: $addr0/24 <-> $addr1/24"
ip netns add "${ns[0]}"
ip netns add "${ns[1]}"
ip link add "${veth[0]}" type veth peer name "${veth[1]}"
for i in 0 1; do
  ip link set "${veth[$i]}" netns "${ns[$i]}"
  ip -n "${ns[$i]}" link set lo up
  ip -n "${ns[$i]}" link set "${veth[$i]}" up
done
ip -n "${ns[0]}" addr add "$addr0/24" dev "${veth[0]}"
ip -n "${ns[1]}" addr add "$addr1/24" dev "${veth[1]}"

# Always first: the link works both ways and each node has its own name.
# The dialer retries until the listener is up, within its timeout.
{
  say "plumbing: TCP echo from node 1 to node 0 and back"
  start "$node" 0 "$work/netcheck" -listen "$addr0:$port" -timeout 20s >"$work/netcheck0.log" 2>&1
  "$node" 1 "$work/netcheck" -dial "$addr0:$port" -msg "node1->node0" -timeout 20s >&2 ||
    die "node 1 cannot reach node 0 at $addr0:$port (see $work/netcheck0.log)"
  finish || die "node 0's echo server failed: $(cat "$work/netcheck0.log")"
  start "$node" 1 "$work/netcheck" -listen "$addr1:$port" -timeout 20s >"$work/netcheck1.log" 2>&1
  "$node" 0 "$work/netcheck" -dial "$addr1:$port" -msg "node0->node1" -timeout 20s >&2 ||
    die "node 0 cannot reach node 1 at $addr1:$port (see $work/netcheck1.log)"
  finish || die "node 1's echo server failed: $(cat "$work/netcheck1.log")"
  hn=$("$node" 1 hostname)
  [ "$hn" = fulgur-node1 ] || die "node 1's host name is $hn, want fulgur-node1"
}

# summary FILE: the weights_sha256 of the JSON summary rank 0 printed last.
sha_of() {
  local line
  line=$(grep '"weights_sha256"' "$1" | tail -n 1)
  [ -n "$line" ] || return 1
  case "$line" in *'"world_size":4'*) ;; *) say "$1: world_size is not 4: $line"; return 1 ;; esac
  case "$line" in *'"global_step":20'*) ;; *) say "$1: global_step is not 20: $line"; return 1 ;; esac
  printf '%s\n' "$line" | sed 's/.*"weights_sha256":"\([0-9a-f]*\)".*/\1/'
}

# fail_run NAME RC LOG...: report a failed or hung run with the end of each
# of its logs (a hang shows there as the last thing each rank did), and stop.
fail_run() {
  local name=$1 rc=$2
  shift 2
  say "$name failed: $(status "$rc"); the end of each log:"
  for f in "$@"; do
    printf -- '--- %s\n' "$f" >&2
    tail -n 25 "$f" >&2 || true
  done
  exit 1
}

token=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
export FULGUR_TOKEN=$token

# expect_same NAME REF_LOG GOT_LOG
expect_same() {
  local a b
  a=$(sha_of "$2") || die "$1: no summary in $2"
  b=$(sha_of "$3") || die "$1: no summary in $3"
  if [ "$a" != "$b" ]; then
    die "$1: weights differ: one node $a, two nodes $b (logs in $work)"
  fi
  say "$1: ok, both runs end with weights_sha256 $a"
}

if want tcp || want mpirun-tcp; then
  say "reference: -devices 4 on one node, loopback (tcp)"
  start "$work/mlp" -devices 4 -strategy ddp "${train_args[@]}" >"$work/ref-tcp.out" 2>"$work/ref-tcp.err"
  finish || fail_run "the one-node reference run" $? "$work/ref-tcp.err"
fi

if want tcp; then
  say "tcp: one launch per node, NODE_RANK 0 and 1, MASTER_ADDR=$addr0"
  for i in 0 1; do
    start "$node" "$i" env MASTER_ADDR=$addr0 MASTER_PORT=$port NODE_RANK=$i \
      "$work/mlp" -num-nodes 2 -devices 2 -strategy ddp "${train_args[@]}" \
      >"$work/tcp-node$i.out" 2>"$work/tcp-node$i.err"
  done
  rc=0
  wait "${pids[-2]}" || rc=$?
  wait "${pids[-1]}" || rc=$?
  [ $rc = 0 ] || fail_run "the tcp two-node run" $rc "$work/tcp-node0.err" "$work/tcp-node1.err"
  expect_same tcp "$work/ref-tcp.out" "$work/tcp-node0.out"
fi

# mpirun reaches node 1 through this agent instead of ssh: "host command"
# becomes the command run on that node (its namespace, its host name).
cat >"$work/nsrsh" <<EOF
#!/bin/sh
while [ \$# -gt 0 ]; do case "\$1" in -*) shift ;; *) break ;; esac; done
host=\$1; shift
case "\$host" in
  $addr0) i=0 ;;
  $addr1) i=1 ;;
  *) echo "nsrsh: unknown host \$host" >&2; exit 1 ;;
esac
exec "$node" "\$i" /bin/sh -c "\$*"
EOF
chmod +x "$work/nsrsh"
printf '%s slots=2\n%s slots=2\n' "$addr0" "$addr1" >"$work/hosts"
printf '%s slots=4\n' "$addr0" >"$work/hosts-one"

# mpirun_on HOSTFILE OUT ARGS...: four ranks (ARGS: -x exports, then the program),
# mpirun started on node 0, node 1 reached through nsrsh.
mpirun_on() {
  local hosts=$1 out=$2
  shift 2
  start "$node" 0 mpirun --allow-run-as-root -np 4 --hostfile "$hosts" \
    --mca plm_rsh_agent "$work/nsrsh" --mca oob_tcp_if_include "$subnet" \
    --mca btl tcp,self,vader --mca btl_tcp_if_include "$subnet" \
    "$@" >"$out" 2>"${out%.out}.err"
  finish
}

if want mpirun-tcp; then
  command -v mpirun >/dev/null || die "mpirun-tcp needs Open MPI (apt-get install openmpi-bin)"
  say "mpirun-tcp: mpirun starts 2+2 ranks across the namespaces, tcp backend"
  mpirun_on "$work/hosts" "$work/mpirun-tcp.out" -x FULGUR_TOKEN -x MASTER_ADDR=$addr0 -x MASTER_PORT=$port \
    "$work/mlp" -num-nodes 2 -devices 2 -strategy ddp "${train_args[@]}" ||
    fail_run "mpirun-tcp" $? "$work/mpirun-tcp.err"
  expect_same mpirun-tcp "$work/ref-tcp.out" "$work/mpirun-tcp.out"
fi

if want mpi; then
  if [ ! -d strategy/collective/mpi ]; then
    say "mpi: SKIPPED: strategy/collective/mpi does not exist in this tree yet"
  else
    command -v mpirun >/dev/null || die "mpi needs Open MPI (apt-get install openmpi-bin libopenmpi-dev)"
    say "mpi: build with -tags mpi; one node (4 ranks in node 0) against two nodes (2+2)"
    go build -tags mpi -o "$work/mlp-mpi" ./examples/mlp
    mpirun_on "$work/hosts-one" "$work/ref-mpi.out" "$work/mlp-mpi" -num-nodes 1 -devices 4 -strategy ddp "${train_args[@]}" ||
      fail_run "the mpi one-node reference" $? "$work/ref-mpi.err"
    mpirun_on "$work/hosts" "$work/mpi.out" "$work/mlp-mpi" -num-nodes 2 -devices 2 -strategy ddp "${train_args[@]}" ||
      fail_run "the mpi two-node run" $? "$work/mpi.err"
    expect_same mpi "$work/ref-mpi.out" "$work/mpi.out"
  fi
fi
say "all requested checks passed: ${checks[*]}"
