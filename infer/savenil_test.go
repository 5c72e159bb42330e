package infer_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/fulgur-ml/fulgur/infer"
)

// Under fsdp Trainer.Store() is nil after Fit, so a program following the
// README's infer.SaveStateDict(path, tr.Store()) gets here: the error must
// not send it back to Trainer.Store() but say how to export anyway.
func TestSaveStateDictNilStoreSaysHowToExportFSDP(t *testing.T) {
	err := infer.SaveStateDict(filepath.Join(t.TempDir(), "w.safetensors"), nil)
	if err == nil {
		t.Fatal("SaveStateDict(nil store) succeeded")
	}
	for _, w := range []string{"fsdp", "ResolveCheckpoint", "infer.New", "Store()"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not say %q", err, w)
		}
	}
}
