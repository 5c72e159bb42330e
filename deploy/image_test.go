//go:build image

package deploy_test

import (
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestImageBinary builds the program exactly as the Dockerfile's build stage
// does and checks that the default image's base can run it: a binary that
// needs the dynamic loader cannot run on a "static" or scratch base. Behind
// the image tag because a cold build with the image's flags (-trimpath,
// CGO_ENABLED=0) takes about two minutes on two cores:
//
//	go test -tags image -run TestImageBinary ./deploy/
func TestImageBinary(t *testing.T) {
	stages := readDockerfile(t)
	last := stages[len(stages)-1]
	runs := stageNamed(t, stages, "build").find("RUN CGO_ENABLED")
	m := goBuild.FindStringSubmatch(strings.Join(runs, ""))
	if len(runs) != 1 || m == nil {
		t.Fatalf("the build stage's go build line is not as TestDockerfile expects: %v", runs)
	}
	bin := filepath.Join(t.TempDir(), "fulgur")
	line := strings.Replace(strings.TrimPrefix(runs[0], "RUN "), " -o "+m[3]+" ", " -o "+bin+" ", 1)
	cmd := exec.Command("sh", "-c", line)
	cmd.Dir = ".."
	cmd.Env = append(os.Environ(), "EXAMPLE=mlp")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", line, err, b)
	}
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	libs, err := f.ImportedLibraries()
	if err != nil {
		t.Fatal(err)
	}
	interp := slices.ContainsFunc(f.Progs, func(p *elf.Prog) bool { return p.Type == elf.PT_INTERP })
	staticBase := strings.Contains(last.base, "distroless/static") || last.base == "scratch"
	t.Logf("binary: program interpreter %v, shared libraries %v; base %s", interp, libs, last.base)
	if (interp || len(libs) > 0) && staticBase {
		t.Errorf("the binary needs the dynamic loader and %v, but the base %s has no C library", libs, last.base)
	}
	// What distroless base-nossl ships of glibc.
	glibc := []string{"libc.so.6", "libdl.so.2", "libpthread.so.0", "libm.so.6", "librt.so.1"}
	for _, l := range libs {
		if !slices.Contains(glibc, l) {
			t.Errorf("the binary needs %s, which the distroless base does not ship", l)
		}
	}
}
