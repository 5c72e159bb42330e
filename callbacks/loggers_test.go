package callbacks_test

import (
	"bufio"
	"encoding/binary"
	"encoding/csv"
	"encoding/json"
	"hash/crc32"
	"io"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/fulgur-ml/fulgur/callbacks"
	"github.com/fulgur-ml/fulgur/trainer"
)

func TestVersionDir(t *testing.T) {
	root := t.TempDir()
	d, err := callbacks.VersionDir(root, "")
	if err != nil || d != filepath.Join(root, "lightning_logs", "version_0") {
		t.Fatalf("VersionDir = %q, %v", d, err)
	}
	os.MkdirAll(filepath.Join(root, "lightning_logs", "version_0"), 0o755)
	os.MkdirAll(filepath.Join(root, "lightning_logs", "version_7"), 0o755)
	os.MkdirAll(filepath.Join(root, "lightning_logs", "version_x"), 0o755)
	if d, _ := callbacks.VersionDir(root, ""); d != filepath.Join(root, "lightning_logs", "version_8") {
		t.Errorf("after version_7: %q", d)
	}
}

func TestCSVLogger(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	l, err := callbacks.NewCSVLogger(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.LogHyperparams(map[string]any{"lr": 0.001, "name": "mlp: v2", "layers": []int{256, 128}}); err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		step int
		m    map[string]float64
	}{
		{1, map[string]float64{"train_loss": 0.5, "epoch": 0}},
		{2, map[string]float64{"train_loss": 0.25, "epoch": 0}},
		{2, map[string]float64{"val_loss": math.NaN(), "epoch": 0}}, // a new column: the file is rewritten
		{3, map[string]float64{"train_loss": 1e-7, "epoch": 1}},
	}
	for _, s := range steps {
		if err := l.LogMetrics(s.step, s.m); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Finalize("success"); err != nil {
		t.Fatal(err)
	}
	f, _ := os.Open(filepath.Join(dir, "metrics.csv"))
	recs, err := csv.NewReader(f).ReadAll()
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	want := [][]string{
		{"epoch", "step", "train_loss", "val_loss"},
		{"0", "1", "0.5", ""},
		{"0", "2", "0.25", ""},
		{"0", "2", "", "nan"},
		{"1", "3", "1e-07", ""},
	}
	if !reflect.DeepEqual(recs, want) {
		t.Errorf("metrics.csv = %q\nwant %q", recs, want)
	}
	hp, _ := os.ReadFile(filepath.Join(dir, "hparams.yaml"))
	if string(hp) != "layers: [256,128]\nlr: 0.001\nname: \"mlp: v2\"\n" {
		t.Errorf("hparams.yaml = %q", hp)
	}
	// A logger reopening the directory keeps the earlier rows.
	l2, _ := callbacks.NewCSVLogger(dir)
	l2.LogMetrics(4, map[string]float64{"train_loss": 2})
	l2.Finalize("success")
	b, _ := os.ReadFile(filepath.Join(dir, "metrics.csv"))
	if lines := strings.Split(strings.TrimSpace(string(b)), "\n"); len(lines) != 6 || lines[5] != ",4,2," {
		t.Errorf("after reopening: %q", b)
	}
}

func TestJSONLLogger(t *testing.T) {
	dir := t.TempDir()
	l, _ := callbacks.NewJSONLLogger(dir)
	l.LogHyperparams(map[string]any{"lr": 0.1})
	l.LogMetrics(5, map[string]float64{"b": 2, "a": math.Inf(1), "c": 0.125})
	l.LogMetrics(6, map[string]float64{"a": 1})
	if err := l.Finalize("success"); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(filepath.Join(dir, "metrics.jsonl"))
	if string(b) != "{\"step\":5,\"a\":\"Infinity\",\"b\":2,\"c\":0.125}\n{\"step\":6,\"a\":1}\n" {
		t.Errorf("metrics.jsonl = %q", b)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Error(err)
		}
	}
	var hp map[string]float64
	hb, _ := os.ReadFile(filepath.Join(dir, "hparams.json"))
	if json.Unmarshal(hb, &hp) != nil || hp["lr"] != 0.1 {
		t.Errorf("hparams.json = %s", hb)
	}
}

