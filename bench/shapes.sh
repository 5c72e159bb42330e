#!/usr/bin/env bash
# Times single layers at shapes beyond resnet8's against PyTorch 1.13:
# BenchmarkShapes (strategy/device/engine) and bench/torch_shapes.py,
# alternating round by round, and prints the ratios.
#
#   bench/shapes.sh                        # every case, 3 rounds
#   bench/shapes.sh --cases 'dw|group' --rounds 5
#
# Arguments go to bench/torch_shapes.py (see its --help). PYTHON overrides
# the interpreter (default: Debian's, which has python3-torch).
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-/usr/bin/python3}
if ! "$python" -c 'import torch' 2>/dev/null; then
	echo "shapes.sh: $python cannot import torch: install python3-torch (Debian) or set PYTHON" >&2
	exit 1
fi
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
# Build first so that compiling is not measured.
go test -c -o "$dir/engine.test" ./strategy/device/engine
exec "$python" bench/torch_shapes.py --fulgur "$dir/engine.test" "$@"
