package launch_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/fulgur-ml/fulgur/strategy/launch"
)

// elasticChild is a rank of an elastic test job. how is "kill:R:N" (rank R
// SIGKILLs itself in the first N attempts; "int:R:N" SIGINT), "panic:R" (rank R panics in
// every attempt) or "exit:R:N" (rank R exits with status 3 in the first N
// attempts, printing the attempt). A rank that does not fail prints its
// view of the job and exits 0, except that while the failing rank is alive
// the others wait to be stopped, as ranks blocked in a collective would.
func elasticChild(how string) {
	if dir, ok := strings.CutPrefix(how, "term:"); ok {
		// Waits for SIGTERM or SIGINT once its start is on disk.
		ch := make(chan os.Signal, 1)
		signal.Notify(ch, syscall.SIGTERM, os.Interrupt)
		os.WriteFile(filepath.Join(dir, "started-"+os.Getenv(launch.EnvRank)), nil, 0o644)
		s := <-ch
		name := "SIGTERM"
		if s == os.Interrupt {
			name = "SIGINT"
		}
		fmt.Printf("rank=%s got %s\n", os.Getenv(launch.EnvRank), name)
		os.Exit(0)
	}
	if dir, ok := strings.CutPrefix(how, "stopped:"); ok {
		// A rank that a Ctrl-C reached before its launcher read it: it
		// saves and exits 130, rank 0 first, rank 1 once the test says.
		r := os.Getenv(launch.EnvRank)
		if r == "1" {
			for {
				if _, err := os.Stat(filepath.Join(dir, "go")); err == nil {
					break
				}
				time.Sleep(5 * time.Millisecond) // polling for the test's file
			}
		}
		os.WriteFile(filepath.Join(dir, "exited-"+r), nil, 0o644)
		fmt.Printf("rank=%s training interrupted (SIGINT)\n", r)
		os.Exit(130)
	}
	rank, _ := strconv.Atoi(os.Getenv(launch.EnvRank))
	restart, _ := strconv.Atoi(os.Getenv(launch.EnvRestartCount))
	if how == "command" {
		fmt.Printf("rank=%d command=%s\n", rank, os.Getenv(launch.EnvLaunchCommand))
		os.Exit(0)
	}
	if dir, ok := strings.CutPrefix(how, "longline:"); ok {
		// Rank 1 writes a line longer than the launcher holds, in pieces as
		// a progress bar with carriage returns does, and ends it only once
		// the test has seen most of it.
		if rank == 1 {
			piece := strings.Repeat("x", 4<<10)
			for range longLine / len(piece) {
				os.Stderr.WriteString(piece)
			}
			for {
				if _, err := os.Stat(filepath.Join(dir, "go")); err == nil {
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
			os.Stderr.WriteString("\ndone\n")
		}
		os.Exit(0)
	}
	if how == "exitall" {
		// Every rank fails at the same line, as a program's own error does;
		// which rank ends first alternates between attempts.
		if rank == restart%2 {
			time.Sleep(200 * time.Millisecond)
		}
		fmt.Fprintln(os.Stderr, "mlp: ModelCheckpoint(Monitor \"val_accuracy\"): the metric was not logged")
		os.Exit(1)
	}
	f := strings.Split(how, ":")
	who, _ := strconv.Atoi(f[1])
	n := 1 << 30
	if len(f) > 2 {
		n, _ = strconv.Atoi(f[2])
	}
	failing := restart < n && who < mustAtoi(os.Getenv(launch.EnvWorldSize))
	if failing && rank == who {
		switch f[0] {
		case "kill":
			signalSelf(syscall.SIGKILL)
		case "int":
			signalSelf(syscall.SIGINT) // no handler: dies of it
			select {}
		case "panic":
			panic("boom at step 5")
		case "exit":
			fmt.Fprintf(os.Stderr, "attempt %d went wrong\n", restart)
			os.Exit(3)
		}
	}
	if failing {
		select {} // stopped by the launcher after Grace
	}
	fmt.Printf("rank=%s world=%s restart=%s max=%s dir=%t\n", os.Getenv(launch.EnvRank), os.Getenv(launch.EnvWorldSize),
		os.Getenv(launch.EnvRestartCount), os.Getenv(launch.EnvMaxRestarts), os.Getenv(launch.EnvElasticDir) != "")
	os.Exit(0)
}

func mustAtoi(s string) int { n, _ := strconv.Atoi(s); return n }

func elasticJob(how string, world, min, restarts int) (launch.Elastic, *lockedBuffer, *bytes.Buffer) {
	var out lockedBuffer
	var log bytes.Buffer
	return launch.Elastic{
		Args: []string{}, World: world, MinWorld: min, MaxRestarts: restarts, Grace: 50 * time.Millisecond,
		Env:    func(int) []string { return []string{childEnv + "=elastic:" + how} },
		Stdout: &out, Stderr: &out, Log: zerolog.New(&log),
	}, &out, &log
}

func TestElasticRestartsKilledRank(t *testing.T) {
	for _, c := range []struct {
		name                 string
		how                  string
		world, min, restarts int
		worlds               []int // of each attempt
	}{
		{"2 ranks, same world", "kill:1:1", 2, 0, 3, []int{2, 2}},
		{"3 ranks, same world", "kill:2:2", 3, 3, 3, []int{3, 3, 3}},
		{"3 ranks, shrink to MIN", "kill:1:2", 3, 2, 3, []int{3, 2, 2}},
		{"exit status, progressing", "exit:0:2", 2, 0, 2, []int{2, 2, 2}},
	} {
		t.Run(c.name, func(t *testing.T) {
			e, out, log := elasticJob(c.how, c.world, c.min, c.restarts)
			atts, err := launch.RunElastic(context.Background(), e)
			if err != nil {
				t.Fatalf("%v\noutput:\n%s\nlog:\n%s", err, out.String(), log.String())
			}
			var worlds []int
			for _, a := range atts {
				worlds = append(worlds, a.World)
			}
			if fmt.Sprint(worlds) != fmt.Sprint(c.worlds) {
				t.Errorf("attempts ran with worlds %v, want %v", worlds, c.worlds)
			}
			last := len(c.worlds) - 1
			for r := 0; r < c.worlds[last]; r++ {
				want := fmt.Sprintf("rank=%d world=%d restart=%d max=%d dir=true", r, c.worlds[last], last, c.restarts)
				if !strings.Contains(out.String(), want) {
					t.Errorf("output lacks %q:\n%s", want, out.String())
				}
			}
			for i := 1; i <= last; i++ {
				want := fmt.Sprintf("restart %d of %d with %d ranks (was %d)", i, c.restarts, c.worlds[i], c.worlds[i-1])
				if !strings.Contains(log.String(), want) {
					t.Errorf("log lacks %q:\n%s", want, log.String())
				}
			}
			if !strings.Contains(log.String(), "elastic: the job completed after restarting") {
				t.Errorf("log does not say the job completed:\n%s", log.String())
			}
		})
	}
}

// Every rank gets the launcher's command line, to tell the user how to
// start the job again.
func TestElasticGivesRanksTheLaunchCommand(t *testing.T) {
	e, out, log := elasticJob("command", 2, 0, 0)
	e.Command = "fulgur run -nproc 2"
	if _, err := launch.RunElastic(context.Background(), e); err != nil {
		t.Fatalf("%v\nlog:\n%s", err, log.String())
	}
	for r := range 2 {
		if want := fmt.Sprintf("rank=%d command=fulgur run -nproc 2\n", r); !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}

// longLine is what elasticChild's "longline" rank writes before its newline.
const longLine = 256 << 10

// A line longer than the launcher holds reaches the output as it is
// written, not when its newline (or the rank's exit) comes, and keeps one
// prefix.
func TestElasticWritesALongLineAsItComes(t *testing.T) {
	dir := t.TempDir()
	e, out, log := elasticJob("longline:"+dir, 2, 0, 0)
	done := make(chan error, 1)
	go func() {
		_, err := launch.RunElastic(context.Background(), e)
		done <- err
	}()
	deadline := time.Now().Add(30 * time.Second)
	for strings.Count(out.String(), "x") < longLine/2 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	seen := strings.Count(out.String(), "x")
	os.WriteFile(filepath.Join(dir, "go"), nil, 0o644)
	if err := <-done; err != nil {
		t.Fatalf("%v\nlog:\n%s", err, log.String())
	}
	if seen < longLine/2 {
		t.Errorf("%d of the %d bytes rank 1 wrote before its newline reached the output before it", seen, longLine)
	}
	want := launch.RankPrefix(1) + strings.Repeat("x", longLine) + "\n" + launch.RankPrefix(1) + "done\n"
	if got := out.String(); !strings.Contains(got, want) || strings.Count(got, launch.RankPrefix(1)) != 2 {
		t.Errorf("the long line did not arrive whole after one prefix; output (%d bytes) has %d prefixes", len(got), strings.Count(got, launch.RankPrefix(1)))
	}
}

func TestElasticLogNamesTheKilledRank(t *testing.T) {
	e, _, log := elasticJob("kill:1:1", 2, 0, 1)
	if _, err := launch.RunElastic(context.Background(), e); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(log.String(), `"rank":1`) || !strings.Contains(log.String(), "was killed by SIGKILL (signal 9)") {
		t.Errorf("the log does not say rank 1 was killed by SIGKILL:\n%s", log.String())
	}
	// The survivor waits to be stopped: the log gives the time it had
	// as a duration ("5s" in a terminal), not a bare count of milliseconds.
	if !strings.Contains(log.String(), `"settle":"50ms"`) {
		t.Errorf("the log does not give the settle time as 50ms:\n%s", log.String())
	}
}

// TestElasticStopsWaitingRanksAfterSettle: a rank fails while the others
// wait for it (at the rendezvous, say, where they would wait for their
// own timeout). They are sent SIGTERM after Settle, not left for the whole
// Grace, and the rank the launcher stopped is not named as the cause,
// though a signal ended it too. Before Settle the restart waited Grace (30 s
// by default) for each failure in setup.
func TestElasticStopsWaitingRanksAfterSettle(t *testing.T) {
	e, out, log := elasticJob("exit:1:1", 2, 0, 1)
	e.Grace, e.Settle = time.Minute, 200*time.Millisecond
	start := time.Now()
	atts, err := launch.RunElastic(context.Background(), e)
	if err != nil {
		t.Fatalf("%v\noutput:\n%s\nlog:\n%s", err, out.String(), log.String())
	}
	if took := time.Since(start); took > 30*time.Second {
		t.Errorf("the job took %v with Settle 200ms and Grace 1m: the waiting rank was left for the grace", took)
	}
	if len(atts) != 2 || atts[0].Failed == nil || atts[0].Failed.Rank != 1 {
		t.Fatalf("attempts %+v: want 2, the first failed by rank 1\nlog:\n%s", atts, log.String())
	}
	if !strings.Contains(log.String(), "sending them SIGTERM") || !strings.Contains(log.String(), `"ranks":[0]`) {
		t.Errorf("the log does not say rank 0 was sent SIGTERM:\n%s", log.String())
	}
}

func TestElasticGivesUp(t *testing.T) {
	for _, c := range []struct {
		name, how          string
		restarts, attempts int
		want               []string
	}{
		{"restarts exhausted", "kill:1", 2, 3, []string{"rank 1 (pid", "was killed by SIGKILL (signal 9)", "in attempt 3 (2 ranks)", "used all 2 restarts (MaxRestarts 2)"}},
		// A job run without restarts (fulgur run -nproc 2, several
		// machines) was told it "used all 0 restarts".
		{"no restarts", "kill:1", 0, 1, []string{"rank 1 (pid", "restarts are off (MaxRestarts 0: fulgur run's -max-restarts, FULGUR_MAX_RESTARTS)"}},
		{"deterministic panic", "panic:1", 5, 2, []string{"rank 1 (pid", "exited with status 2", "panic: boom at step 5", "failed the same way in attempt 1", "restart 2 of 5 not done"}},
		// Every rank fails the same way, in whatever order they end: the
		// launcher used to name rank 1, then rank 0, ..., and restart
		// until MaxRestarts ran out.
		{"every rank fails the same way", "exitall", 5, 2, []string{"rank 0 (pid", "exited with status 1", "val_accuracy", "failed the same way in attempt 1"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			e, out, log := elasticJob(c.how, 2, 0, c.restarts)
			if c.how == "exitall" {
				e.Grace = 10 * time.Second // both ranks end on their own, well within it
			}
			atts, err := launch.RunElastic(context.Background(), e)
			var ee *launch.ElasticError
			if !errors.As(err, &ee) {
				t.Fatalf("RunElastic returned %v, want an *ElasticError\noutput:\n%s\nlog:\n%s", err, out.String(), log.String())
			}
			if len(atts) != c.attempts {
				t.Errorf("%d attempts, want %d", len(atts), c.attempts)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

func TestElasticRejectsBadConfig(t *testing.T) {
	_, err := launch.RunElastic(context.Background(), launch.Elastic{World: 2, MinWorld: 3, MaxRestarts: -1})
	for _, w := range []string{"MinWorld is 3: use 1 to World (2)", "MaxRestarts is -1"} {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("error %v lacks %q", err, w)
		}
	}
}

func TestElasticFromEnv(t *testing.T) {
	for _, c := range []struct {
		env           map[string]string
		restarts, min int
		err           string
	}{
		{env: map[string]string{}},
		{env: map[string]string{launch.EnvMaxRestarts: "0"}},
		{env: map[string]string{launch.EnvMaxRestarts: "3"}, restarts: 3, min: 4},
		{env: map[string]string{launch.EnvMaxRestarts: "3", launch.EnvMinWorld: "2"}, restarts: 3, min: 2},
		{env: map[string]string{launch.EnvMaxRestarts: "x"}, err: `FULGUR_MAX_RESTARTS="x": use the number of restarts, 0 or more`},
		{env: map[string]string{launch.EnvMaxRestarts: "1", launch.EnvMinWorld: "5"}, err: `FULGUR_MIN_WORLD="5": use 1 to the 4 ranks`},
	} {
		e, err := launch.ElasticFromEnv(func(k string) (string, bool) { v, ok := c.env[k]; return v, ok }, 4, zerolog.Nop())
		switch {
		case c.err != "":
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%v: error %v, want %q", c.env, err, c.err)
			}
		case err != nil:
			t.Errorf("%v: %v", c.env, err)
		case c.restarts == 0 && e != nil:
			t.Errorf("%v: elastic job %+v, want none", c.env, e)
		case c.restarts > 0 && (e == nil || e.MaxRestarts != c.restarts || e.MinWorld != c.min || e.World != 4):
			t.Errorf("%v: elastic job %+v, want %d restarts, MinWorld %d", c.env, e, c.restarts, c.min)
		}
	}
}

// TestElasticPassesStopOn: cancelling the job's context (fulgur run on
// SIGINT or SIGTERM) sends the ranks SIGTERM, so that a Trainer saves its
// interrupt checkpoint, rather than killing them; a context StopOnSignal
// cancelled for a SIGINT (its cause a *launch.StopSignal) sends SIGINT, so
// that ranks end as the user's Ctrl-C says (130) whichever signal reaches
// them first.
func TestElasticPassesStopOn(t *testing.T) {
	for _, c := range []struct {
		cause error
		want  string
	}{{nil, "SIGTERM"}, {&launch.StopSignal{Signal: os.Interrupt}, "SIGINT"}, {&launch.StopSignal{Signal: syscall.SIGTERM}, "SIGTERM"}} {
		t.Run(fmt.Sprint(c.cause), func(t *testing.T) {
			dir := t.TempDir()
			e, out, _ := elasticJob("x", 2, 0, 3)
			e.Env = func(int) []string { return []string{childEnv + "=elastic:term:" + dir} }
			e.Grace = time.Minute
			ctx, cancel := context.WithCancelCause(context.Background())
			defer cancel(nil)
			go func() {
				for ctx.Err() == nil {
					a, _ := filepath.Glob(filepath.Join(dir, "started-*"))
					if len(a) == 2 {
						cancel(c.cause)
						return
					}
					time.Sleep(5 * time.Millisecond) // polling for the ranks' files
				}
			}()
			atts, err := launch.RunElastic(ctx, e)
			if err == nil || !strings.Contains(err.Error(), "elastic job stopped (the ranks were sent "+c.want+")") {
				t.Errorf("RunElastic returned %v, want the stop", err)
			}
			// Why it stopped, in the user's words: no Go "context canceled".
			why := "this process got " + c.want
			if c.cause == nil {
				why = "its context was cancelled"
			}
			if err == nil || !strings.Contains(err.Error(), why+"; a rank that had started training saved a checkpoint") || strings.Contains(err.Error(), "context canceled") || !errors.Is(err, context.Canceled) {
				t.Errorf("RunElastic returned %v, want it to say %q and unwrap to context.Canceled", err, why)
			}
			for _, w := range []string{"rank=0 got " + c.want, "rank=1 got " + c.want} {
				if !strings.Contains(out.String(), w) {
					t.Errorf("output lacks %q:\n%s", w, out.String())
				}
			}
			if len(atts) != 0 {
				t.Errorf("attempts %+v after a stop, want none restarted", atts)
			}
		})
	}
}

// Ranks that a Ctrl-C reached before the launcher read its own (a loaded
// machine) end with 130 before its context is cancelled: once it is, the
// job stopped, and no rank is logged as failed. Before, the launcher logged
// "a rank failed" with the rank's last line (so a terminal showed that
// line twice) and only then saw its context.
func TestElasticRanksStoppedBeforeTheLauncherSawTheSignal(t *testing.T) {
	dir := t.TempDir()
	e, out, log := elasticJob("x", 2, 0, 3)
	e.Env = func(int) []string { return []string{childEnv + "=elastic:stopped:" + dir} }
	e.Grace, e.Settle = time.Minute, time.Minute
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	go func() {
		for ctx.Err() == nil {
			if _, err := os.Stat(filepath.Join(dir, "exited-0")); err == nil {
				// Rank 0 has ended; the launcher waits for rank 1.
				cancel(&launch.StopSignal{Signal: os.Interrupt})
				os.WriteFile(filepath.Join(dir, "go"), nil, 0o644)
				return
			}
			time.Sleep(5 * time.Millisecond) // polling for rank 0's file
		}
	}()
	// Which the launcher saw first, rank 0's exit or the cancel, is a race
	// either way: the job stops, no rank failed.
	_, err := launch.RunElastic(ctx, e)
	if err == nil || !errors.Is(err, context.Canceled) {
		t.Errorf("RunElastic returned %v, want the stop", err)
	}
	if strings.Contains(log.String(), "a rank failed") || strings.Contains(log.String(), "restart") {
		t.Errorf("the launcher took ranks that stopped on the signal for a failure:\n%s\noutput:\n%s", log.String(), out.String())
	}
}

// A rank that SIGINT killed (Ctrl-C reached it before its program handled
// signals; the launcher gets it too, but may read it later) stops the job
// instead of being restarted, and the error says which signal: programs
// exit 130 as after the ranks saved.
func TestElasticStopsWhenSIGINTKillsARank(t *testing.T) {
	e, out, log := elasticJob("int:1:1", 2, 0, 3)
	atts, err := launch.RunElastic(context.Background(), e)
	var ee *launch.ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("err = %v, want an *ExitError\noutput:\n%s\nlog:\n%s", err, out.String(), log.String())
	}
	if sig, ok := ee.StopSignal(); !ok || sig != syscall.SIGINT || len(atts) != 1 || strings.Contains(log.String(), "elastic: restart") {
		t.Errorf("StopSignal %v %v after %d attempts, want SIGINT after 1, no restart:\n%s", sig, ok, len(atts), log.String())
	}
}

// A job on several machines is never restarted: when a rank fails, the
// launcher says so, rather than that the job "used all 0 restarts".
func TestElasticOnSeveralMachinesSaysItIsNotRestarted(t *testing.T) {
	e, out, log := elasticJob("panic:1", 1, 0, 0)
	e.Nodes, e.NodeRank, e.MasterAddr, e.MasterPort, e.Token = 2, 1, "127.0.0.1", 29999, "t" // node 0's port; node 1 listens on none
	_, err := launch.RunElastic(context.Background(), e)
	var ee *launch.ElasticError
	if !errors.As(err, &ee) {
		t.Fatalf("RunElastic returned %v, want an *ElasticError\noutput:\n%s\nlog:\n%s", err, out.String(), log.String())
	}
	for _, w := range []string{"rank 1 (pid", "a job on 2 machines is not restarted", "start every machine's launcher again",
		"-ckpt-path", "last.ckpt", "on node 0", "every machine", "its scheduler", "the job failed", "(1 rank of node 1 of 2)"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q lacks %q", err, w)
		}
	}
	// Nothing was elastic about it: no restarts were allowed.
	for _, w := range []string{"elastic job", "1 ranks"} {
		if strings.Contains(err.Error(), w) {
			t.Errorf("error %q says %q", err, w)
		}
	}
}

// On a machine other than node 0 of a job of several machines, the ranks
// write no run directory and print no result: when they end well the
// launcher says where those are, rather than ending silently.
func TestElasticOnAnotherMachineSaysWhereTheRunDirectoryIs(t *testing.T) {
	for _, node := range []int{0, 1} {
		e, out, log := elasticJob("command", 1, 0, 0)
		e.Nodes, e.NodeRank, e.MasterAddr, e.MasterPort, e.Token = 2, node, "node0.example", 29999, "t"
		if _, err := launch.RunElastic(context.Background(), e); err != nil {
			t.Fatalf("node %d: %v\noutput:\n%s\nlog:\n%s", node, err, out.String(), log.String())
		}
		said := strings.Contains(log.String(), "run directory")
		if node == 0 && said {
			t.Errorf("node 0, whose rank 0 prints where its run directory is, got a line about it:\n%s", log.String())
		}
		if node == 1 {
			for _, w := range []string{"this machine's ranks completed", "run directory", "on node 0 (node0.example)", "where rank 0 ran"} {
				if !strings.Contains(log.String(), w) {
					t.Errorf("node 1's launcher log lacks %q:\n%s", w, log.String())
				}
			}
		}
	}
}

// A job without restarts (fulgur run's default, -max-restarts 0) is a
// launcher, not an elastic job: its log lines say "launcher:"; a job that
// restarts keeps "elastic:".
func TestLogNamesTheLauncherByWhatItIs(t *testing.T) {
	for _, c := range []struct {
		restarts int
		want     string
		not      string
	}{
		{0, "launcher: ", "elastic"},
		{1, "elastic: ", "launcher: "},
	} {
		e, out, log := elasticJob("kill:1:1", 2, 0, c.restarts)
		_, err := launch.RunElastic(context.Background(), e)
		if c.restarts == 0 && err == nil {
			t.Fatalf("a rank was killed and restarts are off, yet the job succeeded\noutput:\n%s", out.String())
		}
		started, failed := c.want+"started the ranks", c.want+"a rank failed; the other ranks were stopped"
		for _, want := range []string{started, failed} {
			if !strings.Contains(log.String(), want) {
				t.Errorf("MaxRestarts %d: the log lacks %q:\n%s", c.restarts, want, log.String())
			}
		}
		if strings.Contains(log.String(), c.not) {
			t.Errorf("MaxRestarts %d: the log says %q:\n%s", c.restarts, c.not, log.String())
		}
	}
}
