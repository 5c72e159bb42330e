package plot

import (
	"fmt"
	"io"
	"math"
	"path"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Field is one named setting shown in a report.
type Field struct {
	Name  string
	Value string
}

// Report is what report.md says about a run.
type Report struct {
	// Title names the run ("mlp, version_3").
	Title string
	// Status is how fitting ended: "success", "failed", "interrupted" or
	// "" when unknown.
	Status string
	// Written is when the report was written; zero: not shown.
	Written time.Time
	// WorldSize and Strategy say how the run was spread; 0 and "": not shown.
	WorldSize int
	Strategy  string
	// Stopped is why training stopped early, when it did.
	Stopped string
	// Config is the run's configuration (see StructFields).
	Config []Field
	// HParams are the module's hyperparameters.
	HParams map[string]any
	// History is the logged metrics; its final and best values are shown.
	History *History
	// Results are figures not in the history, such as test metrics.
	Results map[string]float64
	// Profile is the profiler's report text; "": no profiler was on.
	Profile string
	// Plots and Checkpoints are paths relative to the report's directory,
	// written with forward slashes.
	Plots       []string
	Checkpoints []string
}

// WriteMarkdown writes r as Markdown.
func (r Report) WriteMarkdown(w io.Writer) error {
	b := &strings.Builder{}
	title := r.Title
	if title == "" {
		title = "run"
	}
	fmt.Fprintf(b, "# Run report: %s\n\n", title)
	var facts []string
	if r.Status != "" {
		facts = append(facts, "status **"+r.Status+"**")
	}
	if r.WorldSize > 0 {
		facts = append(facts, fmt.Sprintf("world size %d", r.WorldSize))
	}
	if r.Strategy != "" {
		facts = append(facts, "strategy `"+r.Strategy+"`")
	}
	if h := r.History; h != nil && len(h.Rows) > 0 {
		last := h.Rows[len(h.Rows)-1]
		facts = append(facts, fmt.Sprintf("last logged step %d", last.Step))
		if ep := maxEpoch(h); !math.IsNaN(ep) {
			facts = append(facts, fmt.Sprintf("epochs logged %d", int(ep)+1))
		}
	}
	if !r.Written.IsZero() {
		facts = append(facts, "written "+r.Written.Format(time.RFC3339))
	}
	if len(facts) > 0 {
		fmt.Fprintf(b, "%s.\n\n", capitalise(strings.Join(facts, " · ")))
	}
	if r.Stopped != "" {
		fmt.Fprintf(b, "Training stopped early: %s.\n\n", r.Stopped)
	}

	if len(r.Results) > 0 {
		b.WriteString("## Results\n\n| metric | value |\n|---|---|\n")
		for _, k := range sortedKeys(r.Results) {
			fmt.Fprintf(b, "| %s | %s |\n", cell(k), num(r.Results[k]))
		}
		b.WriteString("\n")
	}
	if r.History != nil {
		if sums := r.History.Summaries(); len(sums) > 0 {
			b.WriteString("## Final and best metrics\n\n")
			b.WriteString("| metric | final | at step | best | at step | min | max | values |\n|---|---|---|---|---|---|---|---|\n")
			for _, s := range sums {
				best, bestStep := "—", "—"
				if s.Goal != NoGoal {
					best, bestStep = num(s.Best)+" ("+s.Goal.String()+")", strconv.Itoa(s.BestStep)
				}
				if s.Goal != NoGoal && s.N == 0 {
					best, bestStep = "—", "—"
				}
				lo, hi := num(s.Min), num(s.Max)
				if s.N == 0 {
					lo, hi = "—", "—"
				}
				values := strconv.Itoa(s.N)
				if s.NonFinite > 0 {
					values += fmt.Sprintf(" (+%d NaN/Inf)", s.NonFinite)
				}
				fmt.Fprintf(b, "| %s | %s | %d | %s | %s | %s | %s | %s |\n",
					cell(s.Key), num(s.Final), s.FinalStep, best, bestStep, lo, hi, values)
			}
			b.WriteString("\n")
		}
	}
	if len(r.Checkpoints) > 0 {
		b.WriteString("## Checkpoints\n\n")
		for _, c := range r.Checkpoints {
			fmt.Fprintf(b, "- [%s](%s)\n", path.Base(c), c)
		}
		b.WriteString("\n")
	}
	if len(r.Plots) > 0 {
		b.WriteString("## Plots\n\n")
		// Show each chart once (its PNG when there is one), and link
		// every format.
		byBase := map[string][]string{}
		var order []string
		for _, p := range r.Plots {
			base := strings.TrimSuffix(p, path.Ext(p))
			if _, ok := byBase[base]; !ok {
				order = append(order, base)
			}
			byBase[base] = append(byBase[base], p)
		}
		for _, base := range order {
			files := byBase[base]
			show := files[0]
			for _, f := range files {
				if path.Ext(f) == ".png" {
					show = f
				}
			}
			var links []string
			for _, f := range files {
				links = append(links, fmt.Sprintf("[%s](%s)", strings.TrimPrefix(path.Ext(f), "."), f))
			}
			fmt.Fprintf(b, "### %s\n\n![%s](%s)\n\n%s\n\n", path.Base(base), path.Base(base), show, strings.Join(links, " · "))
		}
	}
	if len(r.HParams) > 0 {
		b.WriteString("## Hyperparameters\n\n| name | value |\n|---|---|\n")
		keys := make([]string, 0, len(r.HParams))
		for k := range r.HParams {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			fmt.Fprintf(b, "| %s | %s |\n", cell(k), cell(fmt.Sprint(r.HParams[k])))
		}
		b.WriteString("\n")
	}
	if len(r.Config) > 0 {
		b.WriteString("## Configuration\n\n| setting | value |\n|---|---|\n")
		for _, f := range r.Config {
			fmt.Fprintf(b, "| %s | %s |\n", cell(f.Name), cell(f.Value))
		}
		b.WriteString("\n")
	}
	if p := strings.TrimSpace(r.Profile); p != "" {
		fmt.Fprintf(b, "## Profiler\n\n```text\n%s\n```\n", strings.ReplaceAll(p, "```", "'''"))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// StructFields lists the exported scalar fields of a struct (or a pointer
// to one): booleans, numbers, strings and pointers to them, in declaration
// order; nested structs are flattened as "Outer.Inner". Functions, slices,
// maps and interfaces are skipped: they do not print as settings.
func StructFields(v any) []Field {
	rv := reflect.ValueOf(v)
	for rv.Kind() == reflect.Pointer {
		if rv.IsNil() {
			return nil
		}
		rv = rv.Elem()
	}
	if rv.Kind() != reflect.Struct {
		return nil
	}
	var out []Field
	structFields(rv, "", &out)
	return out
}

func structFields(rv reflect.Value, prefix string, out *[]Field) {
	t := rv.Type()
	for i := 0; i < t.NumField(); i++ {
		sf := t.Field(i)
		if !sf.IsExported() {
			continue
		}
		fv := rv.Field(i)
		name := prefix + sf.Name
		if fv.Kind() == reflect.Pointer {
			if fv.IsNil() {
				continue
			}
			fv = fv.Elem()
		}
		switch fv.Kind() {
		case reflect.Bool, reflect.String,
			reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
			reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64,
			reflect.Float32, reflect.Float64:
			s := fmt.Sprint(fv.Interface())
			if fv.Kind() == reflect.String && s == "" {
				s = `""`
			}
			*out = append(*out, Field{Name: name, Value: s})
		case reflect.Struct:
			if fv.Type() == reflect.TypeOf(time.Time{}) {
				continue
			}
			structFields(fv, name+".", out)
		}
	}
}

func maxEpoch(h *History) float64 {
	m := math.NaN()
	for _, r := range h.Rows {
		if !math.IsNaN(r.Epoch) && (math.IsNaN(m) || r.Epoch > m) {
			m = r.Epoch
		}
	}
	return m
}

func num(v float64) string {
	switch {
	case math.IsNaN(v), math.IsInf(v, 0):
		return fmt.Sprint(v)
	case v == math.Trunc(v) && math.Abs(v) < 1e15:
		return strconv.FormatFloat(v, 'f', -1, 64)
	}
	return strconv.FormatFloat(v, 'g', 5, 64)
}

func cell(s string) string {
	s = strings.ReplaceAll(s, "|", `\|`)
	return strings.ReplaceAll(s, "\n", " ")
}

func capitalise(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

func sortedKeys(m map[string]float64) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
