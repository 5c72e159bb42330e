package profiler_test

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fulgur-ml/fulgur/profiler"
)

// A profiler makes its directory when it writes its first file, not when it
// is built: ranks started together that name their run directory with
// trainer.VersionDir before Fit name the same one only if none of them has
// made it yet (the second rank named the next version_N, and its trace was
// missing from the merged timeline). A Dir under a file is still refused
// when the profiler is built.
func TestProfilersMakeTheirDirectoryWhenTheyWrite(t *testing.T) {
	root := t.TempDir()
	tdir := filepath.Join(root, "lightning_logs", "version_0", "timeline")
	tl, err := profiler.NewTimeline(profiler.TimelineConfig{Dir: tdir})
	if err != nil {
		t.Fatal(err)
	}
	adir := filepath.Join(root, "lightning_logs", "version_0", "profiles")
	ad, err := profiler.NewAdvanced(profiler.AdvancedConfig{Dir: adir})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "lightning_logs")); !os.IsNotExist(err) {
		t.Fatalf("building the profilers made %s (stat: %v)", filepath.Join(root, "lightning_logs"), err)
	}
	tl.Start("fit").End()
	if err := tl.Report(io.Discard); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"timeline-rank0.json", "timeline.json"} {
		if _, err := os.Stat(filepath.Join(tdir, f)); err != nil {
			t.Errorf("after Report: %v", err)
		}
	}
	ad.Start("fit").End()
	if err := ad.Report(io.Discard); err != nil {
		t.Fatal(err)
	}
	if m, _ := filepath.Glob(filepath.Join(adir, "*.pprof")); len(m) == 0 {
		t.Errorf("after a fit stage, %s holds no profile", adir)
	}

	file := filepath.Join(root, "afile")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := profiler.NewTimeline(profiler.TimelineConfig{Dir: filepath.Join(file, "timeline")}); err == nil || !strings.Contains(err.Error(), "is a file, not a directory") {
		t.Errorf("NewTimeline under a file: %v, want an error saying it is a file", err)
	}
	if _, err := profiler.NewAdvanced(profiler.AdvancedConfig{Dir: file}); err == nil || !strings.Contains(err.Error(), "is a file, not a directory") {
		t.Errorf("NewAdvanced on a file: %v, want an error saying it is a file", err)
	}
}
