package optim

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
)

// An Optimizer updates a span of a flat parameter buffer in place from the
// matching span of the flat gradient buffer. State (momentum, moments) is kept
// only for the span given to Bind, so a sharded strategy holds 1/N of it.
type Optimizer interface {
	// Name is the registry name: "sgd", "adam" or "adamw".
	Name() string
	// LR is the learning rate the next Update uses.
	LR() float64
	// SetLR changes the learning rate; it takes effect from the next Update.
	SetLR(lr float64)
	// Bind reserves state for flat offsets [lo, hi) of a buffer. It must be
	// called once, before the first step and before LoadState.
	Bind(lo, hi int) error
	// Begin starts one optimizer step: it advances the step counter used for
	// bias correction and fixes the per-step constants. Call it once per
	// step, before any Update of that step.
	Begin()
	// Update32 and Update64 update params[i] from grads[i] for the flat
	// offsets [off, off+len(params)), which must lie inside the bound span.
	// Each offset must be updated exactly once per step. They do not
	// allocate (state is allocated once, by the first call).
	Update32(params, grads []float32, off int)
	Update64(params, grads []float64, off int)
	// State returns copies of the per-span state buffers (as float64) and
	// scalars, for checkpointing. LoadState restores them, with an error
	// naming what does not match.
	State() State
	LoadState(State) error
}

// State is an optimizer's checkpointable state for its bound span [Lo, Hi).
// Buffers hold one value per offset of the span, named as torch names them
// ("momentum_buffer", "exp_avg", "exp_avg_sq", "max_exp_avg_sq"); float64 holds float32 state
// exactly. Scalars holds "lr" (restored by LoadState) and the
// hyper-parameters (recorded for inspection; the optimizer's own
// configuration wins on load).
type State struct {
	Step    int64
	Scalars map[string]float64
	Buffers map[string][]float64
	Lo, Hi  int
}

// Names accepted by Lookup.
var lookupNames = []string{"adam", "adamw", "sgd"}

// Lookup returns an optimizer by registry name ("sgd", "adam", "adamw") with
// learning rate lr and every other setting at its default. It serves command
// lines; programs build configs and call NewSGD, NewAdam or NewAdamW.
func Lookup(name string, lr float64) (Optimizer, error) {
	var (
		o   Optimizer
		err error
	)
	// Each case assigns through a typed variable: returning NewSGD's
	// (*SGD)(nil) as an Optimizer would give a non-nil interface.
	switch strings.ToLower(strings.TrimSpace(name)) {
	case "sgd":
		var s *SGD
		if s, err = NewSGD(SGDConfig{LR: lr}); err == nil {
			o = s
		}
	case "adam", "adamw":
		var a *Adam
		if strings.EqualFold(strings.TrimSpace(name), "adam") {
			a, err = NewAdam(AdamConfig{LR: lr})
		} else {
			a, err = NewAdamW(AdamConfig{LR: lr})
		}
		if err == nil {
			o = a
		}
	default:
		err = fmt.Errorf("optimizer %q is unknown: use one of %s", name, strings.Join(lookupNames, ", "))
	}
	return o, err
}

// problems collects configuration errors so that Validate reports all at once.
type problems []error

func (p *problems) addf(format string, args ...any) {
	*p = append(*p, fmt.Errorf(format, args...))
}

func (p problems) err() error { return errors.Join(p...) }

func finite(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }

// Precision of the state, fixed by the first Update after Bind.
const (
	precUnset = 0
	prec32    = 32
	prec64    = 64
)

// spanState holds the per-offset state buffers of one optimizer for its bound
// span [lo, hi). The buffers are allocated at the first Update, in the
// precision of that Update's parameters, so float32 models keep float32
// state like torch does. Until then, loaded state waits in pending.
type spanState struct {
	who    string   // "SGD", "Adam", "AdamW": for messages
	names  []string // state buffer names, in a fixed order
	lo, hi int
	bound  bool

	prec    atomic.Int32
	mu      sync.Mutex
	f32     [][]float32
	f64     [][]float64
	pending [][]float64 // from LoadState before the precision is fixed
}

func (s *spanState) bind(lo, hi int) error {
	if s.bound {
		return fmt.Errorf("%s.Bind(%d, %d): already bound to [%d, %d): an optimizer serves one span of one training; create a new optimizer per span (a module's ConfigureOptimizers is a factory: return a new optimizer from every call, not one kept from an earlier Fit)", s.who, lo, hi, s.lo, s.hi)
	}
	if lo < 0 || hi < lo {
		return fmt.Errorf("%s.Bind(%d, %d): the span is not a range of flat offsets: use 0 <= lo <= hi", s.who, lo, hi)
	}
	s.lo, s.hi, s.bound = lo, hi, true
	return nil
}

// check panics with a clear message when an Update call breaks the contract.
// These are programming errors in a strategy, never user input.
func (s *spanState) check(method string, np, ng, off int, step int64) {
	if !s.bound {
		panic(fmt.Sprintf("optim: %s.%s: the optimizer is not bound: call Bind(lo, hi) first", s.who, method))
	}
	if step == 0 {
		panic(fmt.Sprintf("optim: %s.%s: no step begun: call Begin before the first Update of each step", s.who, method))
	}
	if np != ng {
		panic(fmt.Sprintf("optim: %s.%s: %d params but %d grads: pass matching spans", s.who, method, np, ng))
	}
	if off < s.lo || off+np > s.hi {
		panic(fmt.Sprintf("optim: %s.%s: offsets [%d, %d) lie outside the bound span [%d, %d)", s.who, method, off, off+np, s.lo, s.hi))
	}
}

