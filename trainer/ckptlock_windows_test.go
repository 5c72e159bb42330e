package trainer_test

import "os"

// holdAsWriter holds f as a save in progress does: on Windows the open
// handle is the lock (no other process removes a file open without
// FILE_SHARE_DELETE), so there is nothing more to take.
func holdAsWriter(f *os.File) error { return nil }

// sigUSR1 is nil: Windows has no SLURM warning signal, and the trainer
// listens for none there.
var sigUSR1 os.Signal
