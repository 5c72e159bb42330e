package cli_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/fulgur-ml/fulgur/cli"
	"github.com/fulgur-ml/fulgur/models"
)

// printed runs app with -print-config and returns the settings it printed.
func printed(t *testing.T, app cli.App, args ...string) map[string]map[string]any {
	t.Helper()
	var out bytes.Buffer
	app.Stdout = &out
	if err := app.Run(context.Background(), append(args, "-print-config")); err != nil {
		t.Fatalf("%q: %v", args, err)
	}
	var doc map[string]map[string]any
	if err := yaml.Unmarshal(out.Bytes(), &doc); err != nil {
		t.Fatalf("-print-config wrote %q: %v", out.String(), err)
	}
	return doc
}

func writeFile(t *testing.T, name, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestConfigFile(t *testing.T) {
	yml := writeFile(t, "c.yaml", "trainer:\n  max_steps: 7\n  strategy: ddp\n  max-time: 90s\nmodel:\n  lr: 0.01\n  sizes: [784, 32, 10]\ndata:\n  batch_size: 32\n")
	m := &models.MLP{}
	app := cli.App{Name: "mlp", Model: m, Data: &cli.FashionMNIST{}}
	doc := printed(t, app, "-config", yml, "-max-steps", "9")
	// The file sets what the command line leaves; the command line wins.
	if doc["trainer"]["max_steps"] != 9.0 || doc["trainer"]["strategy"] != "ddp" || doc["trainer"]["max_time"] != "1m30s" ||
		doc["model"]["lr"] != 0.01 || doc["data"]["batch_size"] != 32.0 || doc["trainer"]["max_epochs"] != 0.0 {
		t.Errorf("settings %v", doc)
	}
	// The values reach the module itself.
	if m.LR != 0.01 || len(m.Sizes) != 3 || m.Sizes[1] != 32 {
		t.Errorf("model %+v", m)
	}

	// What -print-config writes, -config reads back to the same settings;
	// JSON is read as well.
	var out bytes.Buffer
	app = cli.App{Name: "mlp", Model: &models.MLP{}, Data: &cli.FashionMNIST{}, Stdout: &out}
	if err := app.Run(context.Background(), []string{"-config", yml, "-seed", "4", "-fast-dev-run", "2", "-print-config"}); err != nil {
		t.Fatal(err)
	}
	again := printed(t, cli.App{Name: "mlp", Model: &models.MLP{}, Data: &cli.FashionMNIST{}}, "-config", writeFile(t, "p.yaml", out.String()))
	first := printed(t, cli.App{Name: "mlp", Model: &models.MLP{}, Data: &cli.FashionMNIST{}}, "-config", yml, "-seed", "4", "-fast-dev-run", "2")
	a, _ := yaml.Marshal(again)
	b, _ := yaml.Marshal(first)
	if !bytes.Equal(a, b) || first["trainer"]["fast_dev_run"] != 2.0 {
		t.Errorf("read back:\n%s\nwant:\n%s", a, b)
	}
	js := writeFile(t, "c.json", `{"trainer": {"max_steps": 5}, "model": {"lr": 0.5}}`)
	doc = printed(t, cli.App{Name: "mlp", Model: &models.MLP{}, Data: &cli.FashionMNIST{}}, "-config", js)
	if doc["trainer"]["max_steps"] != 5.0 || doc["model"]["lr"] != 0.5 {
		t.Errorf("from JSON: %v", doc)
	}
}

func TestConfigFileErrors(t *testing.T) {
	for _, c := range []struct{ body, want string }{
		{"trainer:\n  lr: 0.1\n", "trainer.lr is a model setting: move it under model:"},
		{"trainer:\n  warp_factor: 3\n", "trainer.warp_factor is not a flag of this program: the trainer settings are accelerator, "},
		{"trainer:\n  max_stepz: 3\n", "trainer.max_stepz is not a flag of this program: did you mean max_steps?"},
		{"optimizer:\n  lr: 3\n", `unknown section "optimizer": use trainer:, model: and data:`},
		{"trainer:\n  max_steps: ten\n", `trainer.max_steps is "ten": use a whole number`},
		{"model:\n  lr: -2\n", "-lr is -2: use a value > 0"},
		{"trainer: [1, 2]\n", "section trainer: holds [1,2]: want flag: value pairs, such as trainer: {max_epochs: ...}"},
		{"[1, 2]\n", "want sections trainer:, model: and data:"},
		// A flat file, flags without their sections, used to get "json:
		// cannot unmarshal number into Go value of type map[string]interface {}".
		{"max_epochs: 3\n", "max_epochs is at the top level: settings go under their section, here trainer: (trainer: {max_epochs: 3})"},
		{"lr: 0.1\n", "lr is at the top level: settings go under their section, here model: (model: {lr: 0.1})"},
		{"trainer:\n  strategy:\n", "trainer.strategy: the value is empty"},
		{"trainer:\n\tmax_steps: 3\n", "not YAML or JSON"},
		// Written twice: the last one used to win without a word.
		{"trainer:\n  max_steps: 3\nmodel:\n  lr: 0.1\ntrainer:\n  max_epochs: 2\n", `key "trainer" already set in map: write each section and each setting once`},
		{"trainer:\n  max_steps: 3\n  max_steps: 4\n", `key "max_steps" already set in map`},
		{`{"model": {"lr": 0.1}, "model": {"lr": 0.2}}`, `key "model" already set in map`},
		// One flag in both spellings: one of the two was kept without a word.
		{"trainer:\n  max_steps: 3\n  max-steps: 4\n", "trainer.max-steps and trainer.max_steps are both -max-steps: write it once"},
		{`{"data": {"batch_size": 8, "batch-size": 16}}`, "data.batch-size and data.batch_size are both -batch-size: write it once"},
	} {
		p := writeFile(t, "c.yaml", c.body)
		err := cli.App{Name: "mlp", Model: &models.MLP{}, Data: &cli.FashionMNIST{}}.Run(context.Background(), []string{"-config", p, "-print-config"})
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "-config "+p) && !strings.HasPrefix(c.want, "-lr") {
			t.Errorf("%q: err = %v, want %q", c.body, err, c.want)
		}
	}
	err := cli.App{Name: "mlp", Model: &models.MLP{}, Data: &cli.FashionMNIST{}}.Run(context.Background(), []string{"-config", filepath.Join(t.TempDir(), "none.yaml")})
	if err == nil || !strings.Contains(err.Error(), "none.yaml") {
		t.Errorf("missing file: %v", err)
	}
}

