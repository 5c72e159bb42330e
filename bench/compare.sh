#!/usr/bin/env bash
# Runs fulgur and the PyTorch 1.13 peer side by side on the benchmark
# workloads (BENCHMARKS.md) and prints every figure with its ratio.
#
#   bench/compare.sh                       # mlp, 3 interleaved runs
#   bench/compare.sh -workload mlp,resnet8,scaling -runs 5
#   bench/compare.sh -workload mlp -json
#
# Every configuration runs in its own process, interleaved fulgur, PyTorch,
# PyTorch, fulgur, ... (every other run in reverse order); figures are
# medians with min and max, and the ratio
# rows compare fulgur with PyTorch at each one's fastest thread setting in
# the same run. Extra arguments go to cmd/bench (see `go run ./cmd/bench -h`).
# PYTHON overrides the interpreter (default: Debian's, which has python3-torch).
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-/usr/bin/python3}
if ! "$python" -c 'import torch' 2>/dev/null; then
	echo "compare.sh: $python cannot import torch: install python3-torch (Debian) or set PYTHON" >&2
	exit 1
fi
bin=$(mktemp -d)/fulgur-bench
trap 'rm -rf "$(dirname "$bin")"' EXIT
# Build first so that compiling is not measured.
go build -o "$bin" ./cmd/bench
args=(-peer torch -python "$python" -peer-script bench/torch_peer.py)
if [[ " $* " != *" -workload "* ]]; then
	args+=(-workload mlp)
fi
echo "compare.sh: $bin ${args[*]} $*" >&2
exec "$bin" "${args[@]}" "$@"
