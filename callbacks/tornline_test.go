package callbacks_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fulgur-ml/fulgur/callbacks"
)

// A run stopped while writing a line (a full disk, a power loss) leaves an
// unterminated last line. The next run in the directory, resumed or not,
// appended to it: metrics.jsonl got `{"step":3,"lo{"step":3,"loss":30}`,
// one line no JSON reader accepts, losing the new row; metrics.csv kept a
// row without a step (which plot.ReadCSV refuses, so no report), or, cut
// mid-field, refused to log at all ("wrong number of fields"). The torn
// line is incomplete, so it is dropped.
func TestLoggersDropATornLastLine(t *testing.T) {
	cases := []struct {
		name, file, torn, want string
		mk                     func(dir string) (logger, error)
	}{
		{"jsonl", "metrics.jsonl", "{\"step\":1,\"loss\":1}\n{\"step\":2,\"loss\":2}\n{\"step\":3,\"lo",
			"{\"step\":1,\"loss\":1}\n{\"step\":2,\"loss\":2}\n{\"step\":3,\"loss\":30}\n",
			func(dir string) (logger, error) { return callbacks.NewJSONLLogger(dir) }},
		{"csv cut after a comma", "metrics.csv", "loss,step\n1,1\n2,2\n3,", "loss,step\n1,1\n2,2\n30,3\n",
			func(dir string) (logger, error) { return callbacks.NewCSVLogger(dir) }},
		{"csv cut in a field", "metrics.csv", "loss,step\n1,1\n2,2\n3", "loss,step\n1,1\n2,2\n30,3\n",
			func(dir string) (logger, error) { return callbacks.NewCSVLogger(dir) }},
	}
	for _, c := range cases {
		for _, resume := range []bool{false, true} {
			dir := t.TempDir()
			path := filepath.Join(dir, c.file)
			if err := os.WriteFile(path, []byte(c.torn), 0o644); err != nil {
				t.Fatal(err)
			}
			l, err := c.mk(dir)
			if err != nil {
				t.Fatal(err)
			}
			if resume {
				if err := l.ResumeAt(2); err != nil {
					t.Errorf("%s: ResumeAt: %v", c.name, err)
					continue
				}
			}
			if err := l.LogMetrics(3, map[string]float64{"loss": 30}); err != nil {
				t.Errorf("%s (resume %v): LogMetrics: %v", c.name, resume, err)
				continue
			}
			if err := l.Finalize("success"); err != nil {
				t.Fatal(err)
			}
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if string(b) != c.want {
				t.Errorf("%s (resume %v): %s is\n%s\nwant\n%s", c.name, resume, c.file, b, c.want)
			}
			if c.file == "metrics.jsonl" {
				for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
					if !json.Valid([]byte(line)) {
						t.Errorf("%s (resume %v): line %q is not JSON", c.name, resume, line)
					}
				}
			}
		}
	}
}