func TestFastDevRunSpellings(t *testing.T) {
	for _, c := range []struct {
		args []string
		want float64
	}{
		{nil, 0},
		{[]string{"-fast-dev-run"}, 1},
		{[]string{"--fast-dev-run"}, 1},
		{[]string{"-fast-dev-run", "-seed", "3"}, 1},
		{[]string{"-fast-dev-run", "5"}, 5},
		{[]string{"-fast-dev-run", "5", "-seed", "3"}, 5},
		{[]string{"-fast-dev-run=7"}, 7},
		{[]string{"-fast-dev-run=0"}, 0},
		{[]string{"-fast-dev-run=true"}, 1},
		{[]string{"test", "-fast-dev-run", "4"}, 4},
		{[]string{"-seed", "3", "test", "-fast-dev-run", "6"}, 6},
	} {
		doc := printed(t, cli.App{Name: "mlp", Model: &models.MLP{}, Data: &cli.FashionMNIST{}}, c.args...)
		if doc["trainer"]["fast_dev_run"] != c.want {
			t.Errorf("%q: fast_dev_run = %v, want %v", c.args, doc["trainer"]["fast_dev_run"], c.want)
		}
	}
	err := cli.App{Name: "mlp", Model: &models.MLP{}, Data: &cli.FashionMNIST{}}.Run(context.Background(), []string{"-fast-dev-run=-2"})
	if err == nil || !strings.Contains(err.Error(), "-fast-dev-run") || !strings.Contains(err.Error(), "a count of 0 or more") {
		t.Errorf("-fast-dev-run=-2: %v", err)
	}
}

// Under -fast-dev-run the program's defaults for the run's length step
// aside (the trainer fixes it); what the user sets stays.
func TestFastDevRunClearsDefaultLengths(t *testing.T) {
	app := func() cli.App {
		return cli.App{Name: "mlp", Model: &models.MLP{}, Data: &cli.FashionMNIST{}, Trainer: cli.Settings{MaxEpochs: 1, LimitValBatches: 4}}
	}
	doc := printed(t, app(), "-fast-dev-run", "2")
	if doc["trainer"]["max_epochs"] != 0.0 || doc["trainer"]["limit_val_batches"] != 0.0 {
		t.Errorf("settings %v", doc["trainer"])
	}
	doc = printed(t, app(), "-fast-dev-run", "2", "-max-epochs", "3")
	if doc["trainer"]["max_epochs"] != 3.0 {
		t.Errorf("an explicit -max-epochs was dropped: %v", doc["trainer"])
	}
	doc = printed(t, app())
	if doc["trainer"]["max_epochs"] != 1.0 || doc["trainer"]["limit_val_batches"] != 4.0 {
		t.Errorf("without -fast-dev-run: %v", doc["trainer"])
	}
}

// -num-sanity-val-steps is 2 unless given, as Lightning's
// num_sanity_val_steps; 0 turns the check off in the trainer.
func TestNumSanityValSteps(t *testing.T) {
	app := cli.App{Name: "mlp", Model: &models.MLP{}, Data: &cli.FashionMNIST{}}
	if v := printed(t, app)["trainer"]["num_sanity_val_steps"]; v != 2.0 {
		t.Errorf("default num_sanity_val_steps %v, want 2", v)
	}
	if v := printed(t, app, "-num-sanity-val-steps", "0")["trainer"]["num_sanity_val_steps"]; v != 0.0 {
		t.Errorf("-num-sanity-val-steps 0 printed %v", v)
	}
	for _, c := range []struct {
		n       int
		disable bool
	}{{0, true}, {3, false}, {-1, false}} {
		s := cli.Settings{NumSanityVal: c.n}
		cfg, err := s.TrainerConfig()
		if err != nil {
			t.Fatal(err)
		}
		if cfg.DisableSanityCheck != c.disable || (!c.disable && cfg.NumSanityValSteps != c.n) {
			t.Errorf("-num-sanity-val-steps %d: trainer.Config NumSanityValSteps %d, DisableSanityCheck %v", c.n, cfg.NumSanityValSteps, cfg.DisableSanityCheck)
		}
	}
}
