//go:build !windows

package trainer

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

// renameOpen: a file may be renamed while open.
const renameOpen = true

// lockTemp takes the writer's lock on a save's temporary file; file systems
// without locks (ENOTSUP, ENOLCK) save unlocked.
func lockTemp(f *os.File) error {
	err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
	if err != nil && !errors.Is(err, syscall.ENOTSUP) && !errors.Is(err, syscall.ENOLCK) {
		return err
	}
	return nil
}

// removeIfUnlocked removes the temporary file p unless a live writer holds
// its lock; false when it was left (or had gone already).
func removeIfUnlocked(p string) (bool, error) {
	f, err := os.Open(p)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil // renamed or removed since the listing
	}
	if err != nil {
		return false, fmt.Errorf("remove the temporary file of an interrupted save: %w", err)
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); errors.Is(err, syscall.EWOULDBLOCK) {
		return false, nil
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
		return false, fmt.Errorf("remove the temporary file of an interrupted save: %w", err)
	}
	return true, nil
}

func diskFull(error) bool { return false }
