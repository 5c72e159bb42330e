package trainer

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

// Windows error codes (winerror.h).
const (
	errSharingViolation syscall.Errno = 32
	errHandleDiskFull   syscall.Errno = 39
	errDiskFull         syscall.Errno = 112
)

// renameOpen: Windows renames no file open without FILE_SHARE_DELETE.
const renameOpen = false

// lockTemp does nothing on Windows: Go opens files without
// FILE_SHARE_DELETE, so no other process can remove the temporary file
// while its writer has it open, which is the lock.
func lockTemp(*os.File) error { return nil }

// removeIfUnlocked removes the temporary file p unless a live writer has it
// open; false when it was left (or had gone already).
func removeIfUnlocked(p string) (bool, error) {
	err := os.Remove(p)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, os.ErrNotExist), errors.Is(err, errSharingViolation):
		return false, nil
	}
	return false, fmt.Errorf("remove the temporary file of an interrupted save: %w", err)
}

func diskFull(err error) bool {
	return errors.Is(err, errDiskFull) || errors.Is(err, errHandleDiskFull)
}
