package data

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"

	"github.com/fulgur-ml/fulgur/internal/typednil"
	"github.com/fulgur-ml/fulgur/panics"
)

// LoaderConfig configures a Loader. The zero value of every field but
// BatchSize is a usable default.
type LoaderConfig struct {
	// BatchSize is the number of examples per batch; required, 1 or more.
	BatchSize int
	// Shuffle visits a new permutation every epoch, determined by (Seed,
	// epoch). It cannot be combined with a Sampler (the sampler decides the
	// order), other than the RandomSampler{Seed} it stands for.
	Shuffle bool
	// DropLast leaves out the last batch of an epoch when it is smaller than
	// BatchSize. By default it is kept.
	DropLast bool
	// Seed drives the shuffle (the trainer's Config.Seed does not: pass it
	// here too for one seed to decide the run).
	Seed uint64
	// Prefetch is how many batches are prepared ahead by a background
	// goroutine: 0 means 2; -1 reads synchronously inside Next.
	Prefetch int
	// Sampler decides which indices are visited; nil means
	// RandomSampler{Seed} when Shuffle is set, else SequentialSampler.
	Sampler Sampler
}

// DefaultPrefetch is the number of batches prepared ahead when
// LoaderConfig.Prefetch is 0.
const DefaultPrefetch = 2

// Validate fills defaults and reports every problem at once.
func (c *LoaderConfig) Validate() error {
	var errs []error
	if c.BatchSize < 1 {
		errs = append(errs, fmt.Errorf("BatchSize is %d: use 1 or more, e.g. 64", c.BatchSize))
	}
	if c.Prefetch < -1 {
		errs = append(errs, fmt.Errorf("Prefetch is %d: use 0 for the default (%d batches ahead), a positive count, or -1 to read synchronously", c.Prefetch, DefaultPrefetch))
	}
	if v, ok := c.Sampler.(validator); ok {
		if err := v.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("Sampler: %w", err))
		}
	}
	// A validated config holds the RandomSampler that Shuffle stands for.
	if c.Shuffle && c.Sampler != nil && c.Sampler != Sampler(RandomSampler{Seed: c.Seed}) {
		errs = append(errs, fmt.Errorf("Shuffle is set and Sampler is %T, which decides the order (Shuffle would be ignored, as PyTorch's DataLoader refuses): shuffle in the sampler and leave Shuffle false, or drop the Sampler", c.Sampler))
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	if c.Prefetch == 0 {
		c.Prefetch = DefaultPrefetch
	}
	if c.Sampler == nil {
		if c.Shuffle {
			c.Sampler = RandomSampler{Seed: c.Seed}
		} else {
			c.Sampler = SequentialSampler{}
		}
	}
	return nil
}

// Loader turns a Dataset into batches, epoch by epoch. A Loader is immutable
// and safe to share; each epoch is walked by its own Iter. Make one with
// NewLoader: the zero Loader has no dataset (the trainer refuses it, and its
// Iter's Err, naming NewLoader).
type Loader struct {
	ds     Dataset
	cfg    LoaderConfig
	fields []Field
	width  []int // values per example, per field
	pool   *batchPool
}

// NewLoader checks the dataset and the configuration, reporting every problem
// at once, and returns a ready Loader.
func NewLoader(ds Dataset, cfg LoaderConfig) (*Loader, error) {
	var errs []error
	var fields []Field
	if ds == nil {
		errs = append(errs, errors.New("dataset is nil: pass a Dataset such as the one data.OpenFashionMNIST returns"))
	} else if typednil.Is(ds) {
		errs = append(errs, fmt.Errorf("dataset is a nil %T: its constructor returned an error; check it, and pass the dataset it returns", ds))
	} else {
		fields = append([]Field(nil), ds.Fields()...)
		if err := checkFields(fields); err != nil {
			errs = append(errs, err)
		}
		if n := ds.Len(); n < 1 {
			errs = append(errs, fmt.Errorf("dataset has %d examples: a loader needs at least one (to train without validation, give Fit a nil loader rather than an empty one)", n))
		} else if cfg.DropLast && cfg.Sampler == nil && cfg.BatchSize > n {
			errs = append(errs, fmt.Errorf("DropLast is set and BatchSize %d exceeds the dataset's %d examples, so no batch would be produced: lower BatchSize or unset DropLast", cfg.BatchSize, n))
		} else if cfg.DropLast && cfg.Sampler != nil {
			// A sampler given here (a DistributedSampler, say) visits its
			// own count, which DropLast may leave without a batch.
			if k, ok := samplerCount(cfg.Sampler, n); ok && cfg.BatchSize > k {
				errs = append(errs, fmt.Errorf("DropLast is set and BatchSize %d exceeds the %d examples that Sampler %T visits (of the dataset's %d), so no batch would be produced: lower BatchSize or unset DropLast", cfg.BatchSize, k, cfg.Sampler, n))
			}
		}
	}
	if err := cfg.Validate(); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("data.NewLoader: %w", errors.Join(errs...))
	}
	l := &Loader{ds: ds, cfg: cfg, fields: fields, width: make([]int, len(fields))}
	for f := range fields {
		l.width[f] = fields[f].Size()
	}
	l.pool = &batchPool{}
	return l, nil
}

