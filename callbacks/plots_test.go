package callbacks_test

import (
	"bytes"
	"context"
	"image/png"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	G "gorgonia.org/gorgonia"

	"github.com/fulgur-ml/fulgur/callbacks"
	"github.com/fulgur-ml/fulgur/data"
	"github.com/fulgur-ml/fulgur/module"
	"github.com/fulgur-ml/fulgur/optim"
	"github.com/fulgur-ml/fulgur/profiler"
	"github.com/fulgur-ml/fulgur/trainer"
)

// plotsModel fits y = x·w + b; it logs train_loss per step and epoch,
// val_loss, and test_loss.
type plotsModel struct{}

func (plotsModel) Configure(b *module.Builder) error {
	fc := b.Scope("fc")
	fc.Param("w", []int{4, 1}, module.Normal(0, 0.1))
	fc.Param("b", []int{1}, module.Zeros())
	fc.Layer("Linear", 5)
	return nil
}

func (plotsModel) loss(s *module.Step) *G.Node {
	pred := G.Must(G.Mul(s.Input("x"), s.Param("fc.w")))
	pred = G.Must(G.BroadcastAdd(pred, s.Param("fc.b"), nil, []byte{0}))
	pred = G.Must(G.Reshape(pred, []int{s.BatchSize()}))
	return G.Must(G.Mean(G.Must(G.Square(G.Must(G.Sub(pred, s.Input("y")))))))
}

func (m plotsModel) TrainingStep(s *module.Step) (*G.Node, error) {
	l := m.loss(s)
	s.Log("train_loss", l, module.OnEpoch(true))
	return l, nil
}

func (m plotsModel) ValidationStep(s *module.Step) error {
	s.Log("val_loss", m.loss(s))
	return nil
}

func (m plotsModel) TestStep(s *module.Step) error {
	s.Log("test_loss", m.loss(s))
	return nil
}

func (plotsModel) ConfigureOptimizers() (optim.Optimizer, optim.Scheduler, error) {
	o, err := optim.NewAdam(optim.AdamConfig{LR: 0.05})
	return o, nil, err
}

