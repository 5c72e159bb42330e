package ops

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/fulgur-ml/fulgur/blas"
	"github.com/fulgur-ml/fulgur/internal/freelist"
)

// Loops around the multiplies (im2col, normalisation, elementwise) can run on
// several goroutines. Work is split by index, never by timing, and
// reductions combine per-index partial results in index order: results do
// not depend on the number of workers (TestParallelMatchesSerial).
//
// By default they use blas.Workers() goroutines, the plan's (blas.Plan):
// the cores given to the process over the local ranks, divided by the BLAS
// threads per multiply, so that goroutines × BLAS threads never exceed the
// cores (a threaded BLAS's threads spin between calls and goroutines that
// compete with them for the cores made the resnet8 step several times
// slower). FULGUR_WORKERS and FULGUR_BLAS_THREADS change the plan;
// SetLoopWorkers overrides it here.

// parallelGrain is the least number of elements worth a goroutine while
// the pool's goroutines poll for work (see contended); maxWorkers caps the
// goroutines of one loop. Tests change both to run the parallel paths on
// small inputs. The normalisation loops take about 0.45 ns an element (a
// 200K-element plane set, resnet8's 64x64x7x7, about 90 µs in all). A
// polling pool goroutine starts a part within about 10 µs of its hand-off,
// so 64K elements (about 30 µs) are worth splitting: resnet8's third stage
// (200K) then splits its loops as the first two do. A pool goroutine woken
// from sleep starts 70-110 µs later on this project's VM (a futex wake of
// a halted core), and the caller, done first, waits for it: while the pool
// blocks (contended) a loop needs twice the elements, 128K.
var (
	parallelGrain = 1 << 16
	maxWorkers    = coreShare
)

// coreShare is how many goroutines may each run a one-thread kernel, or a
// multiply on the BLAS's threads, at once within this process's (or rank's)
// share of the cores: the plan's workers.
func coreShare() int { return max(1, blas.Workers()) }

// Cores is how many cores this process (or each local rank) may keep busy
// (blas.Plan's budget: the cores given to the process over the local ranks).
func Cores() int { return blas.Cores() }

// Workers is how many goroutines the convolutions and loops split their
// work between by default: the plan's workers, Cores() divided by the BLAS
// threads per multiply.
func Workers() int { return coreShare() }

// SetLoopWorkers sets how many goroutines the loops around the multiplies
// may use: 0 (the default) means Workers(), 1 keeps them
// serial. Call it at program start, before graphs run.
func SetLoopWorkers(n int) {
	switch {
	case n <= 0:
		maxWorkers = coreShare
	default:
		maxWorkers = func() int { return n }
	}
}

// workers is how many goroutines a loop over n items of size elements each
// should use.
func workers(n, size int) int {
	if n < 2 {
		return 1
	}
	grain := parallelGrain
	if contended.Load() {
		grain *= 2
	}
	return max(1, min(maxWorkers(), n, n*size/grain))
}

// Convolutions also split their batch between goroutines, image chunk by
// image chunk, each with its own column-matrix scratch, each calling the
// BLAS on its own: worth it when each multiply runs on one thread (BLIS's
// serial build, or OpenBLAS set to one thread), where a second core would
// otherwise idle. imageWorkers is how many goroutines: Workers(), so that
// goroutines × BLAS threads stay within this process's (or rank's) share of
// the cores.
var imageWorkers = coreShare

// imageGrain is the least number of multiply-adds per image worker worth
// waking a goroutine for. Tests lower it.
var imageGrain = 1 << 18

// SetImageWorkers sets how many goroutines a convolution splits its batch
// between: 0 (the default) means Workers(), 1 keeps it
// serial. Results do not depend on it, except the weight gradient's, which
// sums partial sums over dwParts fixed image ranges in range order: the
// same bits for the same count. Call it at program start, before graphs
// run.
func SetImageWorkers(n int) {
	if n <= 0 {
		imageWorkers = coreShare
		return
	}
	imageWorkers = func() int { return n }
}

