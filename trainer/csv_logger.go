package trainer

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// CSVLogger writes metrics.csv (a header of every metric name and "step",
// sorted, then one row per logging call, empty where a metric was not
// logged) and hparams.yaml into its run directory, like Lightning's
// CSVLogger. The directory is created at the first write; when the file
// exists already (a run resumed into the same directory) its rows are kept.
// It is the logger a Trainer adds by default (see Config.DisableLogger);
// package callbacks re-exports it.
type CSVLogger struct {
	hp      map[string]any // hyperparameters logged so far (merged)
	dir     string
	cols    []string
	f       *os.File
	w       *csv.Writer
	started bool
	// purge, while purging, drops rows whose step is past it (ResumeAt),
	// and those at it past the first purgeKeep (ResumeAtRow; -1: none).
	purge     int
	purgeKeep int
	purging   bool
}

var (
	_ Logger           = (*CSVLogger)(nil)
	_ RowResumer       = (*CSVLogger)(nil)
	_ EvaluationLogger = (*CSVLogger)(nil)
)

// NewCSVLogger logs into dir, usually a run directory (State.LogDir, VersionDir).
func NewCSVLogger(dir string) (*CSVLogger, error) {
	if dir == "" {
		return nil, errors.New("CSVLogger: the directory is empty: pass a run directory, such as the one VersionDir returns")
	}
	return &CSVLogger{dir: dir}, nil
}

func (l *CSVLogger) Name() string { return "CSVLogger" }

// CheckReady refuses a CSVLogger not made by NewCSVLogger (ReadyChecker).
func (l *CSVLogger) CheckReady() error {
	if l.dir == "" { // NewCSVLogger refuses it
		return errors.New("a struct literal, not made by trainer.NewCSVLogger (or callbacks.NewCSVLogger), has no directory to write into: make it with one of them")
	}
	return nil
}

// Dir is the run directory.
func (l *CSVLogger) Dir() string { return l.dir }

// Path is the metrics file.
func (l *CSVLogger) Path() string { return filepath.Join(l.dir, "metrics.csv") }

// LogHyperparams writes hparams.yaml, merged with what earlier calls gave.
func (l *CSVLogger) LogHyperparams(h map[string]any) error {
	if err := os.MkdirAll(l.dir, 0o755); err != nil {
		return err
	}
	next := MergeHParams(maps.Clone(l.hp), h) // a call refused leaves the earlier ones
	b, err := hparamsYAML(next)
	if err != nil {
		return fmt.Errorf("CSVLogger: %w", err)
	}
	l.hp = next
	return os.WriteFile(filepath.Join(l.dir, "hparams.yaml"), b, 0o644)
}

// MergeHParams adds h to into (a new map when into is nil): loggers merge
// successive calls (a program's flags, then the module's HParams).
func MergeHParams(into, h map[string]any) map[string]any {
	if into == nil {
		into = map[string]any{}
	}
	for k, v := range h {
		into[k] = v
	}
	return into
}

// hparamsYAML writes one "key: value" line per hyperparameter, keys
// sorted, each value in YAML's flow style. The file is read back by
// Lightning's load_hparams_from_yaml, that is by PyYAML, a YAML 1.1
// reader: keys it would take for booleans, nulls or numbers (yes, on, null,
// 10) are quoted, floats always carry a dot (PyYAML reads 1e-08 as a
// string, 1.0e-08 as a float), and NaN and infinities are .nan, .inf, -.inf.
func hparamsYAML(h map[string]any) ([]byte, error) {
	keys := make([]string, 0, len(h))
	for k := range h {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		v, err := yamlFlow(h[k])
		if err != nil {
			return nil, fmt.Errorf("hyperparameter %q: %w", k, err)
		}
		fmt.Fprintf(&b, "%s: %s\n", yamlKey(k), v)
	}
	return []byte(b.String()), nil
}

