//go:build unix

package strategy_test

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fulgur-ml/fulgur/strategy"
)

const watchChildEnv = "FULGUR_TEST_WATCH_STOP_SIGNALS"

// watchChild is the process TestWatchStopSignals signals: it watches
// SIGINT, prints what the watcher hands it, and waits to be killed.
func watchChild() {
	strategy.WatchStopSignals([]os.Signal{os.Interrupt},
		func(s os.Signal, first bool) { fmt.Printf("request %v first=%v\n", s, first) },
		func(s os.Signal) { fmt.Printf("exit now %v\n", s) })
	fmt.Println("watching")
	time.Sleep(time.Minute)
	fmt.Println("survived")
	os.Exit(3)
}

// A SIGINT and its repeats within DuplicateSignalWindow are one request,
// handed over in order; the first one after the window runs atExit and
// the process dies of the signal, as it would have without handlers.
func TestWatchStopSignals(t *testing.T) {
	if os.Getenv(watchChildEnv) == "1" {
		watchChild()
	}
	if testing.Short() {
		t.Skip("starts a child process and waits out DuplicateSignalWindow")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestWatchStopSignals$")
	cmd.Env = append(os.Environ(), watchChildEnv+"=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	next := func() string {
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
	err = cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("child ended with %v, want it killed by SIGINT", err)
	}
	if ws, ok := ee.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGINT {
		t.Errorf("child ended with %v, want it killed by SIGINT", err)
	}
}

// signalStep spaces the test's signals: a tenth of the window, so that
// several repeats land inside it.
const signalStep = strategy.DuplicateSignalWindow / 10
