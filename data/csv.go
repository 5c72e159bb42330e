package data

import (
	"bufio"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
)

// CSVConfig says how ReadCSV makes a dataset of a CSV file's columns.
type CSVConfig struct {
	// Fields are the dataset's fields, in order. Required.
	Fields []CSVField
	// Comma separates the cells of a row. 0: ',', or ';' when Decimal is
	// ',' (what a spreadsheet in a decimal-comma locale exports).
	Comma rune
	// Decimal is the numbers' decimal mark: '.' or ','. 0: '.'. With ','
	// (3,14), a cell holding a '.' is an error, as is digit grouping
	// under either mark (1.234,5 or 1,234.5): a '.' beside a decimal comma
	// may group thousands or be a decimal point, so nothing is guessed;
	// export the numbers without grouping. Comma and Decimal must differ.
	Decimal rune
	// NoHeader reads the first line as data; the columns are then named by
	// their number from 0 ("0", "1", ...).
	NoHeader bool
}

// CSVField makes one field of a dataset from columns of a CSV file.
type CSVField struct {
	// Name is the field's name, the one a step reads (s.Input("x")).
	Name string
	// Columns are the header names of the columns the field holds, in the
	// order it holds them. nil: every named column that no other field
	// names, in the file's order, as pandas' df.drop(columns=["y"]) (at most
	// one field may leave it nil; a column with an empty header cell, as a
	// trailing separator makes, is left out).
	Columns []string
	// Shape is the field's shape for one example; its size must be the
	// number of columns. nil: [] (a scalar, as a class label for
	// nn.CrossEntropy) for one column, else [len(Columns)]. A regression
	// target read beside a [batch, 1] output may be given []int{1}.
	Shape []int
	// Classes, for a field of one column, are the class names its cells
	// hold, such as {"setosa", "versicolor", "virginica"}: each cell is
	// stored as its name's index here (0, 1, 2), a class label for
	// nn.CrossEntropy. A cell that is none of them is an error naming it.
	// nil: the cells are numbers.
	Classes []string
}

// OpenCSV reads the CSV file at path as ReadCSV does; its errors name the
// file.
func OpenCSV(path string, cfg CSVConfig) (*InMemory, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("data.OpenCSV: %w", err)
	}
	defer f.Close()
	ds, err := readCSV(f, cfg)
	if err != nil {
		return nil, fmt.Errorf("data.OpenCSV %s: %w", path, err)
	}
	return ds, nil
}

// ReadCSV reads a CSV file of numbers, one example a row, into an InMemory
// dataset whose fields are made of the columns cfg names. Every cell a field
// uses must be a finite number, or one of its Classes: an empty cell, "NA",
// "NaN", an infinity or a word is an error naming its line and column (fill
// the missing values in, or drop their rows, before training), as is a row
// with another number of cells than the header. Columns no field uses are
// not read. A file a spreadsheet wrote with decimal commas (3,14, cells
// separated by ';') is read with Decimal: ','; a byte-order mark and CRLF
// line ends are read as any file's.
func ReadCSV(r io.Reader, cfg CSVConfig) (*InMemory, error) {
	ds, err := readCSV(r, cfg)
	if err != nil {
		return nil, fmt.Errorf("data.ReadCSV: %w", err)
	}
	return ds, nil
}

func readCSV(r io.Reader, cfg CSVConfig) (*InMemory, error) {
	if len(cfg.Fields) == 0 {
		return nil, errors.New(`CSVConfig.Fields is empty: name the fields to make, such as {Name: "x"}, {Name: "y", Columns: []string{"label"}}`)
	}
	// A byte-order mark (Excel's "CSV UTF-8") would make a quoted first
	// header cell a parse error.
	br := bufio.NewReader(r)
	if b, err := br.Peek(3); err == nil && string(b) == "\ufeff" {
		br.Discard(3)
	}
	comma, decimal, err := csvMarks(cfg)
	if err != nil {
		return nil, err
	}
	cr := csv.NewReader(br)
	cr.Comma = comma
	cr.ReuseRecord = true
	first, err := cr.Read()
	if err == io.EOF {
		return nil, errors.New("the file is empty: it needs a header line and rows of numbers")
	}
	if err != nil {
		return nil, err
	}
	header := make([]string, len(first))
	for i, h := range first {
		if cfg.NoHeader {
			header[i] = strconv.Itoa(i)
		} else {
			header[i] = strings.TrimSpace(h)
		}
	}
	col := map[string]int{}
	for i, h := range header {
		if h == "" {
			continue // an unnamed column, as a trailing separator makes
		}
		if _, dup := col[h]; dup {
			return nil, fmt.Errorf("column %q appears twice in the header %v: give every column its own name", h, header)
		}
		col[h] = i
	}
	fields, picks, err := csvFields(cfg.Fields, header, col)
	if err != nil {
		return nil, err
	}
	classes := make([]map[string]int, len(fields))
	for f, cf := range cfg.Fields {
		if cf.Classes != nil {
			classes[f] = map[string]int{}
			for k, name := range cf.Classes {
				classes[f][name] = k
			}
		}
	}
	cols := make([][]float32, len(fields))
	row := func(rec []string) error {
		for f, pick := range picks {
			for _, c := range pick {
				var v float32
				var err error
				if classes[f] != nil {
					cell := strings.TrimSpace(rec[c])
					k, ok := classes[f][cell]
					if !ok {
						err = fmt.Errorf("%q is not one of Classes %v: add it there or fix the cell", cell, cfg.Fields[f].Classes)
					}
					v = float32(k)
				} else {
					v, err = csvCell(rec[c], decimal)
				}
				if err != nil {
					line, _ := cr.FieldPos(c)
					return fmt.Errorf("line %d, column %q: %w", line, header[c], err)
				}
				cols[f] = append(cols[f], v)
			}
		}
		return nil
	}
	if cfg.NoHeader {
		if err := row(first); err != nil {
			return nil, err
		}
	}
	for {
		rec, err := cr.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			if errors.Is(err, csv.ErrFieldCount) {
				return nil, fmt.Errorf("%w: every row needs the %d cells of the first line", err, len(header))
			}
			return nil, err
		}
		if err := row(rec); err != nil {
			return nil, err
		}
	}
	if len(cols[0]) == 0 {
		return nil, fmt.Errorf("the file has a header %v but no data rows", header)
	}
	return NewInMemory(fields, cols)
}

