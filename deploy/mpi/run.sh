#!/usr/bin/env bash
# Run a fulgur program with Open MPI's mpirun on the hosts of a hostfile, one
# rank per slot, every host with the same number of slots (G ranks per node).
# mpirun fills the first host's slots first, so rank 0 runs on the first host.
#
#   deploy/mpi/run.sh [-b BACKEND] [-f HOSTFILE] [-n NP] [-p PORT] PROGRAM [FLAGS...]
#
#   -b tcp   (default) mpirun only starts the ranks; they meet at the first
#            host of the hostfile (MASTER_ADDR, port -p, default 29500) and
#            reduce gradients over fulgur's tcp ring. Any build of PROGRAM.
#   -b mpi   gradients go through MPI itself; PROGRAM must be built with
#            -tags mpi (cgo, libopenmpi-dev), no rendezvous port is used.
#   -b auto|shm  as FULGUR_BACKEND (shm: every rank on one host).
#   -f       the hostfile (default ./hosts), lines like "node1 slots=4".
#   -n       ranks in all (default: every slot of the hostfile).
#
# The program gets -num-nodes NP/G, -devices G and -strategy ddp; the other
# FLAGS are passed through. Examples, for hosts "node1 slots=4" and
# "node2 slots=4":
#   go build -o mlp ./examples/mlp
#   deploy/mpi/run.sh -f hosts ./mlp -max-epochs 1                 # tcp backend
#   go build -tags mpi -o mlp-mpi ./examples/mlp
#   deploy/mpi/run.sh -b mpi -f hosts ./mlp-mpi -max-epochs 1     # mpi backend
# PROGRAM must be at the same path on every host (a shared file system, or
# copied there). Extra mpirun options go in FULGUR_MPIRUN_ARGS, e.g.
# FULGUR_MPIRUN_ARGS="--mca btl_tcp_if_include eth0".
set -euo pipefail

usage() {
  sed -n '6,17p' "$0" >&2
  exit 2
}
backend=tcp hostfile=hosts np="" port=29500
while getopts "b:f:n:p:h" o; do
  case $o in
    b) backend=$OPTARG ;;
    f) hostfile=$OPTARG ;;
    n) np=$OPTARG ;;
    p) port=$OPTARG ;;
    *) usage ;;
  esac
done
shift $((OPTIND - 1))
[ $# -ge 1 ] || usage
prog=$1
shift

case $backend in tcp | mpi | auto | shm) ;; *)
  echo "run.sh: -b $backend: use tcp, mpi, auto or shm" >&2
  exit 2
  ;;
esac
[ -r "$hostfile" ] || {
  echo "run.sh: cannot read the hostfile $hostfile (-f)" >&2
  exit 2
}

# Hosts, in order, and their slots (default 1), ignoring comments.
hosts=() slots=()
while read -r name rest; do
  case $name in "" | \#*) continue ;; esac
  s=1
  for kv in $rest; do
    case $kv in slots=*) s=${kv#slots=} ;; \#*) break ;; esac
  done
  hosts+=("$name")
  slots+=("$s")
done <"$hostfile"
[ ${#hosts[@]} -gt 0 ] || {
  echo "run.sh: $hostfile lists no host" >&2
  exit 2
}
per_node=${slots[0]}
for s in "${slots[@]}"; do
  if [ "$s" != "$per_node" ]; then
    echo "run.sh: $hostfile gives hosts different slot counts (${slots[*]}): fulgur needs the same number of ranks on every node" >&2
    exit 2
  fi
done
total=$((per_node * ${#hosts[@]}))
np=${np:-$total}
if [ "$np" -gt "$total" ] || [ $((np % per_node)) != 0 ]; then
  echo "run.sh: -n $np: use a multiple of $per_node ranks per node, at most $total" >&2
  exit 2
fi
nodes=$((np / per_node))

# Ranks that mpirun starts on this host inherit this shell's environment.
# Launcher variables left in it (from torchrun or a SLURM allocation) would
# be read before Open MPI's (strategy/cluster tries torchrun-style and
# Kubeflow variables first), so drop them.
unset RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE GROUP_RANK NODE_RANK NNODES MASTER_ADDR MASTER_PORT \
  KUBERNETES_PORT FULGUR_LAUNCHER FULGUR_RENDEZVOUS_FD

if [ -z "${FULGUR_TOKEN:-}" ]; then
  FULGUR_TOKEN=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
fi
export FULGUR_TOKEN FULGUR_BACKEND=$backend
# One BLAS thread per rank: the ranks of a node share its cores.
export FULGUR_BLAS_THREADS=${FULGUR_BLAS_THREADS:-1}

# mpirun hands remote ranks only the variables named with -x.
args=(-np "$np" --hostfile "$hostfile" --map-by slot --bind-to none
  -x FULGUR_TOKEN -x FULGUR_BACKEND -x FULGUR_BLAS_THREADS)
for v in FULGUR_TIMEOUT FULGUR_BUCKET_MB; do
  if [ -n "${!v:-}" ]; then args+=(-x "$v"); fi
done
if [ "$backend" != mpi ]; then
  args+=(-x "MASTER_ADDR=${hosts[0]}" -x "MASTER_PORT=$port")
fi
if [ "$(id -u)" = 0 ]; then args+=(--allow-run-as-root); fi
# shellcheck disable=SC2206 # FULGUR_MPIRUN_ARGS is a list of words on purpose
extra=(${FULGUR_MPIRUN_ARGS:-})

if [ "$backend" = mpi ]; then where=""; else where=", rendezvous ${hosts[0]}:$port"; fi
echo "run.sh: $np ranks = $nodes nodes x $per_node ranks, backend $backend$where" >&2
exec mpirun "${args[@]}" "${extra[@]}" "$prog" -num-nodes "$nodes" -devices "$per_node" -strategy ddp "$@"