// plotsData has 16 batches of 32 rows.
func plotsData(t testing.TB) *data.Loader {
	r := rand.New(rand.NewPCG(7, 8))
	n := 512
	x := make([]float32, n*4)
	y := make([]float32, n)
	for i := range y {
		s := float32(0.75)
		for j, w := range []float32{0.5, -1.5, 2, 0.25} {
			v := float32(r.NormFloat64())
			x[i*4+j] = v
			s += v * w
		}
		y[i] = s
	}
	ds, err := data.NewInMemory([]data.Field{{Name: "x", Shape: []int{4}}, {Name: "y"}}, [][]float32{x, y})
	if err != nil {
		t.Fatal(err)
	}
	l, err := data.NewLoader(ds, data.LoaderConfig{BatchSize: 32, Shuffle: true, Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// fakeProc is a process whose CPU time grows by cpu per wall second.
type fakeProc struct {
	now time.Time
	cpu time.Duration
	rss uint64
}

func (f *fakeProc) tick() {
	f.now = f.now.Add(time.Second)
	f.cpu += 1500 * time.Millisecond
	f.rss += 1 << 20
}
func (f *fakeProc) Now() time.Time { return f.now }
func (f *fakeProc) Sample() (callbacks.ProcessSample, error) {
	f.tick()
	return callbacks.ProcessSample{CPU: f.cpu, RSS: 100<<20 + f.rss, PeakRSS: 200 << 20}, nil
}

func TestPlotsAndReportAfterFitAndTest(t *testing.T) {
	root := t.TempDir()
	dir, err := callbacks.VersionDir(root, "")
	if err != nil {
		t.Fatal(err)
	}
	csvLog, err := callbacks.NewCSVLogger(dir)
	if err != nil {
		t.Fatal(err)
	}
	ckpt, err := callbacks.NewModelCheckpoint(callbacks.ModelCheckpointConfig{Dirpath: filepath.Join(dir, "checkpoints"), SaveLast: true})
	if err != nil {
		t.Fatal(err)
	}
	proc := &fakeProc{now: time.Unix(0, 0)}
	stats, err := callbacks.NewDeviceStatsMonitor(callbacks.DeviceStatsConfig{Dir: dir, Sample: proc.Sample, Now: proc.Now})
	if err != nil {
		t.Fatal(err)
	}
	prof := profiler.NewSimple()
	flags := struct {
		MaxEpochs int
		Strategy  string
	}{3, "single"}
	plots, err := callbacks.NewPlots(callbacks.PlotsConfig{
		Dir: dir, Config: flags, Strategy: "single", ProfileReport: prof.Report,
		Now: func() time.Time { return time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC) },
	})
	if err != nil {
		t.Fatal(err)
	}
	tr, err := trainer.New(trainer.Config{
		MaxEpochs: 3, LogEveryNSteps: 4, Seed: 5, DefaultRootDir: root, Out: io.Discard,
		EnableProgressBar: trainer.Bool(false), Profiler: prof,
		Loggers: []trainer.Logger{csvLog}, Callbacks: []trainer.Callback{stats, ckpt, plots},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := csvLog.LogHyperparams(map[string]any{"lr": 0.05, "optimizer": "adam"}); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	l := plotsData(t)
	if err := tr.Fit(ctx, plotsModel{}, l, l); err != nil {
		t.Fatal(err)
	}
	res, err := tr.Test(ctx, plotsModel{}, l)
	if err != nil {
		t.Fatal(err)
	}

	// 16 steps an epoch, logged every 4: cpu_pct is 1.5 s CPU per 1 s wall.
	if got := stats.Last()["cpu_pct"]; got != 150 {
		t.Errorf("cpu_pct = %v, want 150", got)
	}
	if got := stats.Last()["peak_rss_mb"]; got != 200 {
		t.Errorf("peak_rss_mb = %v, want 200", got)
	}
	files := map[string]bool{}
	for _, f := range plots.Files() {
		files[f] = true
	}
	for _, want := range []string{"loss.png", "loss.svg", "loss_epoch.png", "cpu.png", "memory.svg", "ranks_cpu.png", "ranks_memory.png"} {
		if !files[want] {
			t.Errorf("no %s among %v", want, plots.Files())
		}
	}
	raw, err := os.ReadFile(filepath.Join(dir, "plots", "loss.png"))
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(raw))
	if err != nil || img.Bounds().Dx() != 768 || img.Bounds().Dy() != 480 {
		t.Fatalf("loss.png: %v, %v; want a 768x480 PNG", err, img.Bounds())
	}
	md, err := os.ReadFile(plots.ReportPath())
	if err != nil {
		t.Fatal(err)
	}
	report := string(md)
	for _, want := range []string{
		"# Run report: " + filepath.Base(root) + "/version_0",
		"Status **success** · world size 1 · strategy `single` · last logged step 48 · epochs logged 3 · written 2026-01-02T03:04:05Z.",
		"| test_loss | " + strconv.FormatFloat(res["test_loss"], 'g', 5, 64) + " |",
		"| val_loss |", "| train_loss_epoch |", "| cpu_pct | 150 | 48 |",
		"![loss](plots/loss.png)", "![ranks_cpu](plots/ranks_cpu.png)",
		"- [last.ckpt](checkpoints/last.ckpt)",
		"| lr | 0.05 |", "| optimizer | adam |",
		"| MaxEpochs | 3 |",
		"## Profiler", "forward+backward",
	} {
		if !strings.Contains(report, want) {
			t.Errorf("report lacks %q:\n%s", want, report)
		}
	}
	rank0, err := os.ReadFile(filepath.Join(dir, "device_stats_rank0.csv"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(rank0)), "\n")
	if len(lines) != 1+12 || lines[0] != "step,epoch,cpu_pct,rss_mb,peak_rss_mb" || !strings.HasPrefix(lines[1], "4,0,150,") {
		t.Errorf("device_stats_rank0.csv = %q, want a header and 12 rows from step 4", lines)
	}
}

func TestPlotsErrors(t *testing.T) {
	if _, err := callbacks.NewPlots(callbacks.PlotsConfig{}); err == nil || !strings.Contains(err.Error(), "Dir is empty") {
		t.Errorf("err = %v, want Dir is empty", err)
	}
	// Metrics logged but no CSV logger: the error says what to add.
	dir := t.TempDir()
	p, err := callbacks.NewPlots(callbacks.PlotsConfig{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	err = p.OnFitEnd(context.Background(), &trainer.State{IsGlobalZero: true, Metrics: trainer.MetricsOf(map[string]float64{"train_loss": 1})})
	if err == nil || !strings.Contains(err.Error(), "add a CSVLogger") {
		t.Errorf("err = %v, want one asking for a CSVLogger", err)
	}
	// Not rank 0, or a fast-dev run: nothing happens.
	for _, s := range []*trainer.State{{IsGlobalZero: false}, {IsGlobalZero: true, FastDevRun: true}} {
		if err := p.OnFitEnd(context.Background(), s); err != nil {
			t.Errorf("OnFitEnd(%+v) = %v, want nil", s, err)
		}
	}
	if _, err := os.Stat(p.ReportPath()); !os.IsNotExist(err) {
		t.Errorf("report written without a fit: %v", err)
	}
}
