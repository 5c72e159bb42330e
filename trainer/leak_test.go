package trainer_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fulgur-ml/fulgur/data"
	"github.com/fulgur-ml/fulgur/strategy/collective"
	"github.com/fulgur-ml/fulgur/strategy/collective/inproc"
	"github.com/fulgur-ml/fulgur/strategy/ddp"
	"github.com/fulgur-ml/fulgur/strategy/strategytest"
	"github.com/fulgur-ml/fulgur/trainer"
)

// processState is what a call may leave behind in the process: its
// goroutines and its open file descriptors.
type processState struct {
	goroutines map[string]string // stack by goroutine id
	fds        []string
}

func currentState() processState {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf)) // a dump cut short would lose goroutines
	}
	s := processState{goroutines: goroutines(string(buf))}
	ents, _ := os.ReadDir("/proc/self/fd") // Linux; elsewhere no fds are compared
	for _, e := range ents {
		if l, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name())); err == nil {
			s.fds = append(s.fds, l)
		}
	}
	slices.Sort(s.fds)
	return s
}

// goroutines reads a dump of every goroutine (runtime.Stack) into their
// stacks by goroutine id. A goroutine is known by its id, which the
// runtime never gives another: its text changes between two dumps as it
// waits in other places, and the dump's last goroutine ends with the
// dump's final newline.
func goroutines(dump string) map[string]string {
	m := map[string]string{}
	for _, g := range strings.Split(dump, "\n\n") {
		head, stack, _ := strings.Cut(g, "\n") // "goroutine 7 [chan receive]:"
		if rest, ok := strings.CutPrefix(head, "goroutine "); ok {
			id, _, _ := strings.Cut(rest, " ")
			m[id] = strings.TrimSpace(stack)
		}
	}
	return m
}

// started describes the goroutines of now that did not run before; each
// stack ends with the goroutine that created it.
func started(before, now map[string]string) []string {
	var extra []string
	for id, stack := range now {
		if _, ok := before[id]; !ok {
			extra = append(extra, fmt.Sprintf("goroutine %s, started since, in\n%s", id, stack))
		}
	}
	slices.Sort(extra)
	return extra
}

// leftSince says what runs or is open now that did not before, once the
// process has had up to 10 s to let its goroutines end (a loaded machine
// schedules them late); "" when nothing is.
func leftSince(before processState) string {
	deadline := time.Now().Add(10 * time.Second)
	for {
		now := currentState()
		extra := started(before.goroutines, now.goroutines)
		fds := slices.Clone(now.fds)
		for _, f := range before.fds {
			if i := slices.Index(fds, f); i >= 0 {
				fds = slices.Delete(fds, i, i+1)
			}
		}
		if len(fds) > 0 {
			extra = append(extra, fmt.Sprintf("open files: %v", fds))
		}
		if len(extra) == 0 || time.Now().After(deadline) {
			return strings.Join(extra, "\n")
		}
		time.Sleep(20 * time.Millisecond) // polling the runtime, not a goroutine of the test
	}
}

// A goroutine that ran before a call is not one the call left, whatever
// its place in the runtime's dump or its state. With stacks as keys, the
// dump's last goroutine, which ends with the dump's final newline, counted
// as new once a goroutine written after it had ended: loaded -race runs
// reported so the test's parent goroutine, and an idle group goroutine
// that an earlier test left (after "single, a callback's panic", which
// makes no group), as two CI runs did after the in-process ddp case,
// whose ranks' groups DDP closes (the case checks it). The dumps below
// are the runtime's own blocks, put in the orders that do that.
func TestLeftSinceNamesOnlyNewGoroutines(t *testing.T) {
	stop := make(chan struct{})
	defer close(stop)
	var running sync.WaitGroup
	running.Add(3) // three goroutines, each with a stack of its own
	go func() { running.Done(); <-stop }()
	go func() { running.Done(); <-stop }()
	go func() { running.Done(); <-stop }()
	running.Wait()
	buf := make([]byte, 1<<20)
	dump := string(buf[:runtime.Stack(buf, true)])
	var mine, others []string
	for _, b := range strings.Split(strings.TrimSuffix(dump, "\n"), "\n\n") {
		if strings.Contains(b, ".TestLeftSinceNamesOnlyNewGoroutines.func") {
			mine = append(mine, b)
		} else {
			others = append(others, b)
		}
	}
	if len(mine) != 3 {
		t.Fatalf("the dump shows %d of the test's 3 goroutines:\n%s", len(mine), dump)
	}
	write := func(blocks ...[]string) string { return strings.Join(slices.Concat(blocks...), "\n\n") + "\n" } // as runtime.Stack does
	before := goroutines(write(others, mine))
	// The last goroutine has ended: the one before it is now last.
	if extra := started(before, goroutines(write(others, mine[:2]))); len(extra) > 0 {
		t.Errorf("a goroutine that ran before is reported as new once it is the dump's last:\n%s", strings.Join(extra, "\n"))
	}
	// A goroutine that ran before now waits elsewhere (a group's goroutine
	// back at its queue after an operation).
	head, stack, _ := strings.Cut(mine[0], "\n")
	moved := []string{head + "\nruntime.gopark(0x1)\n\t/src/proc.go:1 +0x1\n" + stack}
	if extra := started(before, goroutines(write(others, moved, mine[1:]))); len(extra) > 0 {
		t.Errorf("a goroutine that ran before is reported as new once its stack changed:\n%s", strings.Join(extra, "\n"))
	}
	// Another goroutine has started: that one, and only that one, is new.
	late := []string{fmt.Sprintf("goroutine %d [chan receive]:\nmain.late()\n\t/src/late.go:1 +0x1\ncreated by main.main in goroutine 1\n\t/src/late.go:2 +0x2", 1<<40)}
	if extra := started(before, goroutines(write(others, mine, late))); len(extra) != 1 || !strings.Contains(extra[0], "main.late()") {
		t.Errorf("one goroutine started, reported:\n%s", strings.Join(extra, "\n"))
	}
}