// imageSplit is how many workers a convolution with chunks chunks of macs
// multiply-adds in all should use.
func imageSplit(chunks, macs int) int {
	if chunks < 2 {
		return 1
	}
	return max(1, min(imageWorkers(), chunks, macs/imageGrain))
}

// DeterministicParts is how many partial sums a convolution's weight
// gradient adds up under SetDeterministic(true), whatever the cores.
const DeterministicParts = 4

// deterministic is set while SetDeterministic(true) or a HoldDeterministic
// is in force; detSet and detHolds are what it is made of (under detMu).
var (
	deterministic atomic.Bool
	detMu         sync.Mutex
	detSet        bool
	detHolds      int
)

// SetDeterministic makes results bit-identical whatever the core count and
// worker settings: the convolution weight gradient, the one reduction whose
// order followed the worker count, then always sums DeterministicParts
// partial sums (fewer when the batch has fewer image chunks) in part order,
// whichever goroutines compute them (the Winograd weight gradient of small
// images, which splits by channels and has no partial sums, is the same for
// any worker count either way). It is the program's own setting, for
// good; a trainer with Config.Deterministic holds it for its Fit with
// HoldDeterministic. Call it before graphs run.
func SetDeterministic(on bool) {
	detMu.Lock()
	defer detMu.Unlock()
	detSet = on
	deterministic.Store(detSet || detHolds > 0)
}

// HoldDeterministic puts SetDeterministic(true)'s summation order in force
// until release is called, whatever else the process sets meanwhile: a
// trainer asking for determinism holds it for its Fit, so that another
// trainer (one after it, or one training at the same time) that does not
// ask for it cannot switch it off under it, and the process's own setting
// is back afterwards. release may be called more than once.
func HoldDeterministic() (release func()) {
	detMu.Lock()
	detHolds++
	deterministic.Store(true)
	detMu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			detMu.Lock()
			detHolds--
			deterministic.Store(detSet || detHolds > 0)
			detMu.Unlock()
		})
	}
}

// Deterministic reports whether SetDeterministic(true) or a
// HoldDeterministic is in force.
func Deterministic() bool { return deterministic.Load() }

// dwParts is how many partial sums the weight gradient of a convolution
// with chunks chunks adds up when workers goroutines share it: two a
// worker, so that one that starts late (a goroutine woken from sleep takes
// 70-110 µs on this project's VM, more when other work has the core) leaves
// the other one of its parts rather than half the work; under
// SetDeterministic, DeterministicParts whatever the workers.
func dwParts(chunks, workers int) int {
	if deterministic.Load() {
		return max(1, min(DeterministicParts, chunks))
	}
	if workers == 1 {
		return 1
	}
	return max(1, min(2*workers, chunks))
}

// part is work split into n parts that can run at once; run does part i.
type part interface{ run(i, n int) }

// partRun is the state of one runParts call, held in the job so that a split
// allocates nothing.
type partRun struct {
	wg    sync.WaitGroup
	next  atomic.Int64 // the next piece of work to claim
	left  atomic.Int32 // parts on the pool not yet done (spinning callers poll it)
	begun atomic.Int32 // parts on the pool that have started
	mu    sync.Mutex
	fault any // the first panic of a part run on the pool
}

// claim returns the next piece of work of the call, counting from 0: the
// goroutines of a split take pieces until none is left, so that one woken
// late, or kept off its core by other work, does less of it. Which
// goroutine takes a piece never changes a result (each piece writes its own
// outputs, or its own partial sum, added up in piece order).
func (s *partRun) claim() int { return int(s.next.Add(1) - 1) }

type partMsg struct {
	p    part
	i, n int
	s    *partRun
}

