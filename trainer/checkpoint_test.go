package trainer_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fulgur-ml/fulgur/data"
	"github.com/fulgur-ml/fulgur/module"
	"github.com/fulgur-ml/fulgur/optim"
	"github.com/fulgur-ml/fulgur/trainer"
)

// schedReg is linreg with Adam and a per-step StepLR schedule, so resume
// must restore moments, the step count and the schedule's position.
type schedReg struct {
	linreg
	epochSched bool
}

func (m *schedReg) ConfigureOptimizers() (optim.Optimizer, optim.Scheduler, error) {
	o, err := optim.NewAdam(optim.AdamConfig{LR: m.lr})
	if err != nil {
		return nil, nil, err
	}
	iv := optim.PerStep
	if m.epochSched {
		iv = optim.PerEpoch
	}
	s, err := optim.NewStepLR(m.lr, 7, 0.5, optim.Every(iv))
	return o, s, err
}

// saver writes a checkpoint whenever when says so, to dir/NAME-step=N.ckpt,
// and records the paths.
type saver struct {
	dir   string
	when  map[string]func(*trainer.State) bool
	paths []string
	last  int
	log   func(string)
}

func (s *saver) Name() string { return "saver" }

func (s *saver) save(ctx context.Context, st *trainer.State, hook string) error {
	f := s.when[hook]
	if f == nil || !f(st) {
		return nil
	}
	p := filepath.Join(s.dir, fmt.Sprintf("%s-e%d-b%d-step=%d.ckpt", hook, st.Epoch, st.BatchIdx, st.GlobalStep))
	if err := st.SaveCheckpoint(ctx, p); err != nil {
		return err
	}
	s.paths = append(s.paths, p)
	if s.log != nil {
		s.log(fmt.Sprintf("saved %d %s", st.GlobalStep, p))
	}
	return nil
}

func (s *saver) OnTrainBatchEnd(ctx context.Context, st *trainer.State) error {
	if st.GlobalStep == s.last { // inside an accumulation window
		return nil
	}
	s.last = st.GlobalStep
	return s.save(ctx, st, "batch")
}
func (s *saver) OnValidationEnd(ctx context.Context, st *trainer.State) error {
	return s.save(ctx, st, "val")
}
func (s *saver) OnTrainEpochEnd(ctx context.Context, st *trainer.State) error {
	return s.save(ctx, st, "epoch")
}

// counter is a Stateful callback: resume must restore its count.
type counter struct{ batches int }

func (c *counter) Name() string { return "counter" }
func (c *counter) OnTrainBatchEnd(context.Context, *trainer.State) error {
	c.batches++
	return nil
}
func (c *counter) StateDict() ([]byte, error) { return json.Marshal(c.batches) }
func (c *counter) LoadStateDict(b []byte) error {
	return json.Unmarshal(b, &c.batches)
}

type resumeJob struct {
	cfg       trainer.Config
	train     *data.Loader
	val       *data.Loader
	mod       func() module.Module
	withVal   bool
	callbacks func() []trainer.Callback
}

func newResumeJob(t testing.TB, accum, valEvery int) resumeJob {
	ds := regression(t, 500, 0.1, 9)
	return resumeJob{
		cfg: trainer.Config{MaxEpochs: 3, Seed: 21, Deterministic: true, AccumulateGradBatches: accum,
			ValCheckInterval: valEvery, LogEveryNSteps: 1},
		train: loader(t, ds, 32, true, false),
		val:   loader(t, regression(t, 64, 0.1, 10), 32, false, false),
		mod:   func() module.Module { return &schedReg{linreg: linreg{in: 4, lr: 0.05}} },
	}
}

// run fits the job, resuming from ckpt when it is not "", with extra
// callbacks, and returns the trainer.
func (j resumeJob) run(t testing.TB, ckpt string, cbs ...trainer.Callback) *trainer.Trainer {
	t.Helper()
	cfg := quiet(j.cfg)
	cfg.Callbacks = cbs
	cfg.DefaultRootDir = t.TempDir()
	tr, err := trainer.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var opts []trainer.FitOption
	if ckpt != "" {
		opts = append(opts, trainer.FromCheckpoint(ckpt))
	}
	if err := tr.Fit(context.Background(), j.mod(), j.train, j.val, opts...); err != nil {
		t.Fatalf("Fit (resume from %q): %v", ckpt, err)
	}
	return tr
}

