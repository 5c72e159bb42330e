package callbacks

import "github.com/fulgur-ml/fulgur/trainer"

// DefaultLogName is the directory under the root that runs' version
// directories go in, as in Lightning.
const DefaultLogName = trainer.DefaultLogName

// VersionDir returns root/name/version_N for the first N whose directory
// does not exist yet (N = 0 for a new root). It creates nothing: loggers
// create their directory when they first write, so ranks that never write
// leave no trace. name "" means DefaultLogName. A Trainer picks its run's
// directory the same way (trainer.State.LogDir).
func VersionDir(root, name string) (string, error) { return trainer.VersionDir(root, name) }
