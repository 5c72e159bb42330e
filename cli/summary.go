package cli

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/fulgur-ml/fulgur/strategy/launch"
	"github.com/fulgur-ml/fulgur/trainer"
)

// Summary is the JSON object printed last on stdout.
type Summary struct {
	Program string `json:"program"`
	// Command is the subcommand that ran: fit, validate, test or predict.
	Command string `json:"command"`
	// TestAcc and TestLoss are what the test measured (fit's test after
	// training, or the test command): null when no test ran (validate,
	// predict, lr-find, an interrupted fit, data without a test split),
	// when the test step logs no such metric, or when it is not finite.
	TestAcc  *float64 `json:"test_acc"`
	TestLoss *float64 `json:"test_loss"`
	// TrainSamplesPerS is this process's fit's training throughput, all
	// ranks together, rounded (trainer.Stats.TrainSamplesPerS): a fit
	// resumed from -ckpt-path, or the last attempt of an elastic restart,
	// counts only the samples and time of its own training (0 when it had
	// nothing left to train); 0 for the other commands.
	TrainSamplesPerS float64 `json:"train_samples_per_s"`
	// Epochs and GlobalStep are the run's epochs completed and optimizer
	// steps, as Lightning's current_epoch and global_step after a fit: a
	// resumed fit (-ckpt-path, an elastic restart) counts the epochs and
	// steps before it too. Validate, test and predict report those of the
	// checkpoint they evaluated (trainer.CheckpointInfo's EpochsDone and
	// GlobalStep), as metrics.csv's epoch and step of their rows are.
	Epochs     int `json:"epochs"`
	GlobalStep int `json:"global_step"`
	// WorldSize is the number of ranks that ran the command (the last
	// attempt's after an elastic restart).
	WorldSize int    `json:"world_size"`
	Strategy  string `json:"strategy"`
	// WeightsSHA256 is the SHA-256 of the trained or evaluated weights.
	WeightsSHA256 string `json:"weights_sha256"`
	Data          string `json:"data"`
	// Seconds is the command's wall time in this process (the last
	// attempt's after an elastic restart), to the summary.
	Seconds float64 `json:"seconds"`
	Seed    uint64  `json:"seed"`
	// Interrupted runs (SIGINT, SIGTERM) stop after saving Checkpoint and
	// skip the test (test_acc and test_loss are null).
	Interrupted bool `json:"interrupted,omitempty"`
	// Checkpoint is the checkpoint an interrupted run saved, or the one
	// validate, test and predict evaluated.
	Checkpoint string `json:"checkpoint,omitempty"`
	RunDir     string `json:"run_dir,omitempty"`
	// Metrics are every metric the last Validate or Test returned (null
	// where not finite).
	Metrics Metrics `json:"metrics,omitempty"`
	// Predictions is how many rows predict wrote.
	Predictions int `json:"predictions,omitempty"`
	// LRFind is what lr-find found.
	LRFind *LRFindSummary `json:"lr_find,omitempty"`
}

// LRFindSummary is lr-find's result (trainer.LRFindResult): the suggested
// learning rate (0: none), why the search stopped early ("": it did not),
// and each step's rate and smoothed loss (null where it was not finite:
// the step that ended the search).
type LRFindSummary struct {
	Suggestion float64 `json:"suggested_lr"`
	Stopped    string  `json:"stopped,omitempty"`
	LRs        Floats  `json:"lrs"`
	Losses     Floats  `json:"losses"`
}

// Floats is a JSON array of numbers with null for NaN and infinities,
// which JSON cannot hold.
type Floats []float64

// MarshalJSON writes the array.
func (f Floats) MarshalJSON() ([]byte, error) {
	b := []byte{'['}
	for i, v := range f {
		if i > 0 {
			b = append(b, ',')
		}
		if math.IsNaN(v) || math.IsInf(v, 0) {
			b = append(b, "null"...)
			continue
		}
		b = strconv.AppendFloat(b, v, 'g', -1, 64)
	}
	return append(b, ']'), nil
}

