package infer_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fulgur-ml/fulgur/data"
	"github.com/fulgur-ml/fulgur/infer"
)

// What a PyTorch user saves first is torch.save(model.state_dict(), "m.pt"):
// a zip of pickles (a bare pickle before PyTorch 1.6). Loading one is an
// error that says so and names the call that writes safetensors, not "the
// header length field says 578712552184433488 bytes".
func TestLoadWeightsOfATorchSaveFile(t *testing.T) {
	m, err := infer.New(&tinyMLP{}, infer.Config{Inputs: []data.Field{xField}, InitialWeights: true})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, c := range []struct {
		name string
		data []byte
	}{
		{"zip.pt", []byte("PK\x03\x04\x00\x00\x08\x08\x00\x00archive/data.pkl\x80\x02}q\x00")},
		{"legacy.pt", []byte("\x80\x02\x8a\x0al\xfc\x9cF\xf9 j\xa8P\x19.\x80\x02M\xe9\x03.")},
	} {
		p := filepath.Join(dir, c.name)
		if err := os.WriteFile(p, c.data, 0o644); err != nil {
			t.Fatal(err)
		}
		err := infer.LoadWeights(p, m.Store())
		if err == nil {
			t.Fatalf("%s loaded", c.name)
		}
		for _, want := range []string{"torch.save", "safetensors.torch.save_file(model.state_dict()"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%s: %v\nwant it to name %q", c.name, err, want)
			}
		}
	}
	// The real thing, when PyTorch is installed.
	py := ""
	for _, p := range []string{"/usr/bin/python3", "python3"} {
		if path, err := exec.LookPath(p); err == nil && exec.Command(path, "-c", "import torch").Run() == nil {
			py = path
			break
		}
	}
	if py == "" {
		t.Log("no python3 with torch: checked the crafted files only")
		return
	}
	p := filepath.Join(dir, "real.pt")
	if out, err := exec.Command(py, "-c", "import sys, torch; torch.save({'fc1.weight': torch.zeros(12, 16)}, sys.argv[1])", p).CombinedOutput(); err != nil {
		t.Fatalf("torch.save: %v\n%s", err, out)
	}
	if err := infer.LoadWeights(p, m.Store()); err == nil || !strings.Contains(err.Error(), "torch.save") {
		t.Errorf("a file torch.save wrote: %v", err)
	}
}
