package plot

import (
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// MetricsFile is the name of the CSV logger's file in a run directory.
const MetricsFile = "metrics.csv"

// EvaluationColumn is the column of metrics.csv with which the trainer
// marks the row of a Validate or Test (1; empty in other rows), as
// trainer.EvaluationColumn says. Files written before it are read by
// position (Row.Evaluation).
const EvaluationColumn = "evaluation"

// Row is one logging call: the metrics logged at one step.
type Row struct {
	Step int
	// Epoch is the 0-based epoch logged with the row; NaN when the row has
	// none, or is an Evaluation's.
	Epoch float64
	// Evaluation marks a row logged by a Validate or Test: its epoch is
	// the epochs the weights completed (as Lightning's current_epoch and
	// fulgur's trainer write it), not an epoch of training, so it is
	// drawn against step only. The trainer records it (EvaluationColumn);
	// in a file without that record (Lightning's, an older fulgur's),
	// ReadCSV and Log find it by position: a row at the last step seen
	// with an epoch past the last, which finds an evaluation after
	// training but not one alone in its file.
	Evaluation bool
	// Values holds the metrics of the row other than step and epoch.
	Values map[string]float64
}

// History is the logged metrics of one run, in logging order.
type History struct {
	// Label names the run in legends when several runs share a chart.
	Label string
	Rows  []Row
	marks evaluations // over Rows[:marks.n]
}

// Log appends one row, as a trainer.Logger's LogMetrics receives it: an
// "epoch" entry becomes the row's epoch, and a row of a Validate or Test
// is marked as ReadCSV marks it (Row.Evaluation: an EvaluationColumn entry
// other than 0, or by position), so that a run kept in memory is drawn as
// its metrics.csv is. m is copied.
func (h *History) Log(step int, m map[string]float64) {
	h.log(step, m, false)
}

// LogEvaluation appends the row of a Validate or Test, as a
// trainer.EvaluationLogger's LogEvaluation receives it: Log with the row
// marked an Evaluation.
func (h *History) LogEvaluation(step int, m map[string]float64) {
	h.log(step, m, true)
}

func (h *History) log(step int, m map[string]float64, eval bool) {
	r := Row{Step: step, Epoch: math.NaN(), Values: make(map[string]float64, len(m)), Evaluation: eval}
	for k, v := range m {
		switch k {
		case "epoch":
			r.Epoch = v
		case EvaluationColumn:
			r.Evaluation = r.Evaluation || v != 0 && !math.IsNaN(v)
		default:
			r.Values[k] = v
		}
	}
	if h.marks.n != len(h.Rows) { // Rows set by hand
		h.marks = evaluations{}
		for i := range h.Rows {
			h.marks.mark(&h.Rows[i])
		}
	}
	h.marks.mark(&r)
	h.Rows = append(h.Rows, r)
}

// Keys returns the names of the logged metrics, sorted.
func (h *History) Keys() []string {
	seen := map[string]bool{}
	for _, r := range h.Rows {
		for k := range r.Values {
			seen[k] = true
		}
	}
	keys := make([]string, 0, len(seen))
	for k := range seen {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// Point is one logged value of a metric.
type Point struct {
	Step       int
	Epoch      float64 // NaN when not logged (or an Evaluation's)
	Value      float64
	Evaluation bool // logged by a Validate or Test after training (Row.Evaluation)
}

// Series returns the finite logged values of key in logging order.
func (h *History) Series(key string) []Point {
	var out []Point
	for _, r := range h.Rows {
		v, ok := r.Values[key]
		if !ok || math.IsNaN(v) || math.IsInf(v, 0) {
			continue
		}
		out = append(out, Point{Step: r.Step, Epoch: r.Epoch, Value: v, Evaluation: r.Evaluation})
	}
	return out
}

// EpochLevel reports whether key is logged at most once per epoch, each time
// with its epoch (validation metrics, *_epoch aggregates): those are drawn
// against epoch as well as step. An Evaluation's points are left out.
func (h *History) EpochLevel(key string) bool {
	var pts []Point
	for _, p := range h.Series(key) {
		if !p.Evaluation {
			pts = append(pts, p)
		}
	}
	if len(pts) == 0 {
		return false
	}
	seen := map[float64]bool{}
	for _, p := range pts {
		if math.IsNaN(p.Epoch) || seen[p.Epoch] {
			return false
		}
		seen[p.Epoch] = true
	}
	return true
}

// Goal says which way a metric improves.
type Goal int

const (
	// NoGoal: neither direction is better (learning rate, memory, ...).
	NoGoal Goal = iota
	// Minimize: lower is better (losses, errors).
	Minimize
	// Maximize: higher is better (accuracy, F1, ...).
	Maximize
)

func (g Goal) String() string {
	switch g {
	case Minimize:
		return "min"
	case Maximize:
		return "max"
	}
	return ""
}

var (
	minWords = regexp.MustCompile(`(^|[_/.\-])(loss|err|error|mse|mae|rmse|nll|perplexity|ppl)($|[_/.\-])`)
	maxWords = regexp.MustCompile(`(^|[_/.\-])(acc|accuracy|f1|auc|auroc|precision|recall|iou|dice|top1|top5)($|[_/.\-])`)
)

// GoalOf guesses from its name which way a metric improves: losses and
// errors fall, accuracies rise, anything else has no goal.
func GoalOf(key string) Goal {
	k := strings.ToLower(key)
	switch {
	case minWords.MatchString(k):
		return Minimize
	case maxWords.MatchString(k):
		return Maximize
	}
	return NoGoal
}

// Summary is the final and best value of one metric.
type Summary struct {
	Key string
	N   int // finite values logged
	// NonFinite counts the NaN and infinite values logged (a diverged
	// loss), which Best, Min and Max leave out.
	NonFinite int
	// Final is the last value logged, NaN or infinite included: a run
	// whose loss diverged ends on NaN, not on its last finite value.
	Final     float64
	FinalStep int
	Goal      Goal
	// Best and BestStep are the lowest or highest finite value by Goal (its
	// first occurrence); equal to Final when Goal is NoGoal. Best, Min and
	// Max are NaN, and BestStep 0, when no value was finite.
	Best     float64
	BestStep int
	Min, Max float64
}

// Summaries returns a Summary for every metric logged, by key.
func (h *History) Summaries() []Summary {
	var out []Summary
	for _, k := range h.Keys() {
		s := Summary{Key: k, Goal: GoalOf(k), Best: math.NaN(), Min: math.NaN(), Max: math.NaN()}
		logged := false
		for _, r := range h.Rows {
			v, ok := r.Values[k]
			if !ok {
				continue
			}
			logged = true
			s.Final, s.FinalStep = v, r.Step
			if math.IsNaN(v) || math.IsInf(v, 0) {
				s.NonFinite++
				continue
			}
			if s.N == 0 {
				s.Min, s.Max = v, v
			}
			s.N++
			s.Min, s.Max = math.Min(s.Min, v), math.Max(s.Max, v)
			if s.Goal != NoGoal && (s.N == 1 || (s.Goal == Minimize && v < s.Best) || (s.Goal == Maximize && v > s.Best)) {
				s.Best, s.BestStep = v, r.Step
			}
		}
		if !logged {
			continue
		}
		if s.Goal == NoGoal {
			s.Best, s.BestStep = s.Final, s.FinalStep
		}
		out = append(out, s)
	}
	return out
}

// ReadCSV reads a metrics.csv: a header naming the columns, one of them
// "step" (and usually "epoch"), then one row per logging call with empty
// cells for metrics not logged in it. name is used in errors.
func ReadCSV(r io.Reader, name string) (*History, error) {
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = -1
	header, err := cr.Read()
	if err == io.EOF {
		return nil, fmt.Errorf("%s is empty: nothing was logged (a run logs at each epoch end and every N steps: -log-every-n-steps in a cli program, trainer.Config.LogEveryNSteps in Go)", name)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: header: %w", name, err)
	}
	stepCol, epochCol, evalCol := -1, -1, -1
	for i, c := range header {
		header[i] = strings.TrimSpace(c)
		switch header[i] {
		case "step":
			stepCol = i
		case "epoch":
			epochCol = i
		case EvaluationColumn:
			evalCol = i
		}
	}
	if stepCol < 0 {
		return nil, fmt.Errorf("%s has no \"step\" column (header %q): it is not a metrics file written by the CSV logger", name, strings.Join(header, ","))
	}
	h := &History{}
	for line := 2; ; line++ {
		rec, err := cr.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		if len(rec) != len(header) {
			return nil, fmt.Errorf("%s line %d has %d cells but the header has %d: the file is cut short or was edited; drop the line", name, line, len(rec), len(header))
		}
		row := Row{Epoch: math.NaN(), Values: map[string]float64{}}
		for i, cell := range rec {
			cell = strings.TrimSpace(cell)
			if cell == "" {
				continue
			}
			v, err := strconv.ParseFloat(cell, 64)
			if err != nil {
				return nil, fmt.Errorf("%s line %d column %q: %q is not a number", name, line, header[i], cell)
			}
			switch i {
			case stepCol:
				if v != math.Trunc(v) || v < 0 {
					return nil, fmt.Errorf("%s line %d: step %q is not a whole number of 0 or more", name, line, cell)
				}
				row.Step = int(v)
			case epochCol:
				row.Epoch = v
			case evalCol:
				row.Evaluation = v != 0 && !math.IsNaN(v)
			default:
				row.Values[header[i]] = v
			}
		}
		if strings.TrimSpace(rec[stepCol]) == "" {
			return nil, fmt.Errorf("%s line %d has no step: every row of a metrics file needs one", name, line)
		}
		h.Rows = append(h.Rows, row)
	}
	if len(h.Rows) == 0 {
		return nil, fmt.Errorf("%s has a header but no rows: nothing was logged yet", name)
	}
	for i := range h.Rows {
		h.marks.mark(&h.Rows[i])
	}
	return h, nil
}

// evaluations marks, row after row, those a Validate or Test logged
// (Row.Evaluation): those the trainer recorded so, and in a file without
// the record, by position, those after training: an epoch past every
// earlier row's at a step no later than theirs. A new epoch's own rows
// come after its first optimizer step.
type evaluations struct {
	n        int // rows seen
	maxEpoch float64
	maxStep  int
	seen     bool // a row with an epoch
}

// mark marks r, the row after the n seen, if it is an Evaluation's.
func (e *evaluations) mark(r *Row) {
	e.n++
	if r.Evaluation {
		r.Epoch = math.NaN()
		return
	}
	if math.IsNaN(r.Epoch) {
		return
	}
	if e.seen && r.Epoch > e.maxEpoch && r.Step <= e.maxStep {
		r.Evaluation, r.Epoch = true, math.NaN()
		return
	}
	if !e.seen || r.Epoch > e.maxEpoch {
		e.maxEpoch = r.Epoch
	}
	e.maxStep, e.seen = max(e.maxStep, r.Step), true
}

// FindMetrics returns the metrics.csv of a run given its directory, the
// file itself, or a root directory holding lightning_logs/version_N (or
// version_N) directories, where it picks the highest N that holds one (a
// newer run that logged no metrics.csv, such as a predict command's, does
// not hide the runs before it).
func FindMetrics(path string) (string, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return "", fmt.Errorf("run %s: %w", path, err)
	}
	if !fi.IsDir() {
		return path, nil
	}
	if f := filepath.Join(path, MetricsFile); exists(f) {
		return f, nil
	}
	var seen []string
	for _, base := range []string{filepath.Join(path, "lightning_logs"), path} {
		for _, v := range versions(base) {
			if f := filepath.Join(v, MetricsFile); exists(f) {
				return f, nil
			}
			seen = append(seen, filepath.Base(v))
		}
	}
	if len(seen) > 0 {
		return "", fmt.Errorf("run %s: none of its run directories (%s) holds a %s: they logged none (the CSV logger writes it; -loggers without csv, a predict command and a run that failed before logging leave none)", path, strings.Join(seen, ", "), MetricsFile)
	}
	return "", fmt.Errorf("run %s has no %s (nor lightning_logs/version_N/%s): pass the directory the CSV logger wrote", path, MetricsFile, MetricsFile)
}

// ReadRun reads the metrics of the run at path (see FindMetrics) and labels
// the history with the run's directory.
func ReadRun(path string) (*History, string, error) {
	file, err := FindMetrics(path)
	if err != nil {
		return nil, "", err
	}
	f, err := os.Open(file)
	if err != nil {
		return nil, "", err
	}
	defer f.Close()
	h, err := ReadCSV(f, file)
	if err != nil {
		return nil, "", err
	}
	h.Label = RunLabel(filepath.Dir(file))
	return h, file, nil
}

// RunLabel names a run directory for legends: its last two path elements
// when the last is a version directory ("mlp/version_3"), else the last.
func RunLabel(dir string) string {
	dir = filepath.Clean(dir)
	base := filepath.Base(dir)
	if strings.HasPrefix(base, "version_") {
		parent := filepath.Base(filepath.Dir(dir))
		if parent == "lightning_logs" {
			parent = filepath.Base(filepath.Dir(filepath.Dir(dir)))
		}
		if parent != "." && parent != string(filepath.Separator) {
			return parent + "/" + base
		}
	}
	return base
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// versions lists the version_N directories of dir, highest N first.
func versions(dir string) []string {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	type version struct {
		path string
		n    int
	}
	var vs []version
	for _, e := range ents {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), "version_") {
			continue
		}
		if n, err := strconv.Atoi(strings.TrimPrefix(e.Name(), "version_")); err == nil {
			vs = append(vs, version{filepath.Join(dir, e.Name()), n})
		}
	}
	sort.Slice(vs, func(i, j int) bool { return vs[i].n > vs[j].n })
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = v.path
	}
	return out
}