// readTFRecords decodes TFRecord framing and checks both masked CRC-32Cs
// of every record (computed here from the format's definition).
func readTFRecords(t *testing.T, path string) [][]byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r := bufio.NewReader(f)
	mask := func(b []byte) uint32 {
		c := crc32.Checksum(b, crc32.MakeTable(crc32.Castagnoli))
		return ((c >> 15) | (c << 17)) + 0xa282ead8
	}
	var out [][]byte
	for {
		var hdr [12]byte
		if _, err := io.ReadFull(r, hdr[:]); err == io.EOF {
			return out
		} else if err != nil {
			t.Fatalf("record %d header: %v", len(out), err)
		}
		n := binary.LittleEndian.Uint64(hdr[:8])
		if got := binary.LittleEndian.Uint32(hdr[8:]); got != mask(hdr[:8]) {
			t.Fatalf("record %d: length CRC %08x, want %08x", len(out), got, mask(hdr[:8]))
		}
		data := make([]byte, n+4)
		if _, err := io.ReadFull(r, data); err != nil {
			t.Fatalf("record %d: %v", len(out), err)
		}
		if got := binary.LittleEndian.Uint32(data[n:]); got != mask(data[:n]) {
			t.Fatalf("record %d: data CRC %08x, want %08x", len(out), got, mask(data[:n]))
		}
		out = append(out, data[:n])
	}
}

// fields decodes one protobuf message into field number -> raw values
// (varints and fixed values as uint64, length-delimited as []byte).
func fields(t *testing.T, b []byte) map[protowire.Number][]any {
	t.Helper()
	out := map[protowire.Number][]any{}
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			t.Fatalf("bad tag: %v", protowire.ParseError(n))
		}
		b = b[n:]
		var v any
		switch typ {
		case protowire.VarintType:
			v, n = protowire.ConsumeVarint(b)
		case protowire.Fixed64Type:
			v, n = protowire.ConsumeFixed64(b)
		case protowire.Fixed32Type:
			var x uint32
			x, n = protowire.ConsumeFixed32(b)
			v = uint64(x)
		case protowire.BytesType:
			v, n = protowire.ConsumeBytes(b)
		default:
			t.Fatalf("unexpected wire type %v", typ)
		}
		if n < 0 {
			t.Fatalf("field %d: %v", num, protowire.ParseError(n))
		}
		out[num] = append(out[num], v)
		b = b[n:]
	}
	return out
}

