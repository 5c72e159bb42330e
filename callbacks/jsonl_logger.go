package callbacks

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"

	"github.com/fulgur-ml/fulgur/trainer"
)

// JSONLLogger writes metrics.jsonl (one JSON object per logging call:
// "step" and every metric) and hparams.json into its run directory,
// appending when the file exists.
//
// JSON has no NaN or infinity, so both files write those values as the
// strings "NaN", "Infinity" and "-Infinity", as the protobuf JSON mapping
// does: every JSON reader accepts the files, a diverged loss (NaN) stays
// distinct from an overflowed one (+Inf) and from a metric not logged
// (absent key), and Python's float() reads the strings back
// (float(v) for v in row.values() turns a row into numbers).
type JSONLLogger struct {
	hp  map[string]any // hyperparameters logged so far (merged)
	dir string
	f   *os.File
	w   *bufio.Writer
}

var (
	_ trainer.Logger           = (*JSONLLogger)(nil)
	_ trainer.RowResumer       = (*JSONLLogger)(nil)
	_ trainer.EvaluationLogger = (*JSONLLogger)(nil)
	_ trainer.ReadyChecker     = (*JSONLLogger)(nil)
)

// NewJSONLLogger logs into dir, usually from VersionDir.
func NewJSONLLogger(dir string) (*JSONLLogger, error) {
	if dir == "" {
		return nil, errors.New("JSONLLogger: the directory is empty: pass a run directory, such as the one VersionDir returns")
	}
	return &JSONLLogger{dir: dir}, nil
}

func (l *JSONLLogger) Name() string { return "JSONLLogger" }

// CheckReady refuses a JSONLLogger not made by NewJSONLLogger
// (trainer.ReadyChecker).
func (l *JSONLLogger) CheckReady() error {
	if l.dir == "" { // NewJSONLLogger refuses it
		return literal("NewJSONLLogger", "has no directory to write into")
	}
	return nil
}

// Path is the metrics file.
func (l *JSONLLogger) Path() string { return filepath.Join(l.dir, "metrics.jsonl") }

func (l *JSONLLogger) LogHyperparams(h map[string]any) error {
	if err := os.MkdirAll(l.dir, 0o755); err != nil {
		return err
	}
	// Merged into a copy: a call refused leaves what earlier calls gave.
	next := mergeHParams(maps.Clone(l.hp), h)
	// As in metrics.jsonl, a NaN or infinite hyperparameter, at any depth,
	// is its string: json.Marshal refuses the whole map for one.
	out := make(map[string]any, len(next))
	for k, v := range next {
		v = jsonFinite(v)
		if _, err := json.Marshal(v); err != nil {
			return fmt.Errorf("JSONLLogger: hyperparameter %q (%v): %w", k, v, err)
		}
		out[k] = v
	}
	b, err := json.MarshalIndent(out, "", "  ")
	if err != nil {
		return err
	}
	l.hp = next
	return os.WriteFile(filepath.Join(l.dir, "hparams.json"), append(b, '\n'), 0o644)
}

