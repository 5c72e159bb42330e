// Package examples_test checks that the example programs stand alone: each
// builds from a module of its own, as a user who copies the directory gets
// it, and none links a package under internal/.
package examples_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// repoRoot is the checkout holding this test.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatal(err)
	}
	return root
}

func goTool(t *testing.T) string {
	t.Helper()
	g, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to build the copied example: %v", err)
	}
	return g
}

// The examples import public packages only, as a program outside the module
// must (Go refuses it another module's internal packages). What those
// packages link in turn is theirs: a library's internal packages are
// linked into every program that uses it.
func TestExamplesImportNoInternalPackage(t *testing.T) {
	cmd := exec.Command(goTool(t), "list", "-f", "{{.ImportPath}}: {{join .Imports \" \"}}", "./examples/...")
	cmd.Dir = repoRoot(t)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	pkgs := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		pkg, imports, ok := strings.Cut(line, ": ")
		if !ok {
			continue
		}
		pkgs++
		for _, p := range strings.Fields(imports) {
			if strings.HasPrefix(p, "github.com/fulgur-ml/fulgur/") && strings.Contains(p+"/", "/internal/") {
				t.Errorf("%s imports %s: examples must import public packages only", pkg, p)
			}
		}
	}
	if pkgs < 2 {
		t.Fatalf("go list found %d example packages:\n%s", pkgs, out)
	}
}

// examples/mlp copied into a fresh module (requiring fulgur, replaced by
// this checkout) builds and trains with -fast-dev-run.
func TestCopiedExampleBuildsAndTrains(t *testing.T) {
	root := repoRoot(t)
	dir := t.TempDir()
	src := filepath.Join(root, "examples", "mlp")
	ents, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if e.IsDir() || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, e.Name()), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// The user's module: fulgur from this checkout, its go.sum for the
	// dependencies (the build runs offline).
	gomod := "module example.com/mytrainer\n\ngo 1.26\n\nrequire github.com/fulgur-ml/fulgur v0.0.0\n\nreplace github.com/fulgur-ml/fulgur => " + root + "\n"
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte(gomod), 0o644); err != nil {
		t.Fatal(err)
	}
	sum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "go.sum"), sum, 0o644); err != nil {
		t.Fatal(err)
	}
	env := append(os.Environ(), "GOFLAGS=-mod=mod -buildvcs=false", "GOPROXY=off", "GOWORK=off")
	bin := filepath.Join(dir, "mytrainer")
	build := exec.Command(goTool(t), "build", "-o", bin, ".")
	build.Dir, build.Env = dir, env
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build in a copy of examples/mlp: %v\n%s", err, out)
	}
	runDir := t.TempDir()
	train := exec.Command(bin, "-fast-dev-run", "2", "-no-progress-bar", "-root-dir", runDir)
	train.Dir = runDir
	var stderr strings.Builder
	train.Stderr = &stderr
	out, err := train.Output()
	if err != nil {
		t.Fatalf("the copied program: %v\n%s", err, stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	var s struct {
		Program    string   `json:"program"`
		GlobalStep int      `json:"global_step"`
		TestAcc    *float64 `json:"test_acc"`
		Weights    string   `json:"weights_sha256"`
	}
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &s); err != nil {
		t.Fatalf("last line %q: %v\n%s", lines[len(lines)-1], err, stderr.String())
	}
	if s.Program != "mlp" || s.GlobalStep != 2 || s.TestAcc == nil || *s.TestAcc < 0 || len(s.Weights) != 64 {
		t.Fatalf("summary %+v", s)
	}
}
