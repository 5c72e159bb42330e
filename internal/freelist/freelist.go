package freelist

import "sync"

// List holds values between calls: a sync.Pool drops what it holds at
// every GC, so the call after one allocates again, which the kernels and
// the BLAS calls promise not to do once warm (their allocation tests; a GC
// can run during any call). The lists stay short: a value is taken for one
// call and put back. The zero List is empty and ready.
type List[E any] struct {
	mu   sync.Mutex
	free []*E
}

// Get takes a value from the list, or a new one (E's zero value) when it
// is empty.
func (l *List[E]) Get() *E {
	l.mu.Lock()
	defer l.mu.Unlock()
	if k := len(l.free); k > 0 {
		e := l.free[k-1]
		l.free = l.free[:k-1]
		return e
	}
	return new(E)
}

// Put gives e back for a later Get.
func (l *List[E]) Put(e *E) {
	l.mu.Lock()
	l.free = append(l.free, e)
	l.mu.Unlock()
}
