package plot_test

import (
	"bytes"
	"math"
	"strings"
	"testing"

	"github.com/fulgur-ml/fulgur/plot"
)

func lossRun() *plot.History {
	h := &plot.History{Label: "a"}
	for s := 1; s <= 3; s++ {
		h.Log(s, map[string]float64{"loss": 1 / float64(s)})
	}
	return h
}

// A nil History (ReadRun's on error, passed on unchecked) is an error
// naming its index for WriteCharts and Render, not a panic; Layout, which
// has no error, leaves it out as a run with no metrics.
func TestNilHistoryIsNamedNotAPanic(t *testing.T) {
	runs := []*plot.History{lossRun(), nil}
	_, err := plot.WriteCharts(t.TempDir(), runs, plot.Options{Formats: []string{"svg"}})
	if err == nil || !strings.Contains(err.Error(), "runs[1] is nil") || !strings.Contains(err.Error(), "ReadRun") {
		t.Errorf("WriteCharts with a nil run: %v\nwant an error naming runs[1] and ReadRun", err)
	}
	var buf bytes.Buffer
	err = plot.Render(&buf, plot.Chart{Name: "loss", Keys: []string{"loss"}}, runs, "svg", plot.Options{})
	if err == nil || !strings.Contains(err.Error(), "runs[1] is nil") {
		t.Errorf("Render with a nil run: %v\nwant an error naming runs[1]", err)
	}
	if got := plot.Layout(nil); len(got) != 0 {
		t.Errorf("Layout(nil) = %v, want no chart", got)
	}
	want := plot.Layout(lossRun())
	got := plot.Layout(nil, lossRun())
	if len(got) != len(want) || len(got) == 0 || got[0].Name != want[0].Name {
		t.Errorf("Layout(nil, run) = %v, want the charts of run alone, %v", got, want)
	}
}

// Smooth's weight lies in [0, 1), as TensorBoard's: outside it the average
// was nonsense (a negative weight flips signs, 1 divides 0 by 0). It is
// clamped: below 0 (or NaN) no smoothing, 1 or more as 0.999.
func TestSmoothClampsItsWeight(t *testing.T) {
	v := []float64{1, 2, 3, 4}
	for _, w := range []float64{-0.5, math.NaN(), math.Inf(-1)} {
		got := plot.Smooth(v, w)
		for i := range v {
			if got[i] != v[i] {
				t.Errorf("Smooth(%v, %v) = %v, want the values unsmoothed", v, w, got)
				break
			}
		}
	}
	// The debiased average at 0.999, as TestSmooth's formula gives it.
	want := []float64{1, 1.5002501250625528, 2.0006670001111133, 2.5012506250623066}
	for _, w := range []float64{1, 1.5, math.Inf(1)} {
		got := plot.Smooth(v, w)
		for i := range v {
			if math.IsNaN(got[i]) || math.Abs(got[i]-want[i]) > 1e-12 {
				t.Errorf("Smooth(%v, %v) = %v, want Smooth at 0.999, %v", v, w, got, want)
				break
			}
		}
	}
}

// A bad format is reported before the data is looked at: the caller fixes
// the format first, not the data only to meet the format error next.
func TestRenderChecksTheFormatFirst(t *testing.T) {
	h := &plot.History{}
	h.Log(1, map[string]float64{"loss": math.NaN()})
	var buf bytes.Buffer
	err := plot.Render(&buf, plot.Chart{Name: "loss", Keys: []string{"loss"}}, []*plot.History{h}, "bmp", plot.Options{})
	if err == nil || !strings.Contains(err.Error(), `format "bmp"`) || !strings.Contains(err.Error(), "png") {
		t.Errorf("Render(format bmp) of a NaN run: %v\nwant an error naming the format and the known ones", err)
	}
}