// pool is a set of long-lived goroutines that run parts, so that a split
// allocates nothing (a go statement with a closure would).
var pool struct {
	mu      sync.Mutex
	started int
	ch      chan partMsg
}

// runParts runs parts 1..n-1 of p on the pool and part 0 on the caller,
// and returns when all are done. A part's panic is raised again on the
// caller (where the engine turns it into an error), not on the pool's
// goroutine. Parts must not call runParts.
func runParts(p part, n int, s *partRun) {
	pool.mu.Lock()
	if pool.ch == nil {
		pool.ch = make(chan partMsg, 64)
	}
	for ; pool.started < n-1; pool.started++ {
		go poolWorker(pool.ch)
	}
	ch := pool.ch
	pool.mu.Unlock()
	s.fault = nil
	s.next.Store(0)
	s.left.Store(int32(n - 1))
	s.begun.Store(0)
	s.wg.Add(n - 1)
	for i := 1; i < n; i++ {
		ch <- partMsg{p, i, n, s}
	}
	func() {
		defer s.wg.Wait()
		defer s.spinUntilDone(n)
		p.run(0, n)
	}()
	if s.fault != nil {
		panic(s.fault)
	}
}

// Hand-offs between goroutines. A goroutine that blocks (a pool goroutine
// waiting for work, a caller waiting for the pool's parts) lets its thread
// sleep, and on this project's VM the thread woken for it again starts
// 70-110 µs later: resnet8's step splits about 60 loops and convolutions,
// each paying that wake twice (the helper's start, the caller's return).
// So, as OpenMP runtimes do between parallel regions, both keep polling for
// a while first: the pool's goroutines for spinWait after each part, the
// caller until its parts are done (at most spinWait, then it blocks). Only
// with more than one P (with GOMAXPROCS=1 a poller would hold the only P
// the work needs), and not while other processes keep the pool's threads
// off the cores (contended).
var spinWait atomic.Int64

func init() { spinWait.Store(int64(defaultSpinWait)) }

// defaultSpinWait covers the gaps between the splits of a resnet8 step
// (serial ops of up to a few hundred µs between them) and stays short next
// to a step (tens of ms), so an idle pool sleeps soon after the last step.
const defaultSpinWait = 200 * time.Microsecond

// SetSpinWait sets how long the pool's goroutines, and a caller waiting for
// them, poll before they block: 0 blocks at once (the least CPU time when
// other processes need the cores), a negative value restores the default
// (200 µs). Results never depend on it.
func SetSpinWait(d time.Duration) {
	if d < 0 {
		d = defaultSpinWait
	}
	spinWait.Store(int64(d))
}

// spinning is how long to poll now: spinWait with more than one P, else 0.
func spinning() time.Duration {
	d := time.Duration(spinWait.Load())
	if d <= 0 || runtime.GOMAXPROCS(0) < 2 {
		return 0
	}
	return d
}

// spinUntilDone polls until the call's parts on the pool are done or the
// spin time is over (the caller's wg.Wait then blocks for the rest). It
// polls only when every part on the pool has started: one that has not,
// although the caller has run out of pieces to claim, is on a thread that
// sleeps or that other processes keep off the cores, and polling for it
// would take a core it may need. That also tells the pool whether to poll
// (contended).
func (s *partRun) spinUntilDone(n int) {
	late := int(s.begun.Load()) < n-1
	contended.Store(late)
	if late || s.left.Load() == 0 {
		return
	}
	d := spinning()
	if d == 0 {
		return
	}
	start := time.Now()
	for i := 1; s.left.Load() != 0; i++ {
		if i%64 == 0 && time.Since(start) > d {
			return
		}
	}
}

// contended is set when the last split's caller finished its pieces before
// a part on the pool had started: the pool's goroutines then block at once
// after their parts instead of polling, until a split finds them running
// again. On a quiet machine they are running (polling) for every split
// but the first after a pause; where other processes load the cores,
// polling threads would take time from the process's own work (and
// others'), as OpenMP's spinning threads do.
var contended atomic.Bool