// csvFields resolves each field's columns to their positions and its shape.
func csvFields(cf []CSVField, header []string, col map[string]int) ([]Field, [][]int, error) {
	var errs []error
	named := map[string]bool{}
	rest := -1
	for i, f := range cf {
		if f.Columns == nil {
			if rest >= 0 {
				errs = append(errs, fmt.Errorf("fields %q and %q both name no columns: only one field may take the columns the others leave", cf[rest].Name, f.Name))
			}
			rest = i
		}
		for _, c := range f.Columns {
			named[c] = true
		}
	}
	fields := make([]Field, len(cf))
	picks := make([][]int, len(cf))
	for i, f := range cf {
		names := f.Columns
		if names == nil {
			for _, h := range header {
				if h != "" && !named[h] {
					names = append(names, h)
				}
			}
			if len(names) == 0 {
				errs = append(errs, fmt.Errorf("field %q takes the columns no other field names, and there are none (the header is %v)", f.Name, header))
				continue
			}
		}
		if len(names) == 0 {
			errs = append(errs, fmt.Errorf("field %q: Columns is empty: name its columns, or leave Columns nil to take the ones no other field names", f.Name))
			continue
		}
		for _, c := range names {
			k, ok := col[c]
			if !ok {
				errs = append(errs, fmt.Errorf("field %q: column %q is not in the header %v", f.Name, c, header))
				continue
			}
			picks[i] = append(picks[i], k)
		}
		if f.Classes != nil {
			if len(names) != 1 {
				errs = append(errs, fmt.Errorf("field %q: Classes needs exactly one column, not %d", f.Name, len(names)))
			}
			seen := map[string]bool{}
			for k, name := range f.Classes {
				if strings.TrimSpace(name) != name || name == "" {
					errs = append(errs, fmt.Errorf("field %q: class %d is %q: give names without surrounding spaces (cells are trimmed)", f.Name, k, name))
				} else if seen[name] {
					errs = append(errs, fmt.Errorf("field %q: class %q is listed twice in Classes", f.Name, name))
				}
				seen[name] = true
			}
		}
		shape := slices.Clone(f.Shape)
		if shape == nil {
			shape = []int{}
			if len(names) > 1 {
				shape = []int{len(names)}
			}
		}
		fields[i] = Field{Name: f.Name, Shape: shape}
		if fields[i].Size() != len(names) {
			errs = append(errs, fmt.Errorf("field %q: shape %v holds %d values but %d columns are named: make them agree", f.Name, shape, fields[i].Size(), len(names)))
		}
	}
	if err := checkFields(fields); err != nil {
		errs = append(errs, err)
	}
	return fields, picks, errors.Join(errs...)
}

// missingCells are what tables write for a value that is not there.
var missingCells = map[string]bool{"na": true, "n/a": true, "null": true, "none": true, "?": true, "-": true}

// csvMarks are the separator and the decimal mark cfg asks for.
func csvMarks(cfg CSVConfig) (comma, decimal rune, err error) {
	decimal = cfg.Decimal
	if decimal == 0 {
		decimal = '.'
	}
	if decimal != '.' && decimal != ',' {
		return 0, 0, fmt.Errorf("CSVConfig.Decimal is %q: use '.' or ',' (0 means '.')", decimal)
	}
	comma = cfg.Comma
	if comma == 0 {
		comma = ','
		if decimal == ',' {
			comma = ';'
		}
	}
	if comma == decimal {
		return 0, 0, fmt.Errorf("CSVConfig.Comma and Decimal are both %q: the mark would split the numbers' cells: give another Comma (files with a decimal comma separate cells with ';': Comma: ';', or leave Comma 0)", comma)
	}
	return comma, decimal, nil
}