// use returns the state buffers in T, allocating them on first use.
func use[T float](s *spanState, method string) [][]T {
	p := precOf[T]()
	if s.prec.Load() != p {
		fix[T](s, method)
	}
	return *bufsOf[T](s)
}

// precOf is prec32 or prec64: T's size in bits.
func precOf[T float]() int32 {
	var z T
	if _, ok := any(z).(float32); ok {
		return prec32
	}
	return prec64
}

// bufsOf is s.f32 or s.f64, whichever holds T.
func bufsOf[T float](s *spanState) *[][]T {
	if b, ok := any(&s.f32).(*[][]T); ok {
		return b
	}
	return any(&s.f64).(*[][]T)
}

// fix allocates the state in T, from the pending loaded state if any, and
// fixes the precision; it panics when the state is already in the other
// precision.
func fix[T float](s *spanState, method string) {
	p := precOf[T]()
	s.mu.Lock()
	defer s.mu.Unlock()
	switch cur := s.prec.Load(); cur {
	case p:
		return // another goroutine got here first
	case precUnset:
	default:
		panic(fmt.Sprintf("optim: %s.%s: the state is float%d (fixed by the first update) and cannot serve float%d parameters: use one optimizer per dtype buffer", s.who, method, cur, p))
	}
	n := s.hi - s.lo
	b := make([][]T, len(s.names))
	for k := range b {
		b[k] = make([]T, n)
		if s.pending != nil {
			narrow(b[k], s.pending[k])
		}
	}
	*bufsOf[T](s) = b
	s.pending = nil
	s.prec.Store(p)
}

// narrow copies src into dst rounding to T (exactly, for float64).
func narrow[T float](dst []T, src []float64) {
	for i, x := range src {
		dst[i] = T(x)
	}
}

// widen copies src into dst as float64, which holds both types exactly.
func widen[T float](dst []float64, src []T) {
	for i, x := range src {
		dst[i] = float64(x)
	}
}

// export returns float64 copies of the state buffers.
func (s *spanState) export() map[string][]float64 {
	out := make(map[string][]float64, len(s.names))
	if !s.bound {
		return out
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.hi - s.lo
	for k, name := range s.names {
		b := make([]float64, n)
		switch {
		case s.prec.Load() == prec32:
			widen(b, s.f32[k])
		case s.prec.Load() == prec64:
			widen(b, s.f64[k])
		case s.pending != nil:
			copy(b, s.pending[k])
		}
		out[name] = b
	}
	return out
}

// load checks st against the bound span and copies its buffers in. With
// Step 0 missing buffers are allowed (they are zero), so the state of an
// optimizer that never stepped loads anywhere.
func (s *spanState) load(st State) error {
	if !s.bound {
		return fmt.Errorf("%s.LoadState: the optimizer is not bound: call Bind(lo, hi) with the span the state was saved for first", s.who)
	}
	if st.Lo != s.lo || st.Hi != s.hi {
		return fmt.Errorf("%s.LoadState: the state covers offsets [%d, %d) but the optimizer is bound to [%d, %d): bind the span it was saved for (with sharding, the same world size and rank)", s.who, st.Lo, st.Hi, s.lo, s.hi)
	}
	if st.Step < 0 {
		return fmt.Errorf("%s.LoadState: Step is %d: a saved state has Step >= 0", s.who, st.Step)
	}
	known := make(map[string]bool, len(s.names))
	for _, name := range s.names {
		known[name] = true
	}
	var extra []string
	for name := range st.Buffers {
		if !known[name] {
			extra = append(extra, name)
		}
	}
	if len(extra) > 0 {
		sort.Strings(extra)
		return fmt.Errorf("%s.LoadState: the state has buffers %q that %s does not keep (it keeps %q): was it saved by another optimizer or with other settings?", s.who, extra, s.who, s.names)
	}
	n := s.hi - s.lo
	for _, name := range s.names {
		b, ok := st.Buffers[name]
		if !ok {
			if st.Step == 0 {
				continue
			}
			return fmt.Errorf("%s.LoadState: the state at step %d has no buffer %q: was it saved by another optimizer or with other settings?", s.who, st.Step, name)
		}
		if len(b) != n {
			return fmt.Errorf("%s.LoadState: buffer %q has %d values but the span [%d, %d) has %d: the checkpoint does not match this model", s.who, name, len(b), s.lo, s.hi, n)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, name := range s.names {
		b := st.Buffers[name] // nil when absent: zeros
		switch s.prec.Load() {
		case prec32:
			clear(s.f32[k])
			narrow(s.f32[k], b)
		case prec64:
			clear(s.f64[k])
			narrow(s.f64[k], b)
		default:
			if s.pending == nil {
				s.pending = make([][]float64, len(s.names))
			}
			s.pending[k] = make([]float64, n)
			copy(s.pending[k], b)
		}
	}
	return nil
}

func loadLR(who string, st State) (float64, error) {
	lr, ok := st.Scalars["lr"]
	if !ok {
		return 0, fmt.Errorf("%s.LoadState: the state has no scalar \"lr\": was it written by State?", who)
	}
	if !finite(lr) || lr < 0 {
		return 0, fmt.Errorf("%s.LoadState: scalar \"lr\" is %v: a saved learning rate is finite and >= 0", who, lr)
	}
	return lr, nil
}