func TestResumeFromEveryHookIsExact(t *testing.T) {
	// 500 rows at batch 32: 16 batches an epoch.
	cases := []struct {
		name            string
		accum, valEvery int
		when            map[string]func(*trainer.State) bool
	}{
		{"steps", 1, 0, map[string]func(*trainer.State) bool{
			"batch": func(s *trainer.State) bool { return s.GlobalStep%5 == 0 || s.GlobalStep == 16 },
			"val":   func(s *trainer.State) bool { return true },
			"epoch": func(s *trainer.State) bool { return true },
		}},
		{"accumulate 3", 3, 0, map[string]func(*trainer.State) bool{
			"batch": func(s *trainer.State) bool { return s.GlobalStep%2 == 0 },
			"val":   func(s *trainer.State) bool { return s.Epoch == 1 },
		}},
		{"mid-epoch validation", 1, 5, map[string]func(*trainer.State) bool{
			"batch": func(s *trainer.State) bool { return s.BatchIdx == 4 || s.BatchIdx == 9 },
			"val":   func(s *trainer.State) bool { return s.Epoch == 0 },
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			job := newResumeJob(t, tc.accum, tc.valEvery)
			sv := &saver{dir: t.TempDir(), when: tc.when, last: 0}
			cnt := &counter{}
			ref := job.run(t, "", sv, cnt)
			want := ref.Store().SHA256()
			wantMetrics := ref.Metrics()
			if len(sv.paths) < 3 {
				t.Fatalf("only %d checkpoints were written: %v", len(sv.paths), sv.paths)
			}
			for _, p := range sv.paths {
				c := &counter{}
				got := job.run(t, p, c)
				if h := got.Store().SHA256(); h != want {
					t.Errorf("resumed from %s: weights %s, want %s", filepath.Base(p), h, want)
				}
				if got.Stats().GlobalStep != ref.Stats().GlobalStep {
					t.Errorf("resumed from %s: global step %d, want %d", filepath.Base(p), got.Stats().GlobalStep, ref.Stats().GlobalStep)
				}
				if c.batches != cnt.batches {
					t.Errorf("resumed from %s: the stateful callback counted %d batches, want %d", filepath.Base(p), c.batches, cnt.batches)
				}
				gm := got.Metrics()
				for _, k := range []string{"val_loss", "train_loss_epoch"} {
					if gm[k] != wantMetrics[k] {
						t.Errorf("resumed from %s: %s = %v, want %v", filepath.Base(p), k, gm[k], wantMetrics[k])
					}
				}
			}
		})
	}
}

func TestCheckpointInsideAccumulationWindowIsRefused(t *testing.T) {
	job := newResumeJob(t, 4, 0)
	cfg := quiet(job.cfg)
	dir := t.TempDir()
	cfg.Callbacks = []trainer.Callback{&everyBatch{dir: dir}}
	tr, _ := trainer.New(cfg)
	err := tr.Fit(context.Background(), job.mod(), job.train, nil)
	if err == nil || !strings.Contains(err.Error(), "inside a gradient accumulation window") || !strings.Contains(err.Error(), "callbacks/everyBatch.OnTrainBatchEnd") {
		t.Fatalf("err = %v, want a refusal naming the accumulation window", err)
	}
}

type everyBatch struct{ dir string }

func (e *everyBatch) Name() string { return "everyBatch" }
func (e *everyBatch) OnTrainBatchEnd(ctx context.Context, s *trainer.State) error {
	return s.SaveCheckpoint(ctx, filepath.Join(e.dir, "x.ckpt"))
}

// writeOne trains briefly and writes one checkpoint; it returns the
// trainer and the file.
func writeOne(t *testing.T, precision string) (*trainer.Trainer, string) {
	t.Helper()
	dir := t.TempDir()
	sv := &saver{dir: dir, when: map[string]func(*trainer.State) bool{"epoch": func(*trainer.State) bool { return true }}, last: 0}
	ds := regression(t, 64, 0.1, 3)
	tr, err := trainer.New(quiet(trainer.Config{MaxEpochs: 1, Seed: 2, Precision: precision, Callbacks: []trainer.Callback{sv}}))
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Fit(context.Background(), &schedReg{linreg: linreg{in: 4, lr: 0.05}}, loader(t, ds, 16, true, false), nil); err != nil {
		t.Fatal(err)
	}
	if len(sv.paths) != 1 {
		t.Fatalf("paths = %v", sv.paths)
	}
	return tr, sv.paths[0]
}

