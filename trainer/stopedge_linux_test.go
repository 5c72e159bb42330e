package trainer_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/fulgur-ml/fulgur/trainer"
)

// edgeEnv makes the test binary a ddp program of two ranks (TestEdgeProgram):
// its value names the case.
const edgeEnv = "FULGUR_TRAINER_EDGE_PROGRAM"

// sawLine closes ch once a line written to it holds text: a rank waiting
// for its own trainer to have logged something (its signal watcher
// taking a signal).
type sawLine struct {
	text string
	mu   sync.Mutex
	seen bool
	ch   chan struct{}
}

func (s *sawLine) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.seen && bytes.Contains(p, []byte(s.text)) {
		s.seen = true
		close(s.ch)
	}
	return os.Stderr.Write(p)
}

// ctrlCAfterStop presses Ctrl-C (SIGINT to the process group, every rank)
// from rank 0 in the first validation batch after the ranks agreed to
// stop, and has each rank wait there until its trainer took the signal.
type ctrlCAfterStop struct {
	from int
	saw  *sawLine
	done bool
}

func (*ctrlCAfterStop) Name() string { return "ctrlCAfterStop" }
func (c *ctrlCAfterStop) OnValidationBatchStart(_ context.Context, s *trainer.State) error {
	if c.done || s.SanityChecking || s.GlobalStep < c.from {
		return nil
	}
	c.done = true
	if s.Rank == 0 {
		if err := syscall.Kill(0, syscall.SIGINT); err != nil {
			return err
		}
	}
	select {
	case <-c.saw.ch:
		return nil
	case <-time.After(30 * time.Second):
		return errors.New("the trainer never took the SIGINT")
	}
}

// ctrlCAt sends SIGINT to its own process at the end of a global step's
// batch (one process) and waits until its trainer took it.
type ctrlCAt struct {
	step int
	saw  *sawLine
}

func (*ctrlCAt) Name() string { return "ctrlCAt" }
func (c *ctrlCAt) OnTrainBatchEnd(_ context.Context, s *trainer.State) error {
	if s.GlobalStep != c.step {
		return nil
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGINT); err != nil {
		return err
	}
	select {
	case <-c.saw.ch:
		return nil
	case <-time.After(30 * time.Second):
		return errors.New("the trainer never took the SIGINT")
	}
}

// slowSave is a callback whose state takes forever to gather once the
// trainer took a signal: the interrupt checkpoint's save never ends, as
// one to a hung disk; it says "CHILD saving" on stdout when it starts.
type slowSave struct{ saw *sawLine }

func (*slowSave) Name() string { return "slowSave" }
func (s *slowSave) StateDict() ([]byte, error) {
	select {
	case <-s.saw.ch:
		fmt.Println("CHILD saving")
		select {}
	default:
		return []byte("{}"), nil
	}
}
func (*slowSave) LoadStateDict([]byte) error { return nil }

// TestEdgeProgram is the program TestDDPEdges starts: Fit on ddp with two
// ranks (processes), then the case's evaluation. Each rank writes its
// outcome to FULGUR_TRAINER_EDGE_DIR/result.rank<R> and exits with the
// status a program returns for it (128+signal for an interrupt).
func TestEdgeProgram(t *testing.T) {
	kase := os.Getenv(edgeEnv)
	if kase == "" {
		t.Skip("run by TestDDPEdges")
	}
	dir := os.Getenv(edgeEnv + "_DIR")
	saw := &sawLine{text: "finishing the current step", ch: make(chan struct{})}
	log := zerolog.New(saw).Level(zerolog.WarnLevel)
	job := newResumeJob(t, 1, 0)
	job.cfg.MaxEpochs, job.cfg.DefaultRootDir = 2, dir
	job.val = loader(t, regression(t, 256, 0.1, 10), 16, false, false) // 8 batches a rank
	cfg := quiet(job.cfg)
	cfg.Strategy, cfg.Devices, cfg.Log = "ddp", 2, &log
	rank := os.Getenv("RANK")
	if rank == "" {
		rank = "0"
	}
	var edge *evalEdge
	switch kase {
	case "double-ctrl-c":
		cfg.Strategy, cfg.Devices, cfg.MaxEpochs = "", 1, 40
		cfg.Callbacks = []trainer.Callback{&ctrlCAt{step: 20, saw: saw}, &slowSave{saw: saw}}
	case "ctrl-c-after-stop":
		cfg.Callbacks = []trainer.Callback{stopAfterStep{5}, &ctrlCAfterStop{from: 5, saw: saw}}
	case "validate-fails-on-rank-1", "predict-each-cancelled-on-rank-1":
		if rank == "1" {
			edge = &evalEdge{}
			cfg.Callbacks = []trainer.Callback{edge}
		}
	}
	tr, err := trainer.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	err = tr.Fit(context.Background(), job.mod(), job.train, job.val)
	if err == nil {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		switch kase {
		case "validate-fails-on-rank-1":
			_, err = tr.Validate(ctx, job.mod(), job.val)
		case "predict-each-cancelled-on-rank-1":
			if edge != nil {
				edge.cancel = cancel
			}
			err = tr.PredictEach(ctx, job.mod(), job.val, func(trainer.PredictBatch) error { return nil })
		}
	}
	if terr := tr.Teardown(context.Background()); err == nil {
		err = terr
	}
	code := 0
	var ie *trainer.InterruptedError
	if errors.As(err, &ie) {
		code = ie.ExitCode()
	} else if err != nil {
		code = 1
	}
	if werr := os.WriteFile(filepath.Join(dir, "result.rank"+rank), fmt.Appendf(nil, "exit=%d %v", code, err), 0o644); werr != nil {
		t.Fatal(werr)
	}
	os.Exit(code)
}

