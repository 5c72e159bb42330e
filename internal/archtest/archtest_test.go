package archtest

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// Exemptions are today's imports that break the target layering, each kept
// until the change named beside it lands; the lead removes them as the
// branches merge. An exemption that covers no import fails the test, so the
// list only shrinks.
var Exemptions = []Exemption{}

func loadModule(t *testing.T) Graph {
	t.Helper()
	root, err := ModuleRoot(".")
	if err != nil {
		t.Fatal(err)
	}
	g, err := Load(root)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// TestLayering is the architecture test: every import in the module keeps
// the layering of DESIGN.md and the packages' doc.go (Rules), apart from
// the listed exemptions.
func TestLayering(t *testing.T) {
	g := loadModule(t)
	for _, p := range []string{"trainer", "strategy", "strategy/collective/tcp", "nn"} {
		if _, ok := g[p]; !ok {
			t.Fatalf("the import graph has no package %s: Load read the wrong tree", p)
		}
	}
	left, stale := Exempt(Check(g, Rules), Exemptions)
	for _, v := range left {
		t.Errorf("%v", v)
	}
	for _, e := range stale {
		t.Errorf("exemption %s -> %s (%s) covers no import any more: remove it", e.From, e.Import, e.Reason)
	}
}

// The checker on a synthetic graph: each planted import is reported under
// the rule it breaks, and the allowed imports beside them are not.
func TestCheckFindsPlantedImports(t *testing.T) {
	g := Graph{
		"nn":                             {"gorgonia.org/gorgonia", "module", "trainer"},
		"optim":                          {"math"},
		"module":                         {"data", "optim"},
		"data":                           {"strategy/cluster"},
		"strategy":                       {"module", "strategy/collective", "strategy/device", "strategy/ddp"},
		"strategy/ddp":                   {"strategy", "strategy/collective/tcp", "strategy/ddp/internal/x", "strategy/sharded"},
		"strategy/sharded":               {"strategy", "strategy/device"},
		"strategy/collective/shm":        {"strategy/collective", "strategy/collective/rendezvous", "strategy/collective/tcp"},
		"strategy/collective/tcp":        {"strategy/collective/wire", "strategy/collective/rendezvous"},
		"strategy/collective/rendezvous": {"net", "strategy/collective/wire"},
		"strategy/cluster":               {"os"},
		"trainer":                        {"strategy", "strategy/collective/nccl"},
		"examples/mlp":                   {"module", "internal/cli"},
		"cmd/bench":                      {"strategy/collective/tcp"},
	}
	type pair struct{ from, imp string }
	want := []pair{
		{"data", "strategy/cluster"},
		{"examples/mlp", "internal/cli"},
		{"nn", "trainer"},
		{"strategy", "strategy/ddp"},
		{"strategy/collective/shm", "strategy/collective/tcp"},
		{"strategy/ddp", "strategy/sharded"},
		{"trainer", "strategy/collective/nccl"},
	}
	var got []pair
	for _, v := range Check(g, Rules) {
		got = append(got, pair{v.From, v.Import})
		s := v.String()
		if !strings.Contains(s, v.From+" imports "+v.Import) || v.Rule.Doc == "" || !strings.Contains(s, v.Rule.Doc) {
			t.Errorf("message %q does not name the importer, the import and the rule's doc", s)
		}
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("violations\n got %v\nwant %v", got, want)
	}
}

// A bad import planted in the module's real graph turns the test red, even
// next to the exemptions.
func TestPlantedImportInModuleFails(t *testing.T) {
	g := loadModule(t)
	for _, plant := range []struct{ from, imp string }{
		{"nn", "trainer"},
		{"optim", "strategy"},
		{"strategy/collective/shm", "strategy/collective/tcp"},
		{"strategy/collective/nccl", "strategy/collective/tcp"},
		{"examples/mlp", "internal/engine"},
		{"data", "strategy/cluster"},
	} {
		planted := Graph{}
		for p, imps := range g {
			planted[p] = imps
		}
		planted[plant.from] = append(append([]string(nil), g[plant.from]...), plant.imp)
		left, _ := Exempt(Check(planted, Rules), Exemptions)
		found := false
		for _, v := range left {
			found = found || (v.From == plant.from && v.Import == plant.imp)
		}
		if !found {
			t.Errorf("planting %s -> %s: not reported", plant.from, plant.imp)
		}
	}
}

// Load reads imports from source: files behind build tags count, test
// files, testdata and nested modules do not, and the module's own packages
// become module-relative.
func TestLoadReadsSource(t *testing.T) {
	root := t.TempDir()
	write := func(name, body string) {
		t.Helper()
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("go.mod", "module example.com/m\n\ngo 1.22\n")
	write("nn/nn.go", "package nn\n\nimport (\n\t\"fmt\"\n\t\"example.com/m/optim\"\n)\n")
	write("nn/tagged.go", "//go:build mpi\n\npackage nn\n\n// #include <stdlib.h>\nimport \"C\"\nimport _ \"example.com/m/trainer\"\n")
	write("nn/nn_test.go", "package nn\n\nimport \"example.com/m/strategy\"\n")
	write("nn/testdata/x.go", "package x\n\nimport \"example.com/m/cli\"\n")
	write("sub/go.mod", "module example.com/sub\n")
	write("sub/s.go", "package sub\n\nimport \"example.com/m/trainer\"\n")
	write("optim/optim.go", "package optim\n")
	g, err := Load(root)
	if err != nil {
		t.Fatal(err)
	}
	want := Graph{"nn": {"fmt", "optim", "trainer"}, "optim": nil}
	if !reflect.DeepEqual(g, want) {
		t.Errorf("graph %v, want %v", g, want)
	}
	vs := Check(g, Rules)
	if len(vs) != 1 || vs[0].From != "nn" || vs[0].Import != "trainer" {
		t.Errorf("violations %v, want nn -> trainer (from the mpi-tagged file)", vs)
	}
}

// A program that imports only the trainer can set Config.Strategy to any
// shipped name: the trainer itself links the package that registers them.
func TestTrainerLinksTheShippedStrategies(t *testing.T) {
	g := loadModule(t)
	for _, p := range []string{"strategy/single", "strategy/dp", "strategy/ddp"} {
		if !contains(g["trainer"], p) {
			t.Errorf("trainer imports %v, not %s: a program that imports only the trainer misses the names it registers (keep trainer/strategies.go)", g["trainer"], p)
		}
	}
}