// readSafetensors is an independent reader written from the format's
// specification: an 8-byte little-endian header size N, N bytes of JSON
// mapping names to {dtype, shape, data_offsets} plus an optional
// "__metadata__" of strings, then the byte buffer, which the tensors must
// cover exactly.
func readSafetensors(t *testing.T, b []byte) (map[string][]float64, map[string][]int, map[string]string) {
	t.Helper()
	n := binary.LittleEndian.Uint64(b[:8])
	if n%8 != 0 {
		t.Errorf("header size %d is not a multiple of 8 (the reference writer aligns it)", n)
	}
	var hdr map[string]any
	if err := json.Unmarshal(b[8:8+n], &hdr); err != nil {
		t.Fatalf("header: %v", err)
	}
	buf := b[8+n:]
	vals := map[string][]float64{}
	shapes := map[string][]int{}
	meta := map[string]string{}
	type span struct{ lo, hi int }
	var spans []span
	for name, v := range hdr {
		if name == "__metadata__" {
			for k, x := range v.(map[string]any) {
				meta[k] = x.(string)
			}
			continue
		}
		e := v.(map[string]any)
		offs := e["data_offsets"].([]any)
		lo, hi := int(offs[0].(float64)), int(offs[1].(float64))
		spans = append(spans, span{lo, hi})
		var shape []int
		count := 1
		for _, d := range e["shape"].([]any) {
			shape = append(shape, int(d.(float64)))
			count *= int(d.(float64))
		}
		shapes[name] = shape
		raw := buf[lo:hi]
		var out []float64
		switch e["dtype"] {
		case "F32":
			for i := 0; i < len(raw); i += 4 {
				out = append(out, float64(math.Float32frombits(binary.LittleEndian.Uint32(raw[i:]))))
			}
		case "F64":
			for i := 0; i < len(raw); i += 8 {
				out = append(out, math.Float64frombits(binary.LittleEndian.Uint64(raw[i:])))
			}
		default:
			t.Fatalf("tensor %s: dtype %v", name, e["dtype"])
		}
		if len(out) != count {
			t.Errorf("tensor %s: %d values for shape %v", name, len(out), shape)
		}
		vals[name] = out
	}
	sort.Slice(spans, func(i, j int) bool { return spans[i].lo < spans[j].lo })
	pos := 0
	for _, s := range spans {
		if s.lo != pos {
			t.Errorf("byte buffer has a hole or overlap at %d", pos)
		}
		pos = s.hi
	}
	if pos != len(buf) {
		t.Errorf("tensors cover %d of %d buffer bytes", pos, len(buf))
	}
	return vals, shapes, meta
}

func TestCheckpointIsSafetensors(t *testing.T) {
	for _, prec := range []string{"32", "64"} {
		t.Run(prec, func(t *testing.T) {
			tr, path := writeOne(t, prec)
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			vals, shapes, meta := readSafetensors(t, b)
			st := tr.Store()
			for _, e := range st.Entries() {
				got := vals[e.Name]
				if !reflect.DeepEqual(shapes[e.Name], e.Shape) {
					t.Errorf("%s: shape %v, want %v", e.Name, shapes[e.Name], e.Shape)
				}
				for i := 0; i < e.Len; i++ {
					var want float64
					if prec == "32" {
						want = float64(st.Data32()[e.Offset+i])
					} else {
						want = st.Data64()[e.Offset+i]
					}
					if got[i] != want {
						t.Fatalf("%s[%d] = %v, want %v", e.Name, i, got[i], want)
					}
				}
			}
			for _, k := range []string{"optimizer/exp_avg", "optimizer/exp_avg_sq"} {
				if len(vals[k]) != st.NumParams() {
					t.Errorf("%s has %d values, want %d", k, len(vals[k]), st.NumParams())
				}
			}
			if meta["format"] != trainer.CheckpointFormat || meta["format_version"] != "2" {
				t.Errorf("metadata = %v", meta)
			}
			var ts map[string]any
			if err := json.Unmarshal([]byte(meta["fulgur.trainer"]), &ts); err != nil || ts["global_step"] != float64(4) || ts["epoch"] != float64(1) {
				t.Errorf("trainer state = %v (%v), want global_step 4 at epoch 1", ts, err)
			}
			pythonReads(t, path, st)
		})
	}
}

