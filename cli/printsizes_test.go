package cli_test

import (
	"bytes"
	"context"
	"flag"
	"strings"
	"testing"

	"github.com/fulgur-ml/fulgur/cli"
	"github.com/fulgur-ml/fulgur/models"
)

// -print-config writes the layer widths models.MLP will build (it wrote
// sizes: "" for the nil that means the default ones), a -sizes given on
// the command line replaces them, and -h shows the default once.
func TestPrintConfigShowsMLPSizes(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "784,256,128,10"},
		{[]string{"-sizes", "784,32,10"}, "784,32,10"},
	} {
		doc := printed(t, cli.App{Name: "mlp", Model: &models.MLP{}, Data: &cli.FashionMNIST{}}, c.args...)
		if got := doc["model"]["sizes"]; got != c.want {
			t.Errorf("%q: model.sizes printed as %#v, want %q", c.args, got, c.want)
		}
	}
	var out bytes.Buffer
	app := cli.App{Name: "mlp", Model: &models.MLP{}, Data: &cli.FashionMNIST{}, Stdout: &out, Stderr: &out}
	if err := app.Run(context.Background(), []string{"-h"}); err != nil && err != flag.ErrHelp {
		t.Fatal(err)
	}
	help := out.String()
	i := strings.Index(help, "-sizes")
	if i < 0 {
		t.Fatalf("-h does not list -sizes:\n%s", help)
	}
	line := help[i:]
	if j := strings.Index(line, "\n  -"); j >= 0 {
		line = line[:j]
	}
	if n := strings.Count(line, "784,256,128,10"); n != 1 {
		t.Errorf("-h shows the default widths %d times in %q, want once", n, line)
	}
}
