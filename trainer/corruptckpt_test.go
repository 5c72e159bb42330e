package trainer_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/fulgur-ml/fulgur/trainer"
)

// A program that resumes from its newest checkpoint falls back to an older
// one when errors.Is(err, trainer.ErrCorruptCheckpoint), through every
// wrapping the Fit, Validate and the checkpoint functions add; a missing
// file is os.ErrNotExist and not that. Before, only the error's text said
// "corrupt".
func TestCorruptCheckpointMatchesErrCorruptCheckpoint(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	tr, err := trainer.New(quiet(trainer.Config{MaxEpochs: 1, DefaultRootDir: root}))
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Fit(ctx, newEvalReg(), loader(t, regression(t, 32, 0.01, 1), 8, false, false), nil); err != nil {
		t.Fatal(err)
	}
	last, err := trainer.ResolveCheckpoint(root, "last")
	if err != nil {
		t.Fatal(err)
	}
	good, err := os.ReadFile(last)
	if err != nil {
		t.Fatal(err)
	}
	flipped := append([]byte(nil), good...)
	flipped[len(flipped)-3] ^= 0xff
	cases := []struct {
		name string
		file []byte
	}{
		{"a byte of a tensor flipped", flipped},
		{"cut in the data", good[:len(good)-10]},
		{"cut in the header", good[:40]},
		{"shorter than the header length", good[:5]},
		{"another format", []byte("PK\x03\x04 a zip archive, not a checkpoint")},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			bad := filepath.Join(t.TempDir(), "bad.ckpt")
			if err := os.WriteFile(bad, c.file, 0o644); err != nil {
				t.Fatal(err)
			}
			tr, err := trainer.New(quiet(trainer.Config{MaxEpochs: 2, DefaultRootDir: t.TempDir()}))
			if err != nil {
				t.Fatal(err)
			}
			is := func(what string, err error) {
				t.Helper()
				if !errors.Is(err, trainer.ErrCorruptCheckpoint) {
					t.Errorf("%s: %v: want an error matching trainer.ErrCorruptCheckpoint", what, err)
				}
			}
			is("Fit(FromCheckpoint)", tr.Fit(ctx, newEvalReg(), loader(t, regression(t, 32, 0.01, 1), 8, false, false), nil, trainer.FromCheckpoint(bad)))
			_, err = tr.Validate(ctx, newEvalReg(), loader(t, regression(t, 16, 0.01, 2), 8, false, false), trainer.WithCheckpoint(bad))
			is("Validate(WithCheckpoint)", err)
			_, err = trainer.VerifyCheckpoint(bad)
			is("VerifyCheckpoint", err)
		})
	}
	if _, err := trainer.VerifyCheckpoint(last); err != nil {
		t.Fatalf("the untouched checkpoint: %v", err)
	}
	_, err = trainer.VerifyCheckpoint(filepath.Join(root, "missing.ckpt"))
	if !errors.Is(err, os.ErrNotExist) || errors.Is(err, trainer.ErrCorruptCheckpoint) {
		t.Errorf("a missing checkpoint: %v: want os.ErrNotExist, not ErrCorruptCheckpoint", err)
	}
}

// A sharded checkpoint with a shard of another save beside its index, or a
// shard with a flipped byte, is ErrCorruptCheckpoint as well.
func TestCorruptShardedCheckpointMatchesErrCorruptCheckpoint(t *testing.T) {
	dirA, dirB := t.TempDir(), t.TempDir()
	fitShardedOnTwoRanks(t, regression(t, 64, 0.01, 4), dirA)
	fitShardedOnTwoRanks(t, regression(t, 64, 0.01, 5), dirB)
	index := filepath.Join(dirA, "checkpoints", "last.ckpt")
	shard := index + ".rank1-of-2"
	b, err := os.ReadFile(shard)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)-2] ^= 0xff
	if err := os.WriteFile(shard, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := trainer.VerifyCheckpoint(index); !errors.Is(err, trainer.ErrCorruptCheckpoint) {
		t.Errorf("a shard with a flipped byte: %v: want trainer.ErrCorruptCheckpoint", err)
	}
	other, err := os.ReadFile(filepath.Join(dirB, "checkpoints", "last.ckpt.rank1-of-2"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(shard, other, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := trainer.VerifyCheckpoint(index); !errors.Is(err, trainer.ErrCorruptCheckpoint) {
		t.Errorf("a shard of another save: %v: want trainer.ErrCorruptCheckpoint", err)
	}
}
