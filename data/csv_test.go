package data_test

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/fulgur-ml/fulgur/data"
)

const tabular = `a,b,label,c
1,2,0,3
4.5,-5,2,6e1
7,8,1,9
`

func readAll(t *testing.T, ds data.Dataset) [][]float32 {
	t.Helper()
	fs := ds.Fields()
	out := make([][]float32, len(fs))
	dst := make([][]float32, len(fs))
	for i := 0; i < ds.Len(); i++ {
		for f := range fs {
			dst[f] = make([]float32, fs[f].Size())
		}
		if err := ds.Read(i, dst); err != nil {
			t.Fatal(err)
		}
		for f := range fs {
			out[f] = append(out[f], dst[f]...)
		}
	}
	return out
}

func TestReadCSVColumnsIntoFields(t *testing.T) {
	ds, err := data.ReadCSV(strings.NewReader(tabular), data.CSVConfig{Fields: []data.CSVField{
		{Name: "x"}, // every column no other field names, in file order
		{Name: "y", Columns: []string{"label"}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if ds.Len() != 3 {
		t.Fatalf("Len = %d, want 3", ds.Len())
	}
	wantFields := []data.Field{{Name: "x", Shape: []int{3}}, {Name: "y", Shape: []int{}}}
	if !reflect.DeepEqual(ds.Fields(), wantFields) {
		t.Fatalf("Fields = %v, want %v", ds.Fields(), wantFields)
	}
	got := readAll(t, ds)
	want := [][]float32{{1, 2, 3, 4.5, -5, 60, 7, 8, 9}, {0, 2, 1}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("values = %v, want %v", got, want)
	}

	// Explicit columns in another order, a shape, another separator, no header.
	ds, err = data.ReadCSV(strings.NewReader("1;2;3;4\n5;6;7;8\n"), data.CSVConfig{Comma: ';', NoHeader: true,
		Fields: []data.CSVField{{Name: "img", Columns: []string{"3", "2", "1", "0"}, Shape: []int{2, 2}}}})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := readAll(t, ds), [][]float32{{4, 3, 2, 1, 8, 7, 6, 5}}; !reflect.DeepEqual(got, want) {
		t.Fatalf("values = %v, want %v", got, want)
	}
	if got := ds.Fields()[0].Shape; !reflect.DeepEqual(got, []int{2, 2}) {
		t.Fatalf("shape = %v, want [2 2]", got)
	}
	// One column given Shape [1] stays a vector of one (a regression target
	// beside a [batch, 1] output).
	ds, err = data.ReadCSV(strings.NewReader(tabular), data.CSVConfig{Fields: []data.CSVField{
		{Name: "y", Columns: []string{"c"}, Shape: []int{1}}}})
	if err != nil {
		t.Fatal(err)
	}
	if got := ds.Fields()[0].Shape; !reflect.DeepEqual(got, []int{1}) {
		t.Fatalf("shape = %v, want [1]", got)
	}
}

func TestOpenCSVNamesTheFile(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "rows.csv")
	if err := os.WriteFile(p, []byte("x,y\n1,2\n3,oops\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := data.OpenCSV(p, data.CSVConfig{Fields: []data.CSVField{{Name: "x", Columns: []string{"x"}}, {Name: "y", Columns: []string{"y"}}}})
	if err == nil || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), `line 3, column "y": "oops" is not a number`) {
		t.Fatalf("err = %v, want the path and the bad cell", err)
	}
	ds, err := data.OpenCSV(filepath.Join(dir, "missing.csv"), data.CSVConfig{Fields: []data.CSVField{{Name: "x"}}})
	if err == nil || ds != nil || !strings.Contains(err.Error(), "missing.csv") {
		t.Fatalf("OpenCSV of a missing file = %v, %v", ds, err)
	}
}

func TestReadCSVErrorsNameTheCell(t *testing.T) {
	xy := []data.CSVField{{Name: "x"}, {Name: "y", Columns: []string{"y"}}}
	cases := []struct {
		name   string
		csv    string
		fields []data.CSVField
		want   []string // every one must appear
	}{
		{"not a number", "x,y\n1,2\n3,abc\n", xy, []string{`line 3, column "y": "abc" is not a number`}},
		{"empty cell", "x,y\n1,2\n,4\n", xy, []string{`line 3, column "x": the cell is empty`, "fill it in or drop the row"}},
		{"NaN", "x,y\n1,2\nNaN,4\n", xy, []string{`line 3, column "x": "NaN" is not finite`, "fill it in or drop the row"}},
		{"infinity", "x,y\n1,2\n3,-Inf\n", xy, []string{`line 3, column "y": "-Inf" is not finite`}},
		{"ragged row", "x,y\n1,2\n3\n", xy, []string{"line 3", "wrong number of fields"}},
		{"unknown column", "x,y\n1,2\n", []data.CSVField{{Name: "y", Columns: []string{"label"}}},
			[]string{`field "y": column "label" is not in the header`, "[x y]"}},
		{"two catch-alls", "x,y\n1,2\n", []data.CSVField{{Name: "a"}, {Name: "b"}},
			[]string{`fields "a" and "b" both name no columns`}},
		{"catch-all left empty", "x,y\n1,2\n", []data.CSVField{{Name: "x", Columns: []string{"x"}}, {Name: "y", Columns: []string{"y"}}, {Name: "rest"}},
			[]string{`field "rest" takes the columns no other field names, and there are none`}},
		{"shape mismatch", "x,y\n1,2\n", []data.CSVField{{Name: "x", Columns: []string{"x", "y"}, Shape: []int{3}}},
			[]string{`field "x": shape [3] holds 3 values but 2 columns are named`}},
		{"no rows", "x,y\n", xy, []string{"no data rows"}},
		{"empty file", "", xy, []string{"the file is empty"}},
		{"no fields", "x,y\n1,2\n", nil, []string{"CSVConfig.Fields is empty"}},
		{"duplicate header", "x,x\n1,2\n", []data.CSVField{{Name: "x", Columns: []string{"x"}}}, []string{`column "x" appears twice in the header`}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ds, err := data.ReadCSV(strings.NewReader(c.csv), data.CSVConfig{Fields: c.fields})
			if err == nil {
				t.Fatalf("no error; dataset of %d examples", ds.Len())
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q\ndoes not say %q", err, w)
				}
			}
		})
	}
}

func TestRandomSplit(t *testing.T) {
	const n = 103
	col := make([]float32, n)
	for i := range col {
		col[i] = float32(i)
	}
	ds, err := data.NewInMemory([]data.Field{{Name: "i"}}, [][]float32{col})
	if err != nil {
		t.Fatal(err)
	}
	parts, err := data.RandomSplit(ds, 7, 0.8, 0.2)
	if err != nil {
		t.Fatal(err)
	}
	// torch.utils.data.random_split's sizes: floor(n*f), the remainder one at
	// a time to the splits in order: 82+1, 20.
	if len(parts) != 2 || parts[0].Len() != 83 || parts[1].Len() != 20 {
		t.Fatalf("sizes %d, %d; want 83, 20", parts[0].Len(), parts[1].Len())
	}
	var seen []int
	for _, p := range parts {
		for _, v := range readAll(t, p)[0] {
			seen = append(seen, int(v))
		}
	}
	sort.Ints(seen)
	for i, v := range seen {
		if v != i {
			t.Fatalf("the splits do not hold every example once: sorted %v", seen)
		}
	}
	first := readAll(t, parts[1])[0]
	again, _ := data.RandomSplit(ds, 7, 0.8, 0.2)
	if !reflect.DeepEqual(readAll(t, again[1])[0], first) {
		t.Fatal("the same seed gave another split")
	}
	other, _ := data.RandomSplit(ds, 8, 0.8, 0.2)
	if reflect.DeepEqual(readAll(t, other[1])[0], first) {
		t.Fatal("seeds 7 and 8 gave the same split")
	}
	if reflect.DeepEqual(first, col[83:]) || reflect.DeepEqual(first, col[:20]) {
		t.Fatal("the split is not shuffled")
	}

	for _, c := range []struct {
		fr   []float64
		want string
	}{
		{nil, "give the fractions"},
		{[]float64{0.8, 0.3}, "sum to 1.1"},
		{[]float64{0.8, -0.2, 0.4}, "fraction 1 is -0.2"},
		{[]float64{0.999, 0.001}, "split 1 (fraction 0.001 of 103 examples) would hold 0 examples"},
	} {
		if _, err := data.RandomSplit(ds, 7, c.fr...); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("RandomSplit(%v) = %v, want an error saying %q", c.fr, err, c.want)
		}
	}
}

