// The machine's own limits, for the figures beside bench/RESULTS.md's
// (issue 15 item 5): one thread's float32 FMA peak with 256-bit vectors
// and its memory bandwidth, read alone and copied. bench/limits.sh runs it
// pinned on each core alone and on every core at once, which shows whether
// the cores a VM reports behave as physical cores (two SMT siblings share
// their FMA units and fall to about half each).
//
//   limits fma [seconds]
//   limits read|copy [seconds] [MiB]
//
// Each prints the best of back-to-back passes over the seconds given
// (default 2). fma keeps 12 independent accumulators, enough to fill two
// FMA pipes of 4 cycles' latency; GFLOP/s counts an FMA as 2. read sums a
// buffer (bytes read per second); copy is memcpy (bytes read plus bytes
// written per second).
#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec * 1e-9;
}

static float fma_pass(long iters) {
	__m256 a0 = _mm256_set1_ps(1.0f), a1 = _mm256_set1_ps(1.1f), a2 = _mm256_set1_ps(1.2f),
	       a3 = _mm256_set1_ps(1.3f), a4 = _mm256_set1_ps(1.4f), a5 = _mm256_set1_ps(1.5f),
	       a6 = _mm256_set1_ps(1.6f), a7 = _mm256_set1_ps(1.7f), a8 = _mm256_set1_ps(1.8f),
	       a9 = _mm256_set1_ps(1.9f), a10 = _mm256_set1_ps(2.0f), a11 = _mm256_set1_ps(2.1f);
	__m256 x = _mm256_set1_ps(0.999999f), y = _mm256_set1_ps(1e-7f);
	for (long i = 0; i < iters; i++) {
		// Keeps the compiler from merging or hoisting the chains.
		__asm__ volatile("" : "+x"(a0), "+x"(a1), "+x"(a2), "+x"(a3), "+x"(a4), "+x"(a5),
		                 "+x"(a6), "+x"(a7), "+x"(a8), "+x"(a9), "+x"(a10), "+x"(a11));
		a0 = _mm256_fmadd_ps(a0, x, y); a1 = _mm256_fmadd_ps(a1, x, y);
		a2 = _mm256_fmadd_ps(a2, x, y); a3 = _mm256_fmadd_ps(a3, x, y);
		a4 = _mm256_fmadd_ps(a4, x, y); a5 = _mm256_fmadd_ps(a5, x, y);
		a6 = _mm256_fmadd_ps(a6, x, y); a7 = _mm256_fmadd_ps(a7, x, y);
		a8 = _mm256_fmadd_ps(a8, x, y); a9 = _mm256_fmadd_ps(a9, x, y);
		a10 = _mm256_fmadd_ps(a10, x, y); a11 = _mm256_fmadd_ps(a11, x, y);
	}
	__m256 s = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)),
	                         _mm256_add_ps(_mm256_add_ps(a4, a5), _mm256_add_ps(a6, a7)));
	s = _mm256_add_ps(s, _mm256_add_ps(_mm256_add_ps(a8, a9), _mm256_add_ps(a10, a11)));
	float o[8];
	_mm256_storeu_ps(o, s);
	return o[0];
}

static float read_pass(const float *f, size_t n) {
	__m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
	for (size_t i = 0; i + 32 <= n; i += 32) {
		s0 = _mm256_add_ps(s0, _mm256_load_ps(f + i));
		s1 = _mm256_add_ps(s1, _mm256_load_ps(f + i + 8));
		s2 = _mm256_add_ps(s2, _mm256_load_ps(f + i + 16));
		s3 = _mm256_add_ps(s3, _mm256_load_ps(f + i + 24));
	}
	float o[8];
	_mm256_storeu_ps(o, _mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
	return o[0];
}

int main(int argc, char **argv) {
	if (argc < 2 || (strcmp(argv[1], "fma") && strcmp(argv[1], "read") && strcmp(argv[1], "copy"))) {
		fprintf(stderr, "usage: limits fma [seconds] | limits read|copy [seconds] [MiB]\n");
		return 2;
	}
	double secs = argc > 2 ? atof(argv[2]) : 2.0, best = 0, end = now() + secs;
	volatile float sink = 0;
	if (!strcmp(argv[1], "fma")) {
		const long iters = 20000000;
		while (now() < end) {
			double t0 = now();
			sink += fma_pass(iters);
			double g = iters * 12.0 * 8 * 2 / (now() - t0) / 1e9;
			best = g > best ? g : best;
		}
		printf("fma %.1f GFLOP/s\n", best);
		return 0;
	}
	size_t bytes = (size_t)(argc > 3 ? atol(argv[3]) : 256) << 20;
	char *a = aligned_alloc(64, bytes), *b = aligned_alloc(64, bytes);
	if (!a || !b) {
		fprintf(stderr, "limits: cannot allocate two buffers of %zu MiB\n", bytes >> 20);
		return 1;
	}
	memset(a, 1, bytes);
	memset(b, 2, bytes);
	int copy = !strcmp(argv[1], "copy");
	while (now() < end) {
		double t0 = now(), moved;
		if (copy) {
			memcpy(b, a, bytes);
			moved = 2.0 * bytes;
		} else {
			sink += read_pass((const float *)a, bytes / 4);
			moved = bytes;
		}
		double g = moved / (now() - t0) / 1e9;
		best = g > best ? g : best;
	}
	printf("%s %zu MiB %.1f GB/s\n", argv[1], bytes >> 20, best);
	return 0;
}
