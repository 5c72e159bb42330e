package callbacks

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// DefaultLogName is the directory under the root that runs' version
// directories go in, as in Lightning.
const DefaultLogName = "lightning_logs"

// VersionDir returns root/name/version_N for the first N whose directory
// does not exist yet (N = 0 for a new root). It creates nothing: loggers
// create their directory when they first write, so ranks that never write
// leave no trace. name "" means DefaultLogName.
func VersionDir(root, name string) (string, error) {
	if root == "" {
		return "", errors.New("VersionDir: root is empty: pass the run's root directory, such as \".\"")
	}
	if name == "" {
		name = DefaultLogName
	}
	base := filepath.Join(root, name)
	ents, err := os.ReadDir(base)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("VersionDir: %w", err)
	}
	next := 0
	for _, e := range ents {
		v, ok := strings.CutPrefix(e.Name(), "version_")
		if !ok || !e.IsDir() {
			continue
		}
		if n, err := strconv.Atoi(v); err == nil && n >= next {
			next = n + 1
		}
	}
	return filepath.Join(base, fmt.Sprintf("version_%d", next)), nil
}