func ExampleReadCSV() {
	const file = `temp,humidity,wind,rain
21.5,0.40,3,0
18.0,0.85,7,1
25.1,0.30,2,0
`
	// "x" takes every column the other fields leave; "y" is a scalar label.
	ds, err := data.ReadCSV(strings.NewReader(file), data.CSVConfig{Fields: []data.CSVField{
		{Name: "x"},
		{Name: "y", Columns: []string{"rain"}},
	}})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(ds.Len(), ds.Fields())
	train, val, err := splitTwo(ds)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(train.Len(), val.Len())

	_, err = data.ReadCSV(strings.NewReader("temp,rain\n21.5,0\nNA,1\n"), data.CSVConfig{Fields: []data.CSVField{
		{Name: "x"}, {Name: "y", Columns: []string{"rain"}},
	}})
	fmt.Println(err)
	// Output:
	// 3 [x[3] y[]]
	// 2 1
	// data.ReadCSV: line 3, column "temp": "NA" is a missing value: fill it in or drop the row
}

func splitTwo(ds data.Dataset) (train, val *data.Subset, err error) {
	parts, err := data.RandomSplit(ds, 42, 0.6, 0.4)
	if err != nil {
		return nil, nil, err
	}
	return parts[0], parts[1], nil
}

func TestReadCSVClassNames(t *testing.T) {
	const iris = `sepal_length,sepal_width,species
5.1,3.5,setosa
7.0,3.2,versicolor
6.3,3.3, virginica
`
	classes := []string{"setosa", "versicolor", "virginica"}
	ds, err := data.ReadCSV(strings.NewReader(iris), data.CSVConfig{Fields: []data.CSVField{
		{Name: "x"}, {Name: "y", Columns: []string{"species"}, Classes: classes},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := readAll(t, ds), [][]float32{{5.1, 3.5, 7, 3.2, 6.3, 3.3}, {0, 1, 2}}; !reflect.DeepEqual(got, want) {
		t.Fatalf("values = %v, want %v", got, want)
	}
	if got := ds.Fields()[1].Shape; len(got) != 0 {
		t.Fatalf("the label's shape is %v, want [] (a scalar)", got)
	}
	for _, c := range []struct {
		name   string
		csv    string
		fields []data.CSVField
		want   string
	}{
		{"unknown class", iris + "5.9,3.0,virginca\n", []data.CSVField{{Name: "x"}, {Name: "y", Columns: []string{"species"}, Classes: classes}},
			`line 5, column "species": "virginca" is not one of Classes [setosa versicolor virginica]`},
		{"names without Classes", iris, []data.CSVField{{Name: "x"}, {Name: "y", Columns: []string{"species"}}},
			`line 2, column "species": "setosa" is not a number: for class names, list them in the field's Classes`},
		{"Classes on two columns", iris, []data.CSVField{{Name: "y", Columns: []string{"species", "sepal_width"}, Classes: classes}},
			`field "y": Classes needs exactly one column, not 2`},
		{"a class twice", iris, []data.CSVField{{Name: "x"}, {Name: "y", Columns: []string{"species"}, Classes: []string{"a", "b", "a"}}},
			`field "y": class "a" is listed twice in Classes`},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := data.ReadCSV(strings.NewReader(c.csv), data.CSVConfig{Fields: c.fields})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v\nwant it to say %q", err, c.want)
			}
		})
	}
}

