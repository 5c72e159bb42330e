#!/usr/bin/env bash
# The machine's limits beside the benchmark figures (issue 15 item 5):
# bench/limits.c's FMA peak and memory bandwidth, pinned on each core alone,
# then on every core at once. Two cores whose figures at once match their
# figures alone behave as physical cores; SMT siblings share their FMA units.
#
#   bench/limits.sh                 # fma, read and copy of 256 MiB and 4 MiB
#
# CC overrides the compiler (default cc); needs AVX2 and FMA.
set -euo pipefail
cd "$(dirname "$0")"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"${CC:-cc}" -O2 -mavx2 -mfma -o "$dir/limits" limits.c
cores=$(nproc)
for w in "fma" "read 1 256" "copy 1 256" "read 1 4" "copy 1 4"; do
	for ((c = 0; c < cores; c++)); do
		echo "$w, core $c alone: $(taskset -c "$c" "$dir/limits" $w)"
	done
	pids=()
	for ((c = 0; c < cores; c++)); do
		taskset -c "$c" "$dir/limits" $w >"$dir/at.$c" &
		pids+=($!)
	done
	wait "${pids[@]}"
	for ((c = 0; c < cores; c++)); do
		echo "$w, core $c with all at once: $(cat "$dir/at.$c")"
	done
done