func poolWorker(ch <-chan partMsg) {
	for m := range ch {
		runPart(m)
		for {
			next, ok := pollWork(ch)
			if !ok {
				break
			}
			runPart(next)
		}
	}
}

// pollWork receives the next part if one is sent within the spin time.
func pollWork(ch <-chan partMsg) (partMsg, bool) {
	d := spinning()
	if d == 0 || contended.Load() {
		return partMsg{}, false
	}
	start := time.Now()
	for i := 1; ; i++ {
		select {
		case m, ok := <-ch:
			return m, ok
		default:
		}
		if i%64 == 0 && time.Since(start) > d {
			return partMsg{}, false
		}
	}
}

func runPart(m partMsg) {
	m.s.begun.Add(1)
	// Deferred calls run last first: the fault is recorded, then wg is
	// done, then left drops, so that a caller that sees left at 0 finds
	// the fault set and wg.Wait returning at once.
	defer m.s.left.Add(-1)
	defer m.s.wg.Done()
	defer func() {
		if r := recover(); r != nil {
			m.s.mu.Lock()
			if m.s.fault == nil {
				m.s.fault = r
			}
			m.s.mu.Unlock()
		}
	}()
	m.p.run(m.i, m.n)
}

// loopJob is one loop of the package split between the loop workers
// without allocating: the kernel is named by kind (a switch, not a
// closure), its arguments live in the job, and jobs come from a free list.
type loopJob[T float] struct {
	kind    loopKind
	n       int
	a, b, c []T
	loopArgs
	pr partRun
}

// loopArgs are a kernel's arguments other than its slices.
type loopArgs struct {
	bn     *bnOp
	g      *convGeom
	n0, m  int
	gather bool

	// BatchNormAddReLU's passes (bnadd.go).
	bnAdd  *bnAddOp
	bnMask *bnMaskOp

	// The smooth activations' (smooth.go): which one, and its per-element
	// cache.
	smooth smoothKind
	aux    []float64
	// The loss, its gradient, the convolution's bias gradient and the
	// poolings (loss.go, conv.go, pool.go).
	loss  *pointLossOp
	d     []float64
	scale float64
	csum  *channelSumOp
	pool  *poolGeom
	arg   []int32
}

type loopKind int

const (
	loopRelu loopKind = iota
	loopAddRelu
	loopMaskPos
	loopBNStats
	loopBNAffine
	loopBNDotSums
	loopBNInputGrad
	loopMoveRows
	loopIm2col
	loopCol2im
	loopAdd
	loopBNAdd
	loopBNMask
	loopSmooth
	loopSmoothGrad
	loopPointLoss
	loopScaleBy
	loopScaleByEach
	loopMSEGrad
	loopChannelSum
	loopMaxPool
	loopMaxPoolGrad
	loopAvgPool
	loopAvgPoolGrad
	loopCopy
)

// loopPieces is how many pieces each loop worker's share is cut into for
// claiming (partRun.claim).
const loopPieces = 4

func (j *loopJob[T]) run(_, w int) {
	pieces := min(j.n, loopPieces*w)
	for p := j.pr.claim(); p < pieces; p = j.pr.claim() {
		j.piece(p*j.n/pieces, (p+1)*j.n/pieces)
	}
}

