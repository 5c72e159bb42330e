//go:build unix

package launch_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fulgur-ml/fulgur/strategy/launch"
)

const (
	watchChildEnv = "FULGUR_TEST_WATCH_STOP_SIGNALS"
	stopChildEnv  = "FULGUR_TEST_STOP_ON_SIGNAL"
)

// watchChild is the process TestWatchStopSignals signals: it watches
// SIGINT, prints what the watcher hands it, and waits to be killed.
func watchChild() {
	launch.WatchStopSignals([]os.Signal{os.Interrupt},
		func(s os.Signal, first bool) { fmt.Printf("request %v first=%v\n", s, first) },
		func(s os.Signal) { fmt.Printf("exit now %v\n", s) })
	fmt.Println("watching")
	time.Sleep(time.Minute)
	fmt.Println("survived")
	os.Exit(3)
}

// stopChild is the process TestStopOnSignalRepeat signals: a supervisor
// whose ranks take long to stop.
func stopChild() {
	ctx, stop := launch.StopOnSignal(context.Background())
	fmt.Println("watching")
	<-ctx.Done()
	fmt.Println("stopping:", context.Cause(ctx))
	time.Sleep(time.Minute) // the ranks still saving
	fmt.Println("stopped", stop())
	os.Exit(3)
}

// startChild runs this test binary as the child of test (childEnv=1) and
// returns it with a function that reads its next line of output, and the
// channel of the lines left.
func startChild(t *testing.T, test, childEnv string) (*exec.Cmd, func() string, <-chan string) {
	t.Helper()
	if testing.Short() {
		t.Skip("starts a child process and waits out DuplicateSignalWindow")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^"+test+"$")
	cmd.Env = append(os.Environ(), childEnv+"=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill() })
	lines := make(chan string, 8)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	next := func() string {
		t.Helper()
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatal("the child's output ended early")
			}
			return l
		case <-time.After(30 * time.Second):
			t.Fatal("no line from the child within 30 s")
		}
		return ""
	}
	if l := next(); l != "watching" {
		t.Fatalf("child: %q, want \"watching\"", l)
	}
	return cmd, next, lines
}

// diedOf fails the test unless err (cmd.Wait's) says the child died of sig.
func diedOf(t *testing.T, err error, sig syscall.Signal) {
	t.Helper()
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("child ended with %v, want it killed by %v", err, sig)
	}
	if ws, ok := ee.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != sig {
		t.Errorf("child ended with %v, want it killed by %v", err, sig)
	}
}

// A SIGINT and its repeats within DuplicateSignalWindow are one request,
// handed over in order; the first one after the window runs atExit and
// the process dies of the signal, as it would have without handlers.
func TestWatchStopSignals(t *testing.T) {
	if os.Getenv(watchChildEnv) == "1" {
		watchChild()
	}
	cmd, next, lines := startChild(t, "TestWatchStopSignals", watchChildEnv)
	var got []string
	for {
		if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
			t.Fatal(err)
		}
		l := next()
		got = append(got, l)
		if strings.HasPrefix(l, "exit now") {
			break
		}
		if len(got) > 100 {
			t.Fatalf("no exit after %d signals over more than DuplicateSignalWindow: %q", len(got), got)
		}
		time.Sleep(signalStep)
	}
	if len(got) < 3 || got[0] != "request interrupt first=true" {
		t.Fatalf("child printed %q, want the first request, repeats, then the exit", got)
	}
	for _, l := range got[1 : len(got)-1] {
		if l != "request interrupt first=false" {
			t.Fatalf("child printed %q, want every repeat within the window as \"request interrupt first=false\"", got)
		}
	}
	if l := got[len(got)-1]; l != "exit now interrupt" {
		t.Errorf("last line %q, want \"exit now interrupt\"", l)
	}
	for l := range lines {
		t.Errorf("child printed %q after its exit was asked for", l)
	}
	diedOf(t, cmd.Wait(), syscall.SIGINT)
}

// signalStep spaces the test's signals: a tenth of the window, so that
// several repeats land inside it.
const signalStep = launch.DuplicateSignalWindow / 10

// The elastic supervisor's first SIGINT stops the job, a repeat within
// DuplicateSignalWindow is the same request, and one after it ends the
// supervisor at once, by the signal (it used to be ignored: a user could
// not cut a slow shutdown short).
func TestStopOnSignalRepeat(t *testing.T) {
	if os.Getenv(stopChildEnv) == "1" {
		stopChild()
	}
	cmd, next, _ := startChild(t, "TestStopOnSignalRepeat", stopChildEnv)
	cmd.Process.Signal(os.Interrupt)
	if l := next(); l != "stopping: stopped by SIGINT" {
		t.Fatalf("child printed %q after the first SIGINT, want \"stopping: stopped by SIGINT\" (the context's cause)", l)
	}
	cmd.Process.Signal(os.Interrupt) // the same request
	time.Sleep(launch.DuplicateSignalWindow + 500*time.Millisecond)
	cmd.Process.Signal(os.Interrupt)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		diedOf(t, err, syscall.SIGINT)
	case <-time.After(20 * time.Second):
		t.Fatal("the supervisor ignored a SIGINT after the window: a user cannot cut its shutdown short")
	}
}

const lateRepeatChildEnv = "FULGUR_TEST_LATE_REPEAT"

// lateRepeatChild is the process TestRepeatAfterTheWatchEnded signals: its
// watch ends right after the first SIGINT (a run that stopped at once),
// and the repeat of that SIGINT comes after (a launcher's forward, late).
func lateRepeatChild() {
	requested := make(chan struct{})
	var first time.Time
	stop := launch.WatchStopSignals([]os.Signal{os.Interrupt},
		func(s os.Signal, isFirst bool) {
			if isFirst {
				first = time.Now()
				close(requested)
			}
		}, nil)
	fmt.Println("watching")
	<-requested
	stop()
	fmt.Println("stopped")
	syscall.Kill(os.Getpid(), syscall.SIGINT) // the repeat, within the window
	// Wait out the window: the repeat, had it killed the process, has.
	time.Sleep(time.Until(first.Add(launch.DuplicateSignalWindow + 300*time.Millisecond)))
	fmt.Println("after the window")
	time.Sleep(time.Minute)
	os.Exit(3)
}

// A repeat of the first SIGINT that arrives after the watch ended, within
// DuplicateSignalWindow, is still the same request: it used to find the
// signal's default action and kill the process (a ddp_spawn worker that
// had saved its interrupt checkpoint died before handing the result to
// its launcher, which then reported "interrupted before it began").
// After the window a SIGINT kills as before.
func TestRepeatAfterTheWatchEnded(t *testing.T) {
	if os.Getenv(lateRepeatChildEnv) == "1" {
		lateRepeatChild()
	}
	cmd, next, _ := startChild(t, "TestRepeatAfterTheWatchEnded", lateRepeatChildEnv)
	cmd.Process.Signal(os.Interrupt)
	if l := next(); l != "stopped" {
		t.Fatalf("child printed %q, want \"stopped\"", l)
	}
	if l := next(); l != "after the window" {
		t.Fatalf("child printed %q, want \"after the window\": the repeat within the window killed it", l)
	}
	cmd.Process.Signal(os.Interrupt)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		diedOf(t, err, syscall.SIGINT)
	case <-time.After(20 * time.Second):
		t.Fatal("a SIGINT after the window did not end the process")
	}
}