// errNoDataset is what the zero Loader, made without NewLoader, reports.
var errNoDataset = errors.New("the Loader has no dataset: make it with data.NewLoader (var l data.Loader and &data.Loader{} are not usable)")

// samplerCount is how many indices s visits of n, when s can say so and
// its fields are valid. A sampler of the user's that panics here is left
// to Iter, which reports the panic as an error naming it.
func samplerCount(s Sampler, n int) (k int, ok bool) {
	defer func() {
		if recover() != nil {
			k, ok = 0, false
		}
	}()
	if v, ok := s.(validator); ok && v.Validate() != nil {
		return 0, false
	}
	z, ok := s.(sizer)
	if !ok {
		return 0, false
	}
	return z.NumSamples(n), true
}

// Dataset is the dataset the loader reads.
func (l *Loader) Dataset() Dataset { return l.ds }

// Config is the configuration with defaults filled in (Prefetch and Sampler
// are never zero).
func (l *Loader) Config() LoaderConfig { return l.cfg }

// WithSampler returns a copy of the loader that visits the indices s gives,
// for example a DistributedSampler inserted by the trainer. A sampler whose
// Validate fails makes every Iter of the copy report that error.
func (l *Loader) WithSampler(s Sampler) *Loader {
	c := *l
	c.cfg.Sampler = s
	if s == nil {
		c.cfg.Sampler = SequentialSampler{}
		if c.cfg.Shuffle {
			c.cfg.Sampler = RandomSampler{Seed: c.cfg.Seed}
		}
	}
	return &c
}

// NumBatches is the number of batches Iter(ctx, epoch) yields. For the
// zero Loader (or a nil one), which has no dataset, it is 0, as Iter then
// yields no batch; NumBatches has no error to return, so Iter's Err is where
// that Loader says to use NewLoader.
func (l *Loader) NumBatches(epoch int) int {
	if l == nil || l.ds == nil {
		return 0
	}
	var k int
	if s, ok := l.cfg.Sampler.(sizer); ok {
		k = s.NumSamples(l.ds.Len())
	} else {
		idx, _ := l.cfg.Sampler.Order(epoch, l.ds.Len())
		k = len(idx)
	}
	return l.batchesOf(k)
}

func (l *Loader) batchesOf(k int) int {
	if l.cfg.DropLast {
		return k / l.cfg.BatchSize
	}
	return (k + l.cfg.BatchSize - 1) / l.cfg.BatchSize
}

// Iter starts walking one epoch. The caller must Close it (defer it.Close())
// unless Next has returned false; an Iter is used from one goroutine. When
// ctx is cancelled, Next returns false and Err returns ctx.Err(). The Iter of
// the zero Loader (or a nil one) yields no batch, and its Err names
// NewLoader.
func (l *Loader) Iter(ctx context.Context, epoch int) *Iter {
	it := &Iter{l: l, ctx: ctx, e: &epochState{l: l}}
	if l == nil || l.ds == nil {
		it.err = fmt.Errorf("data.Loader.Iter: %w", errNoDataset)
		return it
	}
	if ctx == nil {
		it.err = errors.New("data.Loader.Iter: ctx is nil: pass context.Background() or a cancellable context")
		return it
	}
	if v, ok := l.cfg.Sampler.(validator); ok {
		if err := v.Validate(); err != nil {
			it.err = fmt.Errorf("data.Loader.Iter: %w", err)
			return it
		}
	}
	n := l.ds.Len()
	idx, pad, err := l.order(epoch, n)
	if err != nil {
		it.err = fmt.Errorf("data.Loader.Iter: %w", err)
		return it
	}
	if pad != nil && len(pad) != len(idx) {
		it.err = fmt.Errorf("data.Loader.Iter: sampler %T returned %d indices but %d padding flags", l.cfg.Sampler, len(idx), len(pad))
		return it
	}
	for k, i := range idx {
		if i < 0 || i >= n {
			it.err = fmt.Errorf("data.Loader.Iter: sampler %T returned index %d at position %d, outside the dataset's [0, %d)", l.cfg.Sampler, i, k, n)
			return it
		}
	}
	if pad == nil {
		pad = make([]bool, len(idx))
	}
	it.e.idx, it.e.pad = idx, pad
	it.e.nb = l.batchesOf(len(idx))
	if l.cfg.Prefetch > 0 && it.e.nb > 0 {
		it.p = startPipe(ctx, it, l.cfg.Prefetch)
	}
	return it
}