// pythonReads opens the file from Python: with the safetensors package
// when it is installed, else with torch and a header parse written from
// the specification (what safetensors.torch does), so a PyTorch user's view
// is checked wherever python3-torch is. Neither is required.
func pythonReads(t *testing.T, path string, st *module.Store) {
	const viaSafetensors = `import sys, json
from safetensors.numpy import load_file
d = load_file(sys.argv[1])
print(json.dumps({k: [float(x) for x in v.ravel()] for k, v in d.items()}))`
	const viaTorch = `import sys, json, struct, torch
b = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8+n])
h.pop("__metadata__", None)
dt = {"F32": torch.float32, "F64": torch.float64}
out = {}
for k, e in h.items():
    lo, hi = e["data_offsets"]
    t = torch.frombuffer(bytearray(b[8+n+lo:8+n+hi]), dtype=dt[e["dtype"]]).reshape(e["shape"])
    out[k] = [float(x) for x in t.flatten()]
print(json.dumps(out))`
	if testing.Short() {
		t.Log("-short: skipped the Python reader")
		return
	}
	var script, py string
	for _, cand := range []string{"python3", "/usr/bin/python3"} {
		p, err := exec.LookPath(cand)
		if err != nil {
			continue
		}
		if exec.Command(p, "-c", "import safetensors.numpy").Run() == nil {
			script, py = viaSafetensors, p
			break
		}
		if script == "" && exec.Command(p, "-c", "import torch").Run() == nil {
			script, py = viaTorch, p
		}
	}
	if script == "" {
		t.Log("no python3 with safetensors or torch: skipped the Python reader")
		return
	}
	out, err := exec.Command(py, "-c", script, path).Output()
	if err != nil {
		t.Fatalf("python reader: %v", err)
	}
	var got map[string][]float64
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatal(err)
	}
	for _, e := range st.Entries() {
		if len(got[e.Name]) != e.Len {
			t.Fatalf("python read %d values of %s, want %d", len(got[e.Name]), e.Name, e.Len)
		}
		for i, v := range got[e.Name] {
			var want float64
			if d := st.Data32(); d != nil {
				want = float64(d[e.Offset+i])
			} else {
				want = st.Data64()[e.Offset+i]
			}
			if v != want {
				t.Fatalf("python read %s[%d] = %v, want %v", e.Name, i, v, want)
			}
		}
	}
	t.Logf("python (%s) read every tensor back", py)
}

func TestCorruptCheckpointsAreRejected(t *testing.T) {
	_, path := writeOne(t, "32")
	good, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := trainer.VerifyCheckpoint(path); err != nil {
		t.Fatalf("the intact file: %v", err)
	}
	bad := filepath.Join(t.TempDir(), "bad.ckpt")
	check := func(b []byte) error {
		if err := os.WriteFile(bad, b, 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := trainer.VerifyCheckpoint(bad)
		return err
	}
	// Every cut is caught.
	for n := 0; n < len(good); n++ {
		if err := check(good[:n]); err == nil {
			t.Fatalf("a file cut to %d of %d bytes was accepted", n, len(good))
		}
	}
	// Every flipped byte is caught.
	for i := range good {
		b := bytes.Clone(good)
		b[i] ^= 0x5a
		if err := check(b); err == nil {
			t.Fatalf("byte %d flipped (%q -> %q) was accepted", i, good[i], b[i])
		}
	}
	// The messages name what is wrong.
	hdr := int(binary.LittleEndian.Uint64(good[:8]))
	var h map[string]json.RawMessage
	json.Unmarshal(good[8:8+hdr], &h)
	var w struct {
		Offsets [2]int `json:"data_offsets"`
	}
	json.Unmarshal(h["w"], &w)
	cases := []struct {
		name string
		edit func([]byte) []byte
		want string
	}{
		{"cut in the data", func(b []byte) []byte { return b[:len(b)-3] }, "truncated"},
		{"cut in the header", func(b []byte) []byte { return b[:20] }, "truncated"},
		{"flip in w", func(b []byte) []byte { b[8+hdr+w.Offsets[0]+2] ^= 1; return b }, `tensor "w"`},
		{"flip in trainer state", func(b []byte) []byte {
			i := bytes.Index(b, []byte(`global_step`))
			b[i+2] ^= 1
			return b
		}, `"fulgur.trainer"`},
		{"not a checkpoint", func([]byte) []byte { return []byte("hello, world") }, "not a checkpoint"},
	}
	for _, tc := range cases {
		err := check(tc.edit(bytes.Clone(good)))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want it to mention %s", tc.name, err, tc.want)
		}
	}
}

