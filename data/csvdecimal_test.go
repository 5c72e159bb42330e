package data_test

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/fulgur-ml/fulgur/data"
)

// A table as a spreadsheet in a decimal-comma locale exports it ("CSV
// UTF-8" in German Excel): a byte-order mark, CRLF line ends, ';' between
// cells and ',' as the decimal mark.
const europeanCSV = "\ufeffLänge;Breite;Klasse\r\n3,14;-0,5;1\r\n2;1,5e2;0\r\n\"7,25\";0,125;1\r\n"

func TestOpenCSVDecimalComma(t *testing.T) {
	path := filepath.Join(t.TempDir(), "messwerte.csv")
	if err := os.WriteFile(path, []byte(europeanCSV), 0o644); err != nil {
		t.Fatal(err)
	}
	fields := []data.CSVField{{Name: "x"}, {Name: "y", Columns: []string{"Klasse"}}}
	for _, cfg := range []data.CSVConfig{
		{Fields: fields, Decimal: ','},             // Comma 0: ';' beside a decimal comma
		{Fields: fields, Decimal: ',', Comma: ';'}, // said outright
	} {
		ds, err := data.OpenCSV(path, cfg)
		if err != nil {
			t.Fatalf("Comma %q: %v", cfg.Comma, err)
		}
		got := readAll(t, ds)
		want := [][]float32{{3.14, -0.5, 2, 150, 7.25, 0.125}, {1, 0, 1}}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("Comma %q: values = %v, want %v", cfg.Comma, got, want)
		}
	}
}

func TestReadCSVDecimalErrors(t *testing.T) {
	x := []data.CSVField{{Name: "x"}}
	for _, c := range []struct {
		name string
		file string
		cfg  data.CSVConfig
		want []string
	}{
		// Without Decimal, a decimal comma is named, with the setting that reads it.
		{"comma without Decimal", "a;b\n3,14;1\n", data.CSVConfig{Fields: x, Comma: ';'},
			[]string{`line 2, column "a"`, `"3,14"`, "Decimal: ','", "remove"}},
		{"same mark", "a;b\n1;2\n", data.CSVConfig{Fields: x, Comma: ',', Decimal: ','},
			[]string{"Comma and Decimal are both ','", "Comma: ';'"}},
		{"same mark dot", "a;b\n1;2\n", data.CSVConfig{Fields: x, Comma: '.', Decimal: '.'},
			[]string{"Comma and Decimal are both '.'"}},
		{"odd mark", "a;b\n1;2\n", data.CSVConfig{Fields: x, Decimal: '\''},
			[]string{`Decimal is '\''`, "use '.' or ','"}},
		// Digit grouping is never guessed: 1.234,5 is refused, as is a
		// lone '.' beside a decimal comma (1234 or 1.234?).
		{"grouped", "a;b\n1.234,5;1\n", data.CSVConfig{Fields: x, Decimal: ','},
			[]string{`line 2, column "a"`, `"1.234,5"`, "digit grouping", "1234,5"}},
		{"dot beside comma", "a;b\n1;2\n1.5;2\n", data.CSVConfig{Fields: x, Decimal: ','},
			[]string{`line 3, column "a"`, `"1.5"`, "Decimal is ','"}},
		{"grouped dot file", "a;b\n\"1,234.5\";1\n", data.CSVConfig{Fields: x, Comma: ';'},
			[]string{`"1,234.5"`, "digit grouping", "1234.5"}},
		{"grouped comma file without Decimal", "a;b\n1.234,5;1\n", data.CSVConfig{Fields: x, Comma: ';'},
			[]string{`"1.234,5" has digit grouping`, "(1234,5), and set CSVConfig.Decimal: ','"}},
		{"two commas", "a;b\n1,2,3;1\n", data.CSVConfig{Fields: x, Decimal: ','},
			[]string{`"1,2,3" is not a number`}},
	} {
		_, err := data.ReadCSV(strings.NewReader(c.file), c.cfg)
		if err == nil {
			t.Errorf("%s: no error", c.name)
			continue
		}
		t.Logf("%s: %v", c.name, err)
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: err = %v\nwant it to contain %s", c.name, err, w)
			}
		}
	}
}