// csvCell reads a number whose decimal mark is decimal ('.' or ',').
func csvCell(s string, decimal rune) (float32, error) {
	const fill = "fill it in or drop the row"
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, errors.New("the cell is empty: " + fill)
	}
	if missingCells[strings.ToLower(s)] {
		return 0, fmt.Errorf("%q is a missing value: %s", s, fill)
	}
	dots, commas := strings.Count(s, "."), strings.Count(s, ",")
	if dots > 0 && commas > 0 {
		// 1.234,5 or 1,234.5: the grouping is not read, whichever mark
		// is the decimal one.
		point, group := ',', "."
		if strings.LastIndex(s, ".") > strings.LastIndex(s, ",") {
			point, group = '.', ","
		}
		also := ""
		if point != decimal {
			also = fmt.Sprintf(", and set CSVConfig.Decimal: %q", point)
		}
		return 0, fmt.Errorf("%q has digit grouping, which is not read: export the numbers without it (%s)%s", s, strings.ReplaceAll(s, group, ""), also)
	}
	num := s
	if decimal == ',' {
		if dots > 0 {
			return 0, fmt.Errorf("%q has a '.' but Decimal is ',': a '.' here may group thousands or be a decimal point; export the column with decimal commas and no grouping, or fix the cell", s)
		}
		num = strings.Replace(s, ",", ".", 1)
	}
	v, err := strconv.ParseFloat(num, 32)
	if err != nil && decimal == '.' && commas == 1 {
		if _, err2 := strconv.ParseFloat(strings.Replace(s, ",", ".", 1), 32); err2 == nil {
			return 0, fmt.Errorf("%q is not a number with a decimal point: if ',' is the decimal mark, set CSVConfig.Decimal: ','; if it groups thousands, remove it from the file", s)
		}
	}
	if err != nil {
		if errors.Is(err, strconv.ErrRange) {
			return 0, fmt.Errorf("%q is beyond float32's range: scale the column or drop the row", s)
		}
		return 0, fmt.Errorf("%q is not a number: for class names, list them in the field's Classes; else fix the cell or drop the row", s)
	}
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, fmt.Errorf("%q is not finite: %s", s, fill)
	}
	return float32(v), nil
}

// RandomSplit cuts ds into disjoint subsets holding the given fractions of
// its examples, drawn at random from seed, as torch.utils.data.random_split
// does with fractions: each subset gets floor(n·fraction) examples, and what
// is left over goes one at a time to the subsets in order. The fractions
// must sum to 1, and every subset must get an example. The same seed gives
// the same split on every machine (it is Permutation(seed, 0, n) cut in
// order).
func RandomSplit(ds Dataset, seed uint64, fractions ...float64) ([]*Subset, error) {
	if ds == nil {
		return nil, errors.New("data.RandomSplit: dataset is nil")
	}
	if len(fractions) == 0 {
		return nil, errors.New("data.RandomSplit: give the fractions of the splits, such as 0.8, 0.2")
	}
	n := ds.Len()
	sum := 0.0
	var errs []error
	for i, f := range fractions {
		if !(f >= 0 && f <= 1) {
			errs = append(errs, fmt.Errorf("fraction %d is %g: each must be in [0, 1]", i, f))
		}
		sum += f
	}
	if len(errs) == 0 && math.Abs(sum-1) > 1e-9 {
		errs = append(errs, fmt.Errorf("the fractions %v sum to %g: give fractions that sum to 1, such as 0.8, 0.2 (for splits of given sizes, use NewSubset over Permutation)", fractions, sum))
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("data.RandomSplit: %w", errors.Join(errs...))
	}
	sizes := make([]int, len(fractions))
	left := n
	for i, f := range fractions {
		sizes[i] = int(math.Floor(float64(n) * f))
		left -= sizes[i]
	}
	for i := 0; i < left; i++ {
		sizes[i%len(sizes)]++
	}
	for i, s := range sizes {
		if s == 0 {
			errs = append(errs, fmt.Errorf("split %d (fraction %g of %d examples) would hold 0 examples: raise its fraction or use more data", i, fractions[i], n))
		}
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("data.RandomSplit: %w", errors.Join(errs...))
	}
	perm := Permutation(seed, 0, n)
	out := make([]*Subset, len(sizes))
	at := 0
	for i, s := range sizes {
		out[i] = &Subset{ds: ds, idx: perm[at : at+s : at+s]}
		at += s
	}
	return out, nil
}