// failAt is a callback that fails, panics or cancels at a training batch.
type failAt struct {
	step   int
	what   string // "error", "panic" or "cancel"
	cancel context.CancelFunc
}

func (*failAt) Name() string { return "failAt" }

func (f *failAt) OnTrainBatchEnd(_ context.Context, s *trainer.State) error {
	if s.GlobalStep != f.step {
		return nil
	}
	switch f.what {
	case "panic":
		panic("a callback's bug")
	case "cancel":
		f.cancel()
		return nil
	}
	return errors.New("a callback failed")
}

// Fit, Validate and Predict leave no goroutine and no open file behind
// once they have returned, normally, with an error, after a panic in user
// code or on a cancelled context (and, for what the strategy holds,
// Teardown): a program that trains many times (a sweep, a service) would
// otherwise grow with every call. The signal watcher of Fit is one of
// those goroutines.
func TestCallsLeaveNothingRunning(t *testing.T) {
	ds, err := strategytest.Regression(96, 4, 2, 1)
	if err != nil {
		t.Fatal(err)
	}
	newLoader := func(bs int, prefetch int) *data.Loader {
		l, err := data.NewLoader(ds, data.LoaderConfig{BatchSize: bs, Shuffle: true, Seed: 2, Prefetch: prefetch})
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	model := func() *strategytest.MLP { return &strategytest.MLP{In: 4, Hidden: 8, Out: 2} }
	config := func(c trainer.Config) trainer.Config {
		c.Seed, c.Out, c.DefaultRootDir = 1, io.Discard, t.TempDir()
		if c.MaxEpochs == 0 {
			c.MaxEpochs = 2
		}
		return c
	}
	// fit runs Fit, then Predict and Validate when it succeeded, then
	// Teardown, and returns Fit's error.
	fit := func(c trainer.Config, cb *failAt) error {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		if cb != nil {
			cb.cancel = cancel
			c.Callbacks = []trainer.Callback{cb}
		}
		tr, err := trainer.New(config(c))
		if err != nil {
			return err
		}
		m := model()
		err = tr.Fit(ctx, m, newLoader(8, 0), newLoader(16, 0))
		if err == nil {
			if _, perr := tr.Predict(ctx, m, newLoader(16, 0)); perr != nil {
				return perr
			}
			if _, verr := tr.Validate(ctx, m, newLoader(16, -1)); verr != nil {
				return verr
			}
		}
		return errors.Join(err, tr.Teardown(context.Background()))
	}
	// The first Fit starts what lives as long as the process (os/signal's
	// loop, the kernels' worker pool).
	if err := fit(trainer.Config{}, nil); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name    string
		run     func() error
		wantErr string
	}{
		{"single", func() error { return fit(trainer.Config{}, nil) }, ""},
		{"single, a callback's error", func() error { return fit(trainer.Config{}, &failAt{step: 3, what: "error"}) }, "a callback failed"},
		{"single, a callback's panic", func() error { return fit(trainer.Config{}, &failAt{step: 3, what: "panic"}) }, "a callback's bug"},
		{"single, cancelled", func() error { return fit(trainer.Config{MaxEpochs: 1000}, &failAt{step: 3, what: "cancel"}) }, "context canceled"},
		{"dp", func() error { return fit(trainer.Config{Strategy: "dp", Devices: 2}, nil) }, ""},
		{"dp, cancelled", func() error {
			return fit(trainer.Config{Strategy: "dp", Devices: 2, MaxEpochs: 1000}, &failAt{step: 3, what: "cancel"})
		}, "context canceled"},
		{"in-process ddp", func() error {
			g, err := inproc.NewGroup(2)
			if err != nil {
				return err
			}
			errs := make([]error, 2)
			var wg sync.WaitGroup
			for r := range 2 {
				s, err := ddp.NewDDP(ddp.DDPConfig{Group: g[r]})
				if err != nil {
					return err
				}
				wg.Go(func() { errs[r] = fit(trainer.Config{StrategyImpl: s, HandleSignals: trainer.Bool(false)}, nil) })
			}
			wg.Wait()
			// DDP took each rank's group over (DDPConfig.Group): Teardown
			// closed it. A cancelled context makes an open group answer
			// at once instead of waiting for its peer.
			done, cancel := context.WithCancel(context.Background())
			cancel()
			for r, m := range g {
				if err := m.Barrier(done); !errors.Is(err, collective.ErrClosed) {
					errs = append(errs, fmt.Errorf("rank %d: a barrier on the group after Teardown returned %v, want collective.ErrClosed: DDP closes the group it was given", r, err))
				}
			}
			return errors.Join(errs...)
		}, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := currentState()
			err := c.run()
			if c.wantErr == "" && err != nil {
				t.Fatal(err)
			}
			if c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr)) {
				t.Fatalf("error %v, want one saying %q", err, c.wantErr)
			}
			if left := leftSince(before); left != "" {
				t.Errorf("left behind:\n%s", left)
			}
		})
	}
}