func TestResumeRejectsMismatchedCheckpoints(t *testing.T) {
	_, path := writeOne(t, "32")
	ds := regression(t, 64, 0.1, 3)
	cases := []struct {
		name string
		cfg  trainer.Config
		mod  module.Module
		want []string
	}{
		{"shape", trainer.Config{MaxEpochs: 2}, &schedReg{linreg: linreg{in: 5, lr: 0.05}}, []string{`tensor "w" has shape [4 1] in the checkpoint but [5 1] in the model`}},
		{"dtype", trainer.Config{MaxEpochs: 2, Precision: "64"}, &schedReg{linreg: linreg{in: 4, lr: 0.05}}, []string{`the checkpoint holds F32 tensors ("w", "b") but the model computes in F64`, `Precision to "32"`}},
		{"optimizer", trainer.Config{MaxEpochs: 2}, &linreg{in: 4, lr: 0.05, sgd: true}, []string{`checkpoint's optimizer is "adam" but the module configures "sgd"`}},
		{"scheduler", trainer.Config{MaxEpochs: 2}, &linreg{in: 4, lr: 0.05}, []string{`learning-rate scheduler but the module configures none`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.name == "shape" {
				ds = regression(t, 64, 0.1, 3)
			}
			tr, _ := trainer.New(quiet(tc.cfg))
			l := loader(t, ds, 16, false, false)
			if tc.name == "shape" {
				l = loader(t, wideRegression(t), 16, false, false)
			}
			err := tr.Fit(context.Background(), tc.mod, l, nil, trainer.FromCheckpoint(path))
			if err == nil {
				t.Fatal("resumed from a mismatched checkpoint")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("err = %v\nwant it to contain %q", err, w)
				}
			}
		})
	}
}

func wideRegression(t *testing.T) *data.InMemory {
	x := make([]float32, 64*5)
	y := make([]float32, 64)
	ds, err := data.NewInMemory([]data.Field{{Name: "x", Shape: []int{5}}, {Name: "y"}}, [][]float32{x, y})
	if err != nil {
		t.Fatal(err)
	}
	return ds
}

