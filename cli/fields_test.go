package cli_test

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/fulgur-ml/fulgur/cli"
	"github.com/fulgur-ml/fulgur/models"
)

// tagged is a module with one field of each kind a flag can bind; it
// embeds the MLP, whose -lr and -sizes come along.
type tagged struct {
	models.MLP
	Mode    string        `flag:"mode" default:"fast" choices:"fast,exact" help:"how"`
	Warmup  time.Duration `flag:"warmup" default:"1s"`
	Widths  []int         `flag:"widths"`
	Ratio   float32       `flag:"ratio" default:"0.5" check:"<=1"`
	On      bool          `flag:"on"`
	N       uint          `flag:"n" default:"3"`
	Hidden  int           // untagged: not a flag
	private int
}

func TestStructTagsBecomeFlags(t *testing.T) {
	m := &tagged{N: 9} // a value in the struct beats the tag's default
	app := cli.App{Name: "t", Model: m, Data: &cli.FashionMNIST{}}
	doc := printed(t, app, "-mode", "exact", "-widths", "8,4", "-on", "-lr", "0.25")
	if m.Mode != "exact" || m.Warmup != time.Second || len(m.Widths) != 2 || m.Widths[0] != 8 || m.Ratio != 0.5 ||
		!m.On || m.N != 9 || m.LR != 0.25 {
		t.Errorf("parsed into %+v", m)
	}
	if _, ok := doc["model"]["hidden"]; ok || len(doc["model"]) != 8 {
		t.Errorf("model flags %v: want the 6 tagged fields and the MLP's 2", doc["model"])
	}
	err := cli.App{Name: "t", Model: &tagged{}, Data: &cli.FashionMNIST{}}.Run(context.Background(),
		[]string{"-mode", "slow", "-ratio", "2", "-warmup", "soon"})
	if err == nil || !strings.Contains(err.Error(), `invalid value "soon" for flag -warmup: use a duration such as 90s`) {
		t.Errorf("err = %v", err)
	}
	err = cli.App{Name: "t", Model: &tagged{}, Data: &cli.FashionMNIST{}}.Run(context.Background(), []string{"-mode", "slow", "-ratio", "2"})
	for _, w := range []string{`-mode is "slow": use one of fast, exact`, "-ratio is 2: use a value <= 1"} {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("err = %v, want %q", err, w)
		}
	}
}

type clash struct {
	models.MLP
	Rate float64 `flag:"lr"`
}

type badKind struct {
	models.MLP
	M map[string]int `flag:"m"`
}

type badCheck struct {
	models.MLP
	K int `flag:"k" check:"positive"`
}

// A program's own mistakes in tags are errors at start, naming the field.
func TestBadTags(t *testing.T) {
	for _, c := range []struct {
		app  cli.App
		want string
	}{
		{cli.App{Name: "t", Model: &clash{}, Data: &cli.FashionMNIST{}}, "flag -lr is defined twice (model and model)"},
		{cli.App{Name: "t", Model: &models.MLP{}, Data: &struct {
			cli.FashionMNIST
			Seed int `flag:"seed"`
		}{}}, "flag -seed is defined twice (trainer and data)"},
		{cli.App{Name: "t", Model: &badKind{}, Data: &cli.FashionMNIST{}}, "model field badKind.M has type map[string]int, which cannot be a flag"},
		{cli.App{Name: "t", Model: &badCheck{}, Data: &cli.FashionMNIST{}}, `model field badCheck.K: check "positive"`},
		{cli.App{Name: "t", Model: &models.MLP{}, Data: &cli.FashionMNIST{}, Links: []cli.Link{{From: "max-epochs", To: "nope"}}}, "link max-epochs -> nope"},
	} {
		err := c.app.Run(context.Background(), []string{"-print-config"})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("err = %v, want %q", err, c.want)
		}
	}
}

// A link copies -max-epochs into -cosine-epochs unless that is set on the
// command line or in the config file (examples/resnet's schedule).
func TestLinks(t *testing.T) {
	app := func() cli.App {
		return cli.App{Name: "resnet", Model: &models.ResNet{}, Data: &cli.FashionMNIST{},
			Trainer: cli.Settings{MaxEpochs: 1}, Links: []cli.Link{{From: "max-epochs", To: "cosine-epochs"}}}
	}
	// The file -print-config writes leaves the follower out, so that read
	// back under another -max-epochs it follows that one; it used to
	// write cosine_epochs: 1, which then held against -max-epochs 10.
	var out bytes.Buffer
	defaults := app()
	defaults.Stdout = &out
	if err := defaults.Run(context.Background(), []string{"-print-config"}); err != nil {
		t.Fatal(err)
	}
	printedFile := writeFile(t, "printed.yaml", out.String())
	for _, c := range []struct {
		args    []string
		want    int
		written bool // -print-config writes cosine_epochs
	}{
		{nil, 1, false},
		{[]string{"-max-epochs", "5"}, 5, false},
		{[]string{"-max-epochs", "5", "-cosine-epochs", "0"}, 0, true},
		{[]string{"-max-epochs", "5", "-config", writeFile(t, "c.yaml", "model:\n  cosine_epochs: 2\n")}, 2, true},
		{[]string{"-config", printedFile, "-max-epochs", "10"}, 10, false},
	} {
		a := app()
		doc := printed(t, a, c.args...)
		if got := a.Model.(*models.ResNet).CosineEpochs; got != c.want {
			t.Errorf("%q: cosine_epochs %v, want %v", c.args, got, c.want)
		}
		if _, ok := doc["model"]["cosine_epochs"]; ok != c.written {
			t.Errorf("%q: -print-config wrote cosine_epochs: %v, want %v", c.args, ok, c.written)
		}
	}
}