func (l *JSONLLogger) LogMetrics(step int, m map[string]float64) error {
	if l.f == nil {
		if err := os.MkdirAll(l.dir, 0o755); err != nil {
			return err
		}
		if err := dropTornLine(l.Path()); err != nil {
			return fmt.Errorf("JSONLLogger: %w", err)
		}
		f, err := os.OpenFile(l.Path(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return err
		}
		l.f, l.w = f, bufio.NewWriter(f)
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	b := append(make([]byte, 0, 64+24*len(keys)), `{"step":`...)
	b = strconv.AppendInt(b, int64(step), 10)
	for _, k := range keys {
		if k == "step" {
			continue
		}
		b = append(b, ',')
		kb, _ := json.Marshal(k)
		b = append(b, kb...)
		b = append(b, ':')
		b = appendJSONFloat(b, m[k])
	}
	b = append(b, "}\n"...)
	if _, err := l.w.Write(b); err != nil {
		return err
	}
	return l.w.Flush()
}

// LogEvaluation writes the row of a Validate or Test with its
// trainer.EvaluationColumn key set to 1.
func (l *JSONLLogger) LogEvaluation(step int, stage string, m map[string]float64) error {
	row := maps.Clone(m)
	row[trainer.EvaluationColumn] = 1
	return l.LogMetrics(step, row)
}

// dropTornLine cuts an unterminated last line off the file at path, if
// any: a line a write cut short (a full disk, a power loss) is incomplete,
// and the next line appended would otherwise run on from it, leaving one
// line that no JSON reader accepts.
func dropTornLine(path string) error {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil || st.Size() == 0 {
		return err
	}
	var last [1]byte
	if _, err := f.ReadAt(last[:], st.Size()-1); err != nil || last[0] == '\n' {
		return err
	}
	b, err := io.ReadAll(f)
	if err != nil {
		return err
	}
	return os.Truncate(path, int64(bytes.LastIndexByte(b, '\n')+1))
}

// nonFinite names NaN and the infinities as metrics.jsonl writes them, and
// "" for a finite value.
func nonFinite(v float64) string {
	switch {
	case math.IsNaN(v):
		return "NaN"
	case math.IsInf(v, 1):
		return "Infinity"
	case math.IsInf(v, -1):
		return "-Infinity"
	}
	return ""
}

func appendJSONFloat(b []byte, v float64) []byte {
	if s := nonFinite(v); s != "" {
		return strconv.AppendQuote(b, s)
	}
	return strconv.AppendFloat(b, v, 'g', -1, 64)
}

func jsonFloat(f float64) any {
	if s := nonFinite(f); s != "" {
		return s
	}
	return f
}

// jsonFinite returns v with every NaN or infinite float, in v or in the
// maps and slices it holds, replaced by its string (see JSONLLogger).
func jsonFinite(v any) any {
	switch x := v.(type) {
	case float64:
		return jsonFloat(x)
	case float32:
		if s := nonFinite(float64(x)); s != "" {
			return s
		}
		return x
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = jsonFinite(e)
		}
		return out
	case map[string]float64:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = jsonFloat(e)
		}
		return out
	case []any:
		return jsonList(x, jsonFinite)
	case []float64:
		return jsonList(x, jsonFloat)
	case []float32:
		return jsonList(x, func(f float32) any { return jsonFinite(f) })
	}
	return v
}

func jsonList[T any](x []T, f func(T) any) []any {
	out := make([]any, len(x))
	for i, e := range x {
		out[i] = f(e)
	}
	return out
}

// ResumeAt drops the lines logged after step from an existing
// metrics.jsonl (see trainer.Resumer), writing the kept lines to a
// temporary file renamed over the old one, so a failure leaves the old
// file whole.
func (l *JSONLLogger) ResumeAt(step int) error { return l.resume(step, -1) }

// ResumeAtRow is ResumeAt that also drops the lines at step past its
// first rows (see trainer.RowResumer): those logged after the checkpoint
// was saved, which the resumed run logs again.
func (l *JSONLLogger) ResumeAtRow(step, rows int) error { return l.resume(step, max(rows, 0)) }

// resume keeps the lines before step and, at step, the first keep (-1:
// all).
func (l *JSONLLogger) resume(step, keep int) error {
	if l.f != nil {
		if err := errors.Join(l.w.Flush(), l.f.Close()); err != nil {
			return err
		}
		l.f = nil
	}
	b, err := os.ReadFile(l.Path())
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var kept []byte
	atStep := 0
	for line := range bytes.Lines(b[:bytes.LastIndexByte(b, '\n')+1]) { // without a torn last line (see dropTornLine)
		var row struct {
			Step *int `json:"step"`
		}
		if json.Unmarshal(line, &row) == nil && row.Step != nil {
			if *row.Step > step {
				continue
			}
			if *row.Step == step && keep >= 0 {
				if atStep++; atStep > keep {
					continue
				}
			}
		}
		kept = append(kept, line...)
	}
	if len(kept) == len(b) {
		return nil
	}
	tmp := l.Path() + ".tmp"
	if err := os.WriteFile(tmp, kept, 0o644); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("JSONLLogger: drop the lines after step %d: %w", step, err)
	}
	return os.Rename(tmp, l.Path())
}

func (l *JSONLLogger) Finalize(status string) error {
	if l.f == nil {
		return nil
	}
	err := errors.Join(l.w.Flush(), l.f.Sync(), l.f.Close())
	l.f = nil
	return err
}
