package collective

import (
	"context"
	"fmt"
	"sync"
)

// Group is a Collective plus Async: every operation, synchronous or not, runs
// on one communication goroutine in submission order.
type Group interface {
	Collective
	Async
}

// WithAsync wraps c so that all of its operations run, in submission order,
// on one goroutine owned by the returned value. Callers must then use only the
// returned value, never c directly. Closing the returned value waits for
// queued operations to finish, then closes c.
func WithAsync(c Collective) Group {
	if g, ok := c.(Group); ok {
		return g // already ordered by its own communication goroutine
	}
	g := &asyncGroup{c: c, q: make(chan *handle, 64), done: make(chan struct{})}
	go g.loop()
	return g
}

type asyncGroup struct {
	c      Collective
	mu     sync.Mutex // guards closed and sends on q
	closed bool
	q      chan *handle
	done   chan struct{}
}

type handle struct {
	ctx  context.Context
	run  func(ctx context.Context) error
	err  error
	done chan struct{}
}

func (h *handle) Wait() error { <-h.done; return h.err }

func (g *asyncGroup) loop() {
	defer close(g.done)
	for h := range g.q {
		if err := h.ctx.Err(); err != nil {
			h.err = err
		} else {
			h.err = h.run(h.ctx)
		}
		close(h.done)
	}
}

func (g *asyncGroup) submit(ctx context.Context, run func(context.Context) error) *handle {
	h := &handle{ctx: ctx, run: run, done: make(chan struct{})}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		h.err = fmt.Errorf("collective: rank %d: %w", g.c.Rank(), ErrClosed)
		close(h.done)
		return h
	}
	g.q <- h
	return h
}

func (g *asyncGroup) Rank() int { return g.c.Rank() }
func (g *asyncGroup) Size() int { return g.c.Size() }

func (g *asyncGroup) AllReduce(ctx context.Context, buf any, op Op) error {
	return g.AllReduceAsync(ctx, buf, op).Wait()
}

func (g *asyncGroup) AllReduceAsync(ctx context.Context, buf any, op Op) Handle {
	return g.submit(ctx, func(ctx context.Context) error { return g.c.AllReduce(ctx, buf, op) })
}

func (g *asyncGroup) Broadcast(ctx context.Context, buf any, root int) error {
	return g.submit(ctx, func(ctx context.Context) error { return g.c.Broadcast(ctx, buf, root) }).Wait()
}

func (g *asyncGroup) AllGather(ctx context.Context, send, recv any) error {
	return g.AllGatherAsync(ctx, send, recv).Wait()
}

func (g *asyncGroup) AllGatherAsync(ctx context.Context, send, recv any) Handle {
	return g.submit(ctx, func(ctx context.Context) error { return g.c.AllGather(ctx, send, recv) })
}

func (g *asyncGroup) ReduceScatter(ctx context.Context, send, recv any, op Op) error {
	return g.ReduceScatterAsync(ctx, send, recv, op).Wait()
}

func (g *asyncGroup) ReduceScatterAsync(ctx context.Context, send, recv any, op Op) Handle {
	return g.submit(ctx, func(ctx context.Context) error { return g.c.ReduceScatter(ctx, send, recv, op) })
}

func (g *asyncGroup) Barrier(ctx context.Context) error {
	return g.submit(ctx, func(ctx context.Context) error { return g.c.Barrier(ctx) }).Wait()
}

// Unwrap returns the wrapped Collective (for backend-specific abilities).
func (g *asyncGroup) Unwrap() Collective { return g.c }

func (g *asyncGroup) Close() error {
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return nil
	}
	g.closed = true
	close(g.q)
	g.mu.Unlock()
	// Close the backend first so a queued operation blocked on a peer fails
	// fast instead of holding Close until the timeout.
	err := g.c.Close()
	<-g.done
	return err
}