// order is the sampler's Order for epoch; a panic in it (a sampler of the
// user's) is an error naming the sampler, with the stack, as one in a
// Dataset's Read is.
func (l *Loader) order(epoch, n int) (idx []int, pad []bool, err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("sampler %T.Order(%d, %d) %w", l.cfg.Sampler, epoch, n, panics.Recovered(v))
		}
	}()
	idx, pad = l.cfg.Sampler.Order(epoch, n)
	return idx, pad, nil
}

// Iter walks the batches of one epoch. See Loader.Iter.
type Iter struct {
	l      *Loader
	ctx    context.Context
	e      *epochState
	k      int // next batch to fill (synchronous mode)
	cur    *Batch
	err    error
	closed bool
	p      *pipe
}

// epochState is what the prefetch worker needs; it must not reference the Iter.
type epochState struct {
	l   *Loader
	idx []int
	pad []bool
	nb  int // batches in the epoch
}

// Next returns the next batch, or false at the end of the epoch, on
// cancellation or on a read error (see Err). The batch is valid until the
// next call to Next or Close: its buffers are then reused.
func (it *Iter) Next() (*Batch, bool) {
	if it.closed || it.err != nil {
		return nil, false
	}
	if err := it.ctx.Err(); err != nil {
		it.err = err
		it.Close()
		return nil, false
	}
	if it.p == nil {
		if it.k >= it.e.nb {
			it.Close()
			return nil, false
		}
		if it.cur == nil {
			it.cur = it.l.pool.get(it.l)
		}
		if err := it.e.fill(it.ctx, nil, it.cur, it.k); err != nil {
			it.err = err
			it.Close()
			return nil, false
		}
		it.k++
		return it.cur, true
	}
	p := it.p
	if it.cur != nil {
		p.free <- it.cur // never blocks: free holds every buffer
		it.cur = nil
	}
	select {
	case b, ok := <-p.ready:
		if !ok {
			it.err = p.err // written before ready was closed
			it.Close()
			return nil, false
		}
		it.cur = b
		return b, true
	case <-it.ctx.Done():
		it.err = it.ctx.Err()
		it.Close()
		return nil, false
	}
}

// Err is the error that ended the epoch early, or nil.
func (it *Iter) Err() error { return it.err }

// Close stops the prefetch goroutine, waits for it to exit and recycles the
// buffers. It is safe to call more than once.
func (it *Iter) Close() {
	if it.closed {
		return
	}
	it.closed = true
	if p := it.p; p != nil {
		p.cleanup.Stop()
		p.stop()
		<-p.exited
		for b := range p.ready {
			it.l.pool.put(b)
		}
		for len(p.free) > 0 {
			it.l.pool.put(<-p.free)
		}
	}
	if it.cur != nil {
		it.l.pool.put(it.cur)
		it.cur = nil
	}
}

// errQuit ends a fill that Close interrupted.
var errQuit = errors.New("data: iterator closed")

