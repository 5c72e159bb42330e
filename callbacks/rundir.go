package callbacks

import "github.com/fulgur-ml/fulgur/trainer"

// DefaultLogName is the directory under the root that runs' version
// directories go in, as in Lightning.
const DefaultLogName = trainer.DefaultLogName

// VersionDir is trainer.VersionDir: root/name/version_N for the first N
// above every existing version_M directory (N = 0 for a new root; beside
// version_0 and version_5, version_6), or the run directory of the ddp or
// elastic job this process is a rank of. It creates nothing: loggers
// create their directory when they first write, so ranks that never write
// leave no trace. name "" means DefaultLogName. A Trainer picks its run's
// directory the same way (trainer.State.LogDir).
func VersionDir(root, name string) (string, error) { return trainer.VersionDir(root, name) }