func (j *loopJob[T]) piece(lo, hi int) {
	switch j.kind {
	case loopRelu:
		relu(j.a[lo:hi], j.b[lo:hi])
	case loopAddRelu:
		addRelu(j.a[lo:hi], j.b[lo:hi], j.c[lo:hi])
	case loopMaskPos:
		maskPos(j.a[lo:hi], j.b[lo:hi], j.c[lo:hi])
	case loopBNStats:
		bnStats(j.bn, j.a, lo, hi)
	case loopBNAffine:
		bnAffine(j.bn, j.a, j.b, lo, hi)
	case loopBNDotSums:
		bnDotSums(j.bn, j.a, j.b, lo, hi)
	case loopBNInputGrad:
		bnInputGrad(j.bn, j.a, j.b, j.c, lo, hi)
	case loopMoveRows:
		moveRows(j.g, j.a, j.b, j.n0, j.m, j.gather, lo, hi)
	case loopIm2col:
		im2colTasks(j.g, j.a, j.b, j.n0, j.m, lo, hi)
	case loopCol2im:
		col2imTasks(j.g, j.a, j.b, j.n0, j.m, lo, hi)
	case loopAdd:
		add(j.a[lo:hi], j.b[lo:hi], j.c[lo:hi])
	case loopBNAdd:
		bnAdd(j.bnAdd, j.a, j.b, j.c, lo, hi)
	case loopBNMask:
		bnMaskSums(j.bnMask, j.a, j.b, j.c, lo, hi)
	case loopSmooth:
		smoothForward(j.smooth, j.a[lo:hi], j.b[lo:hi], auxPart(j.aux, lo, hi))
	case loopSmoothGrad:
		// a is the input or the output, whichever the kind reads.
		smoothBackward(j.smooth, j.a[lo:hi], j.a[lo:hi], j.b[lo:hi], j.c[lo:hi], auxPart(j.aux, lo, hi))
	case loopPointLoss:
		pointLossChunks(j.loss, j.a, j.b, j.c, lo, hi)
	case loopScaleBy, loopScaleByEach, loopMSEGrad:
		lossGrad(j.kind, j.d, j.scale, j.a, j.b, j.c, lo, hi)
	case loopChannelSum:
		channelSumRange(j.csum, j.a, j.c, lo, hi)
	case loopMaxPool:
		maxPool(j.pool, j.a, j.c, j.arg, lo, hi)
	case loopMaxPoolGrad:
		maxPoolGrad(j.pool, j.a, j.c, j.arg, lo, hi)
	case loopAvgPool:
		avgPool(j.pool, j.d, j.a, j.c, lo, hi)
	case loopAvgPoolGrad:
		avgPoolGrad(j.pool, j.d, j.a, j.c, lo, hi)
	case loopCopy:
		copy(j.c[lo:hi], j.a[lo:hi])
	default:
		panic(fmt.Sprintf("ops: loop kind %d has no kernel", j.kind))
	}
}

// freeList holds values between calls without losing them at a GC
// (internal/freelist, which blas shares): the ops promise not to allocate
// once warm, and a GC can run during any call.
type freeList[E any] struct{ l freelist.List[E] }

func (f *freeList[E]) get() *E  { return f.l.Get() }
func (f *freeList[E]) put(e *E) { f.l.Put(e) }

var (
	loopFree32 freeList[loopJob[float32]]
	loopFree64 freeList[loopJob[float64]]
)

func loopFreeList[T float]() *freeList[loopJob[T]] {
	var z T
	if unsafe.Sizeof(z) == 4 {
		return any(&loopFree32).(*freeList[loopJob[T]])
	}
	return any(&loopFree64).(*freeList[loopJob[T]])
}

// parallelLoop runs the kernel kind over [0, n) on w goroutines (w-1 of
// them on the pool), which claim contiguous ranges (range p of P is
// [p·n/P, (p+1)·n/P), P = min(n, loopPieces·w)) until none is left. Callers
// check workers(...) > 1 first.
func parallelLoop[T float](kind loopKind, w, n int, a, b, c []T, x loopArgs) {
	fl := loopFreeList[T]()
	j := fl.get()
	j.kind, j.n, j.a, j.b, j.c, j.loopArgs = kind, n, a, b, c, x
	runParts(j, w, &j.pr)
	j.a, j.b, j.c, j.loopArgs = nil, nil, nil, loopArgs{}
	fl.put(j)
}