// Metrics is a JSON object of metric values with null for NaN and
// infinities, which JSON cannot hold.
type Metrics map[string]float64

// MarshalJSON writes the object, keys sorted.
func (m Metrics) MarshalJSON() ([]byte, error) {
	out := make(map[string]*float64, len(m))
	for k, v := range m {
		out[k] = finite(v)
	}
	return json.Marshal(out)
}

// Print writes s as one JSON line.
func (s Summary) Print(w io.Writer) error {
	b, err := json.Marshal(s)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}

// fail prints err for a person and exits with status 1: no panic trace
// reaches the user.
func fail(prog string, err error) {
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	var in *Interrupted
	if !errors.As(err, &in) || !in.quiet {
		fmt.Fprintf(os.Stderr, "%s: %v\n", prog, err)
	}
	var ie *trainer.InterruptedError
	if errors.As(err, &ie) {
		// As a shell reports a process the signal killed (130 for
		// SIGINT, 143 for SIGTERM), though the run was saved.
		os.Exit(ie.ExitCode())
	}
	os.Exit(1)
}

// since is the seconds elapsed from t0, rounded to milliseconds.
func since(t0 time.Time) float64 {
	return float64(time.Since(t0).Milliseconds()) / 1000
}

// finite is v, or nil when it is NaN or infinite.
func finite(v float64) *float64 {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return nil
	}
	return &v
}

// metric is the finite value of res[name], or nil when res lacks it.
func metric(res map[string]float64, name string) *float64 {
	v, ok := res[name]
	if !ok {
		return nil
	}
	return finite(v)
}

// Interrupted is Run's error when a signal or a cancelled context stopped
// training after saving a checkpoint: Main prints it with the command that
// resumes the run and exits with Err.ExitCode() (130 for SIGINT, 143 for
// SIGTERM).
type Interrupted struct {
	Err *trainer.InterruptedError
	// Resume is the command line that continues the run ("" on ranks
	// other than 0, whose Error says that rank 0 prints it, and when
	// nothing was saved: Err.Checkpoint is "").
	Resume string
	// quiet: Main prints nothing, as the launcher shows this rank's
	// output beside that of its machine's first rank, which prints the
	// account (besideFirstRank).
	quiet bool
}

// besideFirstRank says whether this process is a rank that fulgur run (or
// a program's own FULGUR_MAX_RESTARTS supervisor, or ddp_spawn) started
// after its machine's first rank: their output meets on one terminal, where
// the first rank's account of a stop (rank 0's with the command that
// resumes the run) is the one a user needs, not one line from every rank
// (launch.BesideFirstRank; the trainer's line on a signal is said once so
// too). Ranks started any other way each print theirs.
func besideFirstRank() bool { return launch.BesideFirstRank(os.LookupEnv) }

func (e *Interrupted) Error() string {
	if e.Resume == "" && e.Err.Checkpoint != "" {
		// A rank other than 0: rank 0 prints the command (the trainer's
		// own hint names its Go API, trainer.FromCheckpoint).
		return e.Err.Summary() + "; rank 0 prints the command that resumes the run"
	}
	if e.Resume == "" {
		return e.Err.Error()
	}
	return e.Err.Summary() + "; resume with:\n  " + e.Resume
}

func (e *Interrupted) Unwrap() error { return e.Err }

// resumeCommand is the program's command line with -ckpt-path set to ckpt
// (replacing one given), quoted for a POSIX shell; under fulgur run, after
// the launcher's own (launch.EnvLaunchCommand), so that it starts every
// rank again.
func resumeCommand(prog string, args []string, ckpt string) string {
	var words []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		name := strings.TrimLeft(a, "-")
		if name == "ckpt-path" && len(a) > len(name) {
			i++ // its value is the next argument
			continue
		}
		if strings.HasPrefix(name, "ckpt-path=") && len(a) > len(name) {
			continue
		}
		words = append(words, a)
	}
	cmd := launch.Command(prog, append(words, "-ckpt-path", ckpt)...)
	if l := os.Getenv(launch.EnvLaunchCommand); l != "" {
		return l + " " + cmd
	}
	return cmd
}