// yamlPlainKey matches the keys a YAML 1.1 reader takes as strings when
// written bare: a letter or underscore first, then letters, digits, _ . -
// (and none of the words below).
var yamlPlainKey = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_.-]*$`)

func yamlKey(k string) string {
	switch strings.ToLower(k) {
	case "y", "yes", "n", "no", "true", "false", "on", "off", "null":
	default:
		if yamlPlainKey.MatchString(k) {
			return k
		}
	}
	kj, _ := json.Marshal(k)
	return string(kj)
}

// yamlFlow writes v in YAML's flow style by way of its JSON form (JSON
// strings, lists and objects are YAML), with float64 and float32 values,
// at any depth, written as YAML 1.1 floats.
func yamlFlow(v any) (string, error) {
	switch f := v.(type) {
	case float64:
		return yamlFloat(f, 64), nil
	case float32:
		return yamlFloat(float64(f), 32), nil
	case map[string]any:
		keys := make([]string, 0, len(f))
		for k := range f {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		parts := make([]string, len(keys))
		for i, k := range keys {
			s, err := yamlFlow(f[k])
			if err != nil {
				return "", err
			}
			kj, _ := json.Marshal(k)
			parts[i] = string(kj) + ": " + s
		}
		return "{" + strings.Join(parts, ", ") + "}", nil
	case []any:
		return yamlList(len(f), func(i int) any { return f[i] })
	case []float64:
		return yamlList(len(f), func(i int) any { return f[i] })
	case []float32:
		return yamlList(len(f), func(i int) any { return f[i] })
	}
	b, err := json.Marshal(v)
	if err != nil {
		return "", err
	}
	return string(b), nil
}

func yamlList(n int, at func(int) any) (string, error) {
	parts := make([]string, n)
	for i := range parts {
		s, err := yamlFlow(at(i))
		if err != nil {
			return "", err
		}
		parts[i] = s
	}
	return "[" + strings.Join(parts, ", ") + "]", nil
}

func yamlFloat(f float64, bits int) string {
	switch {
	case math.IsNaN(f):
		return ".nan"
	case math.IsInf(f, 1):
		return ".inf"
	case math.IsInf(f, -1):
		return "-.inf"
	}
	s := strconv.FormatFloat(f, 'g', -1, bits)
	mant, exp, hasExp := strings.Cut(s, "e")
	if !strings.Contains(mant, ".") {
		mant += ".0"
	}
	if hasExp {
		return mant + "e" + exp
	}
	return mant
}

func (l *CSVLogger) start() error {
	l.started = true
	if err := os.MkdirAll(l.dir, 0o755); err != nil {
		return err
	}
	return l.rewrite(nil, nil)
}

// rewrite writes the file again under the header l.cols plus extra (sorted
// together), keeping the rows already in it, then row: the rows live in
// the file, not in memory, and a rewrite happens only when a new metric
// appears.
func (l *CSVLogger) rewrite(extra []string, row map[string]string) error {
	if l.f != nil {
		l.w.Flush()
		if err := errors.Join(l.w.Error(), l.f.Close()); err != nil {
			return err
		}
		l.f = nil
	}
	var rows []map[string]string
	b, err := os.ReadFile(l.Path())
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	// A row cut short (a write that failed on a full disk, a power loss)
	// is incomplete: drop it, or it would break the file for every reader
	// and swallow the first row appended after it.
	b = b[:bytes.LastIndexByte(b, '\n')+1]
	if len(b) > 0 {
		recs, err := csv.NewReader(bytes.NewReader(b)).ReadAll()
		if err != nil {
			return fmt.Errorf("CSVLogger: existing %s: %w", l.Path(), err)
		}
		if len(recs) > 0 {
			l.cols = recs[0]
			stepCol := slices.Index(l.cols, "step")
			atPurge := 0
			for _, r := range recs[1:] {
				if l.purging && stepCol >= 0 && stepCol < len(r) {
					s, err := strconv.Atoi(r[stepCol])
					if err == nil && s > l.purge {
						continue
					}
					if err == nil && s == l.purge && l.purgeKeep >= 0 {
						if atPurge++; atPurge > l.purgeKeep {
							continue
						}
					}
				}
				m := map[string]string{}
				for i, c := range l.cols {
					if i < len(r) {
						m[c] = r[i]
					}
				}
				rows = append(rows, m)
			}
		}
	}
	known := map[string]bool{}
	for _, c := range l.cols {
		known[c] = true
	}
	for _, c := range extra {
		if !known[c] {
			l.cols = append(l.cols, c)
			known[c] = true
		}
	}
	sort.Strings(l.cols)
	if row != nil {
		rows = append(rows, row)
	}
	tmp := l.Path() + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	w := csv.NewWriter(f)
	if len(l.cols) > 0 {
		w.Write(l.cols)
		for _, r := range rows {
			w.Write(l.record(r))
		}
	}
	w.Flush()
	if err := errors.Join(w.Error(), f.Close()); err != nil {
		return err
	}
	if err := os.Rename(tmp, l.Path()); err != nil {
		return err
	}
	f, err = os.OpenFile(l.Path(), os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	l.f, l.w = f, csv.NewWriter(f)
	return nil
}

func (l *CSVLogger) record(r map[string]string) []string {
	out := make([]string, len(l.cols))
	for i, c := range l.cols {
		out[i] = r[c]
	}
	return out
}

// FormatValue writes a metric value as metrics.csv does: shortest
// round-trip decimal, "nan", "inf", "-inf" as Python writes them.
func FormatValue(v float64) string {
	switch {
	case math.IsNaN(v):
		return "nan"
	case math.IsInf(v, 1):
		return "inf"
	case math.IsInf(v, -1):
		return "-inf"
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}

// ResumeAt drops the rows logged after step from an existing metrics.csv.
// A Fit that resumes from a checkpoint saved at global step `step` calls
// it: the interrupted run logged the steps it trained past its checkpoint,
// the resumed run trains and logs them again, and each step should appear
// once (TensorBoard's purge_step does the same for event files).
func (l *CSVLogger) ResumeAt(step int) error { return l.resume(step, -1) }

// ResumeAtRow is ResumeAt that also drops the rows at step past its first
// rows (see trainer.RowResumer): those logged after the checkpoint was
// saved, which the resumed run logs again.
func (l *CSVLogger) ResumeAtRow(step, rows int) error { return l.resume(step, max(rows, 0)) }

func (l *CSVLogger) resume(step, keep int) error {
	if _, err := os.Stat(l.Path()); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	l.purge, l.purgeKeep, l.purging = step, keep, true
	err := l.rewrite(nil, nil)
	l.purging = false
	if err != nil {
		return fmt.Errorf("CSVLogger: drop the rows after step %d from %s: %w", step, l.Path(), err)
	}
	return nil
}

// LogMetrics appends a row.
func (l *CSVLogger) LogMetrics(step int, m map[string]float64) error {
	if !l.started {
		if err := l.start(); err != nil {
			return err
		}
	}
	row := map[string]string{"step": strconv.Itoa(step)}
	for k, v := range m {
		row[k] = FormatValue(v)
	}
	known := map[string]bool{}
	for _, c := range l.cols {
		known[c] = true
	}
	var extra []string
	for k := range row {
		if !known[k] {
			extra = append(extra, k)
		}
	}
	if len(extra) > 0 {
		return l.rewrite(extra, row)
	}
	l.w.Write(l.record(row))
	l.w.Flush()
	return l.w.Error()
}

// LogEvaluation appends the row of a Validate or Test with 1 in its
// EvaluationColumn.
func (l *CSVLogger) LogEvaluation(step int, stage string, m map[string]float64) error {
	row := maps.Clone(m)
	row[EvaluationColumn] = 1
	return l.LogMetrics(step, row)
}

// Finalize closes the file; a later LogMetrics (a Test after the Fit)
// opens it again.
func (l *CSVLogger) Finalize(status string) error {
	if l.f == nil {
		return nil
	}
	l.w.Flush()
	err := errors.Join(l.w.Error(), l.f.Sync(), l.f.Close())
	l.f, l.started, l.cols = nil, false, nil
	return err
}
