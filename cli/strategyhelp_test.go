package cli_test

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/fulgur-ml/fulgur/strategy"
)

// -h names every strategy -strategy accepts (it left out
// fsdp_hybrid_shard, which the README's table and the error for a wrong
// name list).
func TestHelpNamesEveryStrategy(t *testing.T) {
	var out bytes.Buffer
	app := mlpApp(t.TempDir())
	app.Stdout = &out
	if err := app.Run(context.Background(), []string{"-h"}); err == nil {
		t.Fatal("-h ran the command")
	}
	help := out.String()
	i := strings.Index(help, "  -strategy string\n")
	if i < 0 {
		t.Fatalf("-h has no -strategy:\n%s", help)
	}
	line := help[i+len("  -strategy string\n"):]
	line = line[:strings.Index(line, "\n")]
	words := map[string]bool{}
	for _, w := range strings.FieldsFunc(line, func(r rune) bool { return r != '_' && (r < 'a' || r > 'z') && (r < '0' || r > '9') }) {
		words[w] = true
	}
	for _, name := range strategy.Names() {
		if !words[name] {
			t.Errorf("-strategy's help does not name %q:\n%s", name, line)
		}
	}
}