func TestTensorBoardEventFile(t *testing.T) {
	dir := t.TempDir()
	clock := time.Unix(1700000000, 500_000_000)
	l, err := callbacks.NewTensorBoardLogger(dir, func() time.Time { return clock })
	if err != nil {
		t.Fatal(err)
	}
	if err := l.LogHyperparams(map[string]any{"lr": 0.001, "optimizer": "adam", "bias": true}); err != nil {
		t.Fatal(err)
	}
	if err := l.LogMetrics(10, map[string]float64{"train_loss": 0.75, "epoch": 0}); err != nil {
		t.Fatal(err)
	}
	if err := l.LogMetrics(20, map[string]float64{"val_loss": 0.5}); err != nil {
		t.Fatal(err)
	}
	if err := l.Finalize("success"); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(filepath.Base(l.Path()), "events.out.tfevents.1700000000.") {
		t.Errorf("file name %s", l.Path())
	}
	recs := readTFRecords(t, l.Path())
	if len(recs) != 5 {
		t.Fatalf("%d records, want 5 (version, hparams start, 2 scalars, hparams end)", len(recs))
	}
	ev := fields(t, recs[0])
	if string(ev[3][0].([]byte)) != "brain.Event:2" || math.Float64frombits(ev[1][0].(uint64)) != 1700000000.5 {
		t.Errorf("first event %v", ev)
	}
	scalars := map[int64]map[string]float32{}
	for _, rec := range recs[2:4] {
		ev := fields(t, rec)
		step := int64(ev[2][0].(uint64))
		scalars[step] = map[string]float32{}
		for _, v := range fields(t, ev[5][0].([]byte))[1] {
			val := fields(t, v.([]byte))
			scalars[step][string(val[1][0].([]byte))] = math.Float32frombits(uint32(val[2][0].(uint64)))
		}
	}
	want := map[int64]map[string]float32{10: {"epoch": 0, "train_loss": 0.75}, 20: {"val_loss": 0.5}}
	if !reflect.DeepEqual(scalars, want) {
		t.Errorf("scalars %v, want %v", scalars, want)
	}
	// Hyperparameters: Summary.value{tag, metadata.plugin_data{"hparams",
	// HParamsPluginData{session_start_info{hparams map}}}}.
	hp := map[string]any{}
	val := fields(t, fields(t, fields(t, recs[1])[5][0].([]byte))[1][0].([]byte))
	if string(val[1][0].([]byte)) != "_hparams_/session_start_info" {
		t.Errorf("tag %q", val[1][0])
	}
	pd := fields(t, fields(t, val[9][0].([]byte))[1][0].([]byte))
	if string(pd[1][0].([]byte)) != "hparams" {
		t.Errorf("plugin %q", pd[1][0])
	}
	ssi := fields(t, fields(t, pd[2][0].([]byte))[3][0].([]byte))
	for _, e := range ssi[1] {
		kv := fields(t, e.([]byte))
		v := fields(t, kv[2][0].([]byte))
		switch {
		case v[2] != nil:
			hp[string(kv[1][0].([]byte))] = math.Float64frombits(v[2][0].(uint64))
		case v[3] != nil:
			hp[string(kv[1][0].([]byte))] = string(v[3][0].([]byte))
		case v[4] != nil:
			hp[string(kv[1][0].([]byte))] = v[4][0].(uint64) == 1
		}
	}
	if !reflect.DeepEqual(hp, map[string]any{"lr": 0.001, "optimizer": "adam", "bias": true}) {
		t.Errorf("hparams %v", hp)
	}
	get := func(b []byte, num protowire.Number) []byte { return fields(t, b)[num][0].([]byte) }
	sei := get(get(get(get(get(get(recs[4], 5), 1), 9), 1), 2), 4)
	end := fields(t, sei)
	if end[1][0].(uint64) != 1 {
		t.Errorf("session end status %v, want 1 (success)", end[1])
	}
}

func TestLoggersThroughTrainer(t *testing.T) {
	root := t.TempDir()
	dir, _ := callbacks.VersionDir(root, "")
	csvL, _ := callbacks.NewCSVLogger(dir)
	tb, _ := callbacks.NewTensorBoardLogger(dir, nil)
	js, _ := callbacks.NewJSONLLogger(dir)
	if _, err := fit(t, trainer.Config{MaxEpochs: 2, LogEveryNSteps: 4, DefaultRootDir: root, Loggers: []trainer.Logger{csvL, tb, js}}, true); err != nil {
		t.Fatal(err)
	}
	f, _ := os.Open(csvL.Path())
	recs, err := csv.NewReader(f).ReadAll()
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"epoch", "lr", "step", "train_loss_epoch", "train_loss_step", "val_loss"}; !reflect.DeepEqual(recs[0], want) {
		t.Errorf("header %v, want %v", recs[0], want)
	}
	// 2 epochs x 16 steps: 4 step rows, a train-epoch row and a validation
	// row per epoch.
	if len(recs) != 1+2*(4+2) {
		t.Errorf("%d rows:\n%v", len(recs), recs)
	}
	for _, name := range []string{"hparams.yaml", "hparams.json", "metrics.jsonl"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			t.Error(err)
		}
	}
	if n := len(readTFRecords(t, tb.Path())); n != 1+1+12+1 {
		t.Errorf("%d event records, want 15", n)
	}
}