// What spreadsheets write: a byte-order mark, CRLF line ends, quoted cells,
// spaces around numbers, no newline after the last row, trailing separators.
func TestReadCSVFromASpreadsheet(t *testing.T) {
	const file = "\ufeff\"a\",b ,\"c\"\r\n\" 1.5\",2, 3\r\n4,\"5\",6"
	// A trailing separator on every line makes unnamed empty columns, which
	// a field taking "the other columns" leaves out.
	rest, err := data.ReadCSV(strings.NewReader("a,b,c,,\n1,2,3,,\n"), data.CSVConfig{Fields: []data.CSVField{
		{Name: "x"}, {Name: "y", Columns: []string{"c"}}}})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := readAll(t, rest), [][]float32{{1, 2}, {3}}; !reflect.DeepEqual(got, want) {
		t.Fatalf("values with a trailing separator = %v, want %v", got, want)
	}
	ds, err := data.ReadCSV(strings.NewReader(file), data.CSVConfig{Fields: []data.CSVField{
		{Name: "x", Columns: []string{"a", "b"}}, {Name: "y", Columns: []string{"c"}}}})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := readAll(t, ds), [][]float32{{1.5, 2, 4, 5}, {3, 6}}; !reflect.DeepEqual(got, want) {
		t.Fatalf("values = %v, want %v", got, want)
	}
}