func TestLoadWeightsAndLatestCheckpoint(t *testing.T) {
	tr, path := writeOne(t, "32")
	root := t.TempDir()
	older := filepath.Join(root, "a", "old.ckpt")
	newer := filepath.Join(root, "b", "c", "new.ckpt")
	junk := filepath.Join(root, "junk.ckpt")
	b, _ := os.ReadFile(path)
	for _, p := range []string{older, newer} {
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(junk, []byte("not a checkpoint"), 0o644)
	now := time.Now()
	os.Chtimes(older, now.Add(-time.Hour), now.Add(-time.Hour))
	os.Chtimes(newer, now.Add(-time.Minute), now.Add(-time.Minute))
	os.Chtimes(junk, now, now)
	got, err := trainer.LatestCheckpoint(root)
	if err != nil || got != newer {
		t.Fatalf("LatestCheckpoint = %q, %v; want %q", got, err, newer)
	}
	if _, err := trainer.LatestCheckpoint(t.TempDir()); err == nil || !strings.Contains(err.Error(), "no checkpoint (*.ckpt) under") {
		t.Errorf("empty dir: err = %v", err)
	}
	info, err := trainer.ReadCheckpointInfo(newer)
	if err != nil || info.GlobalStep != 4 || info.Epoch != 1 || info.BatchIdx != 0 || !reflect.DeepEqual(info.Tensors, []string{"w", "b"}) {
		t.Errorf("info = %+v, %v", info, err)
	}
	st, err := module.NewStore([]module.Spec{{Name: "w", Shape: []int{4, 1}}, {Name: "b", Shape: []int{1}}}, tr.Store().Dtype(), 99)
	if err != nil {
		t.Fatal(err)
	}
	if err := trainer.LoadWeights(newer, st); err != nil {
		t.Fatal(err)
	}
	if st.SHA256() != tr.Store().SHA256() {
		t.Errorf("LoadWeights gave %s, want %s", st.SHA256(), tr.Store().SHA256())
	}
}

// The exact-resume test runs the training job in a child process (this test
// binary, re-executed), kills it with SIGKILL after it has written a
// checkpoint and trained on past it, resumes from the newest checkpoint
// and compares the final weights with an uninterrupted run.

const childEnv = "FULGUR_TRAINER_RESUME_CHILD"

type parker struct {
	at   int
	wait func()
	log  func(string)
}

func (p *parker) Name() string { return "parker" }
func (p *parker) OnTrainBatchEnd(ctx context.Context, s *trainer.State) error {
	if s.GlobalStep == p.at {
		p.log(fmt.Sprintf("parked %d", s.GlobalStep))
		p.wait()
	}
	return nil
}

// firstStep reports the global step after the first batch of a Fit (a
// resumed run starts past 1).
type firstStep struct {
	log  func(string)
	done bool
}

func (f *firstStep) Name() string { return "firstStep" }
func (f *firstStep) OnTrainBatchEnd(ctx context.Context, s *trainer.State) error {
	if !f.done {
		f.done = true
		f.log(fmt.Sprintf("first step %d", s.GlobalStep))
	}
	return nil
}

func TestResumeChildProcess(t *testing.T) {
	mode := os.Getenv(childEnv)
	if mode == "" {
		t.Skip("run by TestExactResumeAfterSIGKILL and TestSIGTERMSavesAndStops")
	}
	dir := os.Getenv(childEnv + "_DIR")
	say := func(s string) { fmt.Printf("CHILD %s\n", s) }
	job := newResumeJob(t, 1, 0)
	job.cfg.MaxEpochs = 40
	cfg := quiet(job.cfg)
	cfg.DefaultRootDir = dir
	in := bufio.NewReader(os.Stdin)
	cfg.Callbacks = []trainer.Callback{
		&saver{dir: filepath.Join(dir, "ckpts"), when: map[string]func(*trainer.State) bool{"batch": func(s *trainer.State) bool { return s.GlobalStep%5 == 0 && s.GlobalStep <= 10 }}, last: 0, log: say},
		&parker{at: 13, log: say, wait: func() {
			// Wait for the parent: a line (after it sent SIGTERM) or EOF
			// (it died), which ends the child.
			if _, err := in.ReadString('\n'); err != nil {
				os.Exit(3)
			}
		}},
	}
	cfg.Callbacks = append(cfg.Callbacks, &firstStep{log: say})
	tr, err := trainer.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	err = tr.Fit(context.Background(), job.mod(), job.train, job.val)
	var ie *trainer.InterruptedError
	if err != nil && !errors.As(err, &ie) {
		t.Fatal(err)
	}
	st := tr.Stats()
	if ie != nil {
		say(fmt.Sprintf("error exit=%d %v", ie.ExitCode(), err))
	}
	say(fmt.Sprintf("done interrupted=%v step=%d ckpt=%s", st.Interrupted, st.GlobalStep, st.InterruptCheckpoint))
}

func startChild(t *testing.T, mode, dir string, env ...string) (*exec.Cmd, *bufio.Scanner, *os.File) {
	cmd := exec.Command(os.Args[0], "-test.run=^TestResumeChildProcess$", "-test.count=1")
	cmd.Env = append(append(os.Environ(), childEnv+"="+mode, childEnv+"_DIR="+dir), env...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdin = pr
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pr.Close()
	t.Cleanup(func() { cmd.Process.Kill(); pw.Close() })
	return cmd, bufio.NewScanner(out), pw
}

// waitFor reads the child's lines until one starts with "CHILD "+prefix;
// when the child ends first, the test fails showing the lines it skipped.
func waitFor(t *testing.T, sc *bufio.Scanner, prefix string) string {
	t.Helper()
	var skipped []string
	for sc.Scan() {
		if l, ok := strings.CutPrefix(sc.Text(), "CHILD "); ok && strings.HasPrefix(l, prefix) {
			return l
		}
		skipped = append(skipped, sc.Text())
	}
	t.Fatalf("the child ended without printing %q (%v); it printed, after the last line waited for:\n%s", prefix, sc.Err(), strings.Join(skipped, "\n"))
	return ""
}

func TestExactResumeAfterSIGKILL(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a child process")
	}
	dir := t.TempDir()
	cmd, sc, _ := startChild(t, "kill", dir)
	waitFor(t, sc, "saved 10")
	waitFor(t, sc, "parked 13") // three steps past the checkpoint, mid-epoch
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	err := cmd.Wait()
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("child did not die of SIGKILL: %v", err)
	}
	last, err := trainer.LatestCheckpoint(dir)
	if err != nil {
		t.Fatal(err)
	}
	info, err := trainer.ReadCheckpointInfo(last)
	if err != nil || info.GlobalStep != 10 || info.Epoch != 0 || info.BatchIdx != 10 {
		t.Fatalf("newest checkpoint %s: %+v, %v; want step 10, epoch 0, batch 10", last, info, err)
	}
	job := newResumeJob(t, 1, 0)
	job.cfg.MaxEpochs = 40
	want := job.run(t, "").Store().SHA256()
	got := job.run(t, last)
	if h := got.Store().SHA256(); h != want {
		t.Fatalf("resumed after SIGKILL: weights %s, want %s (uninterrupted)", h, want)
	}
	if got.Stats().GlobalStep != 40*16 {
		t.Errorf("global step %d, want %d", got.Stats().GlobalStep, 40*16)
	}
}