// fill reads batch k of the epoch into b. A panic in Dataset.Read becomes an
// error, since it may happen on the prefetch goroutine where nobody could
// recover it. Before each example it returns ctx's error once ctx is
// cancelled, and errQuit once quit is closed: a cancelled Fit or a Close
// waits for the Read in progress, not for the rest of a batch of slow
// reads (a batch of 256 images read at 10 ms each is 2.5 s).
func (e *epochState) fill(ctx context.Context, quit <-chan struct{}, b *Batch, k int) (err error) {
	bs := e.l.cfg.BatchSize
	lo := k * bs
	hi := min(lo+bs, len(e.idx))
	rows := hi - lo
	b.Size = rows
	for f := range b.Data {
		b.Data[f] = b.Data[f][:rows*e.l.width[f]]
	}
	b.Indices = b.Indices[:rows]
	b.Pad = b.Pad[:rows]
	copy(b.Indices, e.idx[lo:hi])
	copy(b.Pad, e.pad[lo:hi])
	r := 0
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("data: %T.Read(%d) %w", e.l.ds, b.Indices[r], panics.Recovered(v))
		}
	}()
	done := ctx.Done()
	for ; r < rows; r++ {
		select {
		case <-done:
			return ctx.Err()
		case <-quit:
			return errQuit
		default:
		}
		for f, w := range e.l.width {
			b.dst[f] = b.Data[f][r*w : (r+1)*w]
		}
		if err := e.l.ds.Read(b.Indices[r], b.dst); err != nil {
			return fmt.Errorf("data: read example %d (batch %d, row %d): %w", b.Indices[r], k, r, err)
		}
	}
	return nil
}

// pipe is the prefetch machinery: the worker takes a free buffer, fills it
// and sends it on ready; Next hands the previous batch back on free. Holding
// Prefetch+1 buffers, the worker runs at most Prefetch batches ahead.
type pipe struct {
	free   chan *Batch
	ready  chan *Batch // closed by the worker when it exits
	quit   chan struct{}
	exited chan struct{}
	err    error // set by the worker before it closes ready
	once   sync.Once
	// cleanup stops the worker of an Iter dropped without Close (say, a
	// loop left by break) once the Iter is collected; the worker does not
	// reference the Iter, so that it can be. The worker cancels it when it
	// exits on its own, so that it never touches the channels afterwards.
	cleanup runtime.Cleanup
}

func (p *pipe) stop() { p.once.Do(func() { close(p.quit) }) }

func startPipe(ctx context.Context, it *Iter, prefetch int) *pipe {
	e := it.e
	nbuf := prefetch + 1
	p := &pipe{
		free:   make(chan *Batch, nbuf),
		ready:  make(chan *Batch, prefetch-1),
		quit:   make(chan struct{}),
		exited: make(chan struct{}),
	}
	for range nbuf {
		p.free <- e.l.pool.get(e.l)
	}
	p.cleanup = runtime.AddCleanup(it, (*pipe).stop, p)
	go p.run(ctx, e)
	return p
}

func (p *pipe) run(ctx context.Context, e *epochState) {
	defer close(p.exited)
	defer p.cleanup.Stop()
	defer close(p.ready)
	for k := 0; k < e.nb; k++ {
		var b *Batch
		select {
		case b = <-p.free:
		case <-p.quit:
			return
		case <-ctx.Done():
			p.err = ctx.Err()
			return
		}
		if err := e.fill(ctx, p.quit, b, k); err != nil {
			p.free <- b
			if err != errQuit {
				p.err = err
			}
			return
		}
		select {
		case p.ready <- b:
		case <-p.quit:
			p.free <- b
			return
		case <-ctx.Done():
			p.free <- b
			p.err = ctx.Err()
			return
		}
	}
}

// batchPool keeps batch buffers between epochs of one loader (and its
// WithSampler copies, which share shapes and batch size).
type batchPool struct {
	mu   sync.Mutex
	bufs []*Batch
}

func (bp *batchPool) get(l *Loader) *Batch {
	bp.mu.Lock()
	if n := len(bp.bufs); n > 0 {
		b := bp.bufs[n-1]
		bp.bufs = bp.bufs[:n-1]
		bp.mu.Unlock()
		return b
	}
	bp.mu.Unlock()
	bs := l.cfg.BatchSize
	b := &Batch{
		Fields:  l.fields,
		Data:    make([][]float32, len(l.fields)),
		Indices: make([]int, 0, bs),
		Pad:     make([]bool, 0, bs),
		dst:     make([][]float32, len(l.fields)),
	}
	for f, w := range l.width {
		b.Data[f] = make([]float32, 0, bs*w)
	}
	return b
}

func (bp *batchPool) put(b *Batch) {
	bp.mu.Lock()
	bp.bufs = append(bp.bufs, b)
	bp.mu.Unlock()
}