// Two ranks in their own processes, as a user's program runs them:
//   - Ctrl-C (SIGINT to every rank) after the ranks agreed to stop, in
//     the validation of the epoch the stop ended: every rank saves and
//     returns the interrupt, and the program exits 130. Before, the
//     signal was dropped: Fit returned nil and the program exited 0.
//   - Validate after Fit failing on rank 1, and PredictEach cancelled on
//     rank 1: rank 0's call fails naming rank 1. Before, rank 0 waited
//     in the metrics' reduction for rank 1, which had left; PredictEach
//     returned nil on rank 0.
func TestDDPEdges(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	for _, tc := range []struct {
		kase         string
		code         int
		rank0, rank1 string
	}{
		{"ctrl-c-after-stop", 130, "exit=130 training interrupted (SIGINT) at global step 5; checkpoint saved", "exit=130 training interrupted (SIGINT) at global step 5; checkpoint saved"},
		{"validate-fails-on-rank-1", 1, "exit=1 the validate loop failed on rank 1", "exit=1 rank 1 of 2: validate batch 1: callbacks/evalEdge.OnValidationBatchStart: batch 1 failed here"},
		{"predict-each-cancelled-on-rank-1", 1, "exit=1 the predict loop stopped on rank 1, whose context was cancelled", "exit=1 rank 1 of 2: "},
	} {
		t.Run(tc.kase, func(t *testing.T) {
			dir := t.TempDir()
			ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestEdgeProgram$", "-test.count=1")
			cmd.Env = append(os.Environ(), edgeEnv+"="+tc.kase, edgeEnv+"_DIR="+dir, "FULGUR_TIMEOUT=60s")
			cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // a terminal's foreground group
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			err := cmd.Run()
			var ee *exec.ExitError
			if code := 0; errors.As(err, &ee) {
				code = ee.ExitCode()
				if code != tc.code {
					t.Errorf("the program exited %d, want %d", code, tc.code)
				}
			} else if err != nil || tc.code != 0 {
				t.Errorf("the program: %v, want exit %d", err, tc.code)
			}
			for r, want := range []string{tc.rank0, tc.rank1} {
				b, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("result.rank%d", r)))
				if err != nil || !strings.HasPrefix(string(b), want) {
					t.Errorf("rank %d: %q (%v), want %q...", r, b, err, want)
				}
			}
			if t.Failed() {
				t.Logf("output:\n%s", lastLinesOf(out.String(), 30))
			}
		})
	}
}

func lastLinesOf(s string, n int) string {
	l := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(l[max(0, len(l)-n):], "\n")
}

// Ctrl-C pressed again, after DuplicateSignalWindow, while the first one's
// interrupt checkpoint is being saved: the process exits at once, killed
// by SIGINT as a shell expects (130), and says that the checkpoint being
// written is dropped whole; no interrupted.ckpt appears, and "last" is
// the last complete checkpoint, which loads. Before, it died without a
// word about the checkpoint.
func TestSecondCtrlCWhileSaving(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a process")
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestEdgeProgram$", "-test.count=1")
	cmd.Env = append(os.Environ(), edgeEnv+"=double-ctrl-c", edgeEnv+"_DIR="+dir)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill() })
	sc := bufio.NewScanner(out)
	for sc.Scan() && sc.Text() != "CHILD saving" {
	}
	exited := make(chan error, 1)
	go func() {
		for sc.Scan() {
		}
		exited <- cmd.Wait()
	}()
	// Repeats within DuplicateSignalWindow of the first count as the same
	// request; the first after it exits.
	tick := time.NewTicker(trainer.DuplicateSignalWindow / 10)
	defer tick.Stop()
	var werr error
wait:
	for {
		select {
		case werr = <-exited:
			break wait
		case <-tick.C:
			cmd.Process.Signal(syscall.SIGINT)
		}
	}
	ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus)
	if !ok || !ws.Signaled() || ws.Signal() != syscall.SIGINT {
		t.Errorf("the program ended with %v, want killed by SIGINT (a shell's 130)", werr)
	}
	if !strings.Contains(stderr.String(), "the signal came again: exiting now, without the interrupt checkpoint") {
		t.Errorf("the program did not say what it left unsaved:\n%s", lastLinesOf(stderr.String(), 10))
	}
	run := filepath.Join(dir, "lightning_logs", "version_0", "checkpoints")
	if _, err := os.Stat(filepath.Join(run, "interrupted.ckpt")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("interrupted.ckpt: %v, want none", err)
	}
	last, err := trainer.ResolveCheckpoint(dir, trainer.CkptLast)
	if err != nil {
		t.Fatal(err)
	}
	if info, err := trainer.VerifyCheckpoint(last); err != nil || info.GlobalStep != 16 || filepath.Base(last) != "last.ckpt" {
		t.Errorf("\"last\" is %s: %+v, %v; want last.ckpt of epoch 0, step 16, whole", last, info, err)
	}
}