func TestSIGTERMSavesAndStops(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a child process")
	}
	dir := t.TempDir()
	cmd, sc, stdin := startChild(t, "term", dir)
	waitFor(t, sc, "parked 13")
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	fmt.Fprintln(stdin, "go on")
	msg := waitFor(t, sc, "error")
	done := waitFor(t, sc, "done")
	if err := cmd.Wait(); err != nil {
		t.Fatalf("child exit: %v (%s)", err, done)
	}
	ckpt := filepath.Join(dir, "lightning_logs", "version_0", "checkpoints", "interrupted.ckpt")
	if want := "error exit=143 training interrupted (SIGTERM)"; !strings.HasPrefix(msg, want) || !strings.Contains(msg, "trainer.FromCheckpoint(\""+ckpt) {
		t.Errorf("Fit's error: %q, want %q... naming FromCheckpoint(%q)", msg, want, ckpt)
	}
	if !strings.HasPrefix(done, "done interrupted=true") || !strings.HasSuffix(done, "ckpt="+ckpt) {
		t.Fatalf("child reported %q, want an interrupted run with its checkpoint at %s", done, ckpt)
	}
	info, err := trainer.VerifyCheckpoint(ckpt)
	if err != nil {
		t.Fatal(err)
	}
	// The signal reaches the loop through goroutines, late on a loaded
	// machine: the stop lands at a boundary after step 13, the last one
	// (step 640) when the rest of the run was quicker than they.
	if info.GlobalStep < 13 || info.GlobalStep > 40*16 {
		t.Fatalf("interrupted at step %d, want 13 to %d", info.GlobalStep, 40*16)
	}
	job := newResumeJob(t, 1, 0)
	job.cfg.MaxEpochs = 40
	want := job.run(t, "").Store().SHA256()
	if h := job.run(t, ckpt).Store().SHA256(); h != want {
		t.Fatalf("resumed after SIGTERM at step %d: weights %s, want %s", info.GlobalStep, h, want)
	}
}

func TestTrainerSaveCheckpointAfterFit(t *testing.T) {
	tr, _ := trainer.New(quiet(trainer.Config{MaxEpochs: 1}))
	if err := tr.SaveCheckpoint(context.Background(), filepath.Join(t.TempDir(), "x.ckpt")); err == nil || !strings.Contains(err.Error(), "nothing to save before Fit") {
		t.Fatalf("before Fit: %v", err)
	}
	ds := regression(t, 64, 0.1, 3)
	if err := tr.Fit(context.Background(), &linreg{in: 4, lr: 0.05}, loader(t, ds, 16, false, false), nil); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "final.ckpt")
	if err := tr.SaveCheckpoint(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	info, err := trainer.VerifyCheckpoint(p)
	if err != nil || info.GlobalStep != 4 || info.Epoch != 1 || info.BatchIdx != 0 {
		t.Errorf("info %+v, %v; want step 4, epoch 1, batch 0", info, err)
	}
}