// TestLoggersResumeAt: a run that logged steps 1-5, then resumed from a
// checkpoint at step 3 and logged steps 4-5 again, holds each step once
// in metrics.csv and metrics.jsonl; the TensorBoard file gets the
// SessionLog START event at step 4 by which TensorBoard drops the
// abandoned steps 4-5 of the earlier file.
func TestLoggersResumeAt(t *testing.T) {
	read := map[string]func(t *testing.T, dir string) []string{
		"csv": func(t *testing.T, dir string) []string {
			f, err := os.Open(filepath.Join(dir, "metrics.csv"))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			recs, err := csv.NewReader(f).ReadAll()
			if err != nil {
				t.Fatal(err)
			}
			var out []string
			for _, r := range recs[1:] {
				out = append(out, strings.Join(r, ","))
			}
			return out
		},
		"jsonl": func(t *testing.T, dir string) []string {
			b, err := os.ReadFile(filepath.Join(dir, "metrics.jsonl"))
			if err != nil {
				t.Fatal(err)
			}
			return strings.Split(strings.TrimSpace(string(b)), "\n")
		},
	}
	want := map[string][]string{
		// columns: epoch, step, train_loss, val_loss
		"csv": {",1,1,", ",2,2,", ",3,3,", "0,3,,0.5", ",4,40,", ",5,50,"},
		"jsonl": {`{"step":1,"train_loss":1}`, `{"step":2,"train_loss":2}`, `{"step":3,"train_loss":3}`,
			`{"step":3,"epoch":0,"val_loss":0.5}`, `{"step":4,"train_loss":40}`, `{"step":5,"train_loss":50}`},
	}
	mk := map[string]func(dir string) (logger, error){
		"csv":   func(dir string) (logger, error) { return callbacks.NewCSVLogger(dir) },
		"jsonl": func(dir string) (logger, error) { return callbacks.NewJSONLLogger(dir) },
	}
	for name, newLogger := range mk {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			first, err := newLogger(dir)
			if err != nil {
				t.Fatal(err)
			}
			// A resume into an empty directory is no error.
			if err := first.ResumeAt(0); err != nil {
				t.Fatalf("ResumeAt before any file: %v", err)
			}
			for s := 1; s <= 5; s++ {
				first.LogMetrics(s, map[string]float64{"train_loss": float64(s)})
				if s == 3 {
					first.LogMetrics(s, map[string]float64{"val_loss": 0.5, "epoch": 0})
				}
			}
			first.Finalize("failed")
			again, _ := newLogger(dir)
			resumeAtThree(t, again)
			if got := read[name](t, dir); !reflect.DeepEqual(got, want[name]) {
				t.Errorf("rows after resuming at step 3:\n%q\nwant\n%q", got, want[name])
			}
			if left, _ := filepath.Glob(filepath.Join(dir, "*.tmp")); len(left) > 0 {
				t.Errorf("temporary files left: %v", left)
			}
		})
	}
	t.Run("tensorboard", func(t *testing.T) {
		dir := t.TempDir()
		l, err := callbacks.NewTensorBoardLogger(dir, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.ResumeAt(3); err != nil {
			t.Fatal(err)
		}
		l.Finalize("success")
		recs := readTFRecords(t, l.Path())
		if len(recs) != 3 {
			t.Fatalf("%d records, want the file version and two session starts (see ResumeAt)", len(recs))
		}
		for _, rec := range recs[1:] {
			ev := fields(t, rec)
			if step := ev[2]; len(step) != 1 || step[0].(uint64) != 4 {
				t.Errorf("session start event at step %v, want 4 (TensorBoard purges steps >= it)", step)
			}
			sl, ok := ev[7]
			if !ok {
				t.Fatalf("event fields %v: no session_log (7)", ev)
			}
			if status := fields(t, sl[0].([]byte))[1]; len(status) != 1 || status[0].(uint64) != 1 {
				t.Errorf("SessionLog.status %v, want START (1)", status)
			}
		}
	})
}

// logger is a logger that resumes (trainer.Resumer), as the run
// directory's loggers are.
type logger interface {
	trainer.Logger
	trainer.Resumer
}

// resumeAtThree is the second run of the resume tests: l resumes at step
// 3, logs train_loss 40 and 50 at steps 4 and 5, and finishes.
func resumeAtThree(t *testing.T, l logger) {
	t.Helper()
	if err := l.ResumeAt(3); err != nil {
		t.Fatal(err)
	}
	for s := 4; s <= 5; s++ {
		if err := l.LogMetrics(s, map[string]float64{"train_loss": float64(10 * s)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Finalize("success"); err != nil {
		t.Fatal(err)
	}
}