// HParamsFile is the CSV logger's hyperparameter file in a run directory.
const HParamsFile = "hparams.yaml"

// ReadHParams reads the hparams.yaml the CSV logger writes: one
// "key: value" line per hyperparameter, each value in JSON (YAML's flow
// style). Values that are not JSON are kept as their text. A missing file
// gives an empty map and no error: hyperparameters are optional.
func ReadHParams(path string) (map[string]any, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return map[string]any{}, nil
	}
	if err != nil {
		return nil, err
	}
	out := map[string]any{}
	for i, line := range strings.Split(string(b), "\n") {
		if strings.TrimSpace(line) == "" || strings.HasPrefix(strings.TrimSpace(line), "#") {
			continue
		}
		var key, val string
		if strings.HasPrefix(line, `"`) {
			// A quoted key: find its closing quote with the JSON decoder.
			dec := json.NewDecoder(strings.NewReader(line))
			if err := dec.Decode(&key); err != nil {
				return nil, fmt.Errorf("%s line %d: key %q is not a quoted string: %w", path, i+1, line, err)
			}
			rest := strings.TrimSpace(line[dec.InputOffset():])
			var ok bool
			if val, ok = strings.CutPrefix(rest, ":"); !ok {
				return nil, fmt.Errorf("%s line %d: no \":\" after the key in %q", path, i+1, line)
			}
		} else {
			var ok bool
			if key, val, ok = strings.Cut(line, ":"); !ok {
				return nil, fmt.Errorf("%s line %d: %q is not \"key: value\"", path, i+1, line)
			}
		}
		val = strings.TrimSpace(val)
		var v any
		if err := json.Unmarshal([]byte(val), &v); err != nil {
			v = val
		}
		out[strings.TrimSpace(key)] = v
	}
	return out, nil
}
