//go:build unix

package launch_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/fulgur-ml/fulgur/strategy/launch"
)

const stopChildEnv = "FULGUR_TEST_STOP_ON_SIGNAL"

// stopChild is the process TestStopOnSignalRepeat signals: a supervisor
// whose ranks take long to stop.
func stopChild() {
	ctx, stop := launch.StopOnSignal(context.Background())
	fmt.Println("watching")
	<-ctx.Done()
	fmt.Println("stopping")
	time.Sleep(time.Minute) // the ranks still saving
	fmt.Println("stopped", stop())
	os.Exit(3)
}

// The elastic supervisor's first SIGINT stops the job, a repeat within
// DuplicateSignalWindow is the same request, and one after it ends the
// supervisor at once, by the signal (it used to be ignored: a user could
// not cut a slow shutdown short).
func TestStopOnSignalRepeat(t *testing.T) {
	if os.Getenv(stopChildEnv) == "1" {
		stopChild()
	}
	if testing.Short() {
		t.Skip("starts a child process and waits out DuplicateSignalWindow")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestStopOnSignalRepeat$")
	cmd.Env = append(os.Environ(), stopChildEnv+"=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	lines := make(chan string, 8)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	expect := func(want string) {
		t.Helper()
		select {
		case got := <-lines:
			if got != want {
				t.Fatalf("child printed %q, want %q", got, want)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("child did not print %q", want)
		}
	}
	expect("watching")
	cmd.Process.Signal(os.Interrupt)
	expect("stopping")
	cmd.Process.Signal(os.Interrupt) // the same request
	time.Sleep(launch.DuplicateSignalWindow + 500*time.Millisecond)
	cmd.Process.Signal(os.Interrupt)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			t.Fatalf("child ended with %v", err)
		}
		ws := ee.Sys().(syscall.WaitStatus)
		if !ws.Signaled() || ws.Signal() != syscall.SIGINT {
			t.Errorf("child ended with %v, want death by SIGINT", ee)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the supervisor ignored a SIGINT after the window: a user cannot cut its shutdown short")
	}
}
