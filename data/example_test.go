package data_test

import (
	"context"
	"fmt"
	"strings"

	"github.com/fulgur-ml/fulgur/data"
)

func ExampleNewLoader() {
	// Ten examples: x is a 2-vector, y a scalar label.
	ds, err := data.NewInMemory(
		[]data.Field{{Name: "x", Shape: []int{2}}, {Name: "y"}},
		[][]float32{
			{0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7, 8, 8, 9, 9},
			{0, 1, 0, 1, 0, 1, 0, 1, 0, 1},
		})
	if err != nil {
		fmt.Println(err)
		return
	}
	l, err := data.NewLoader(ds, data.LoaderConfig{BatchSize: 4})
	if err != nil {
		fmt.Println(err)
		return
	}
	it := l.Iter(context.Background(), 0)
	defer it.Close()
	for b, ok := it.Next(); ok; b, ok = it.Next() {
		y, _ := b.Field("y")
		fmt.Println(b.Size, b.Indices, y)
	}
	if err := it.Err(); err != nil {
		fmt.Println(err)
	}
	// Output:
	// 4 [0 1 2 3] [0 1 0 1]
	// 4 [4 5 6 7] [0 1 0 1]
	// 2 [8 9] [0 1]
}

func ExampleDistributedSampler() {
	// Ten examples over four processes: padded to twelve by repeating the
	// first ones, which are marked so that metrics can leave them out.
	for rank := range 4 {
		idx, pad := data.DistributedSampler{Rank: rank, World: 4}.Order(0, 10)
		fmt.Println(rank, idx, pad)
	}
	// Output:
	// 0 [0 4 8] [false false false]
	// 1 [1 5 9] [false false false]
	// 2 [2 6 0] [false false true]
	// 3 [3 7 1] [false false true]
}

func ExampleNewLoader_validation() {
	_, err := data.NewLoader(nil, data.LoaderConfig{BatchSize: 0, Prefetch: -2})
	fmt.Println(err)
	// Output:
	// data.NewLoader: dataset is nil: pass a Dataset such as the one data.OpenFashionMNIST returns
	// BatchSize is 0: use 1 or more, e.g. 64
	// Prefetch is -2: use 0 for the default (2 batches ahead), a positive count, or -1 to read synchronously
}

// A table a spreadsheet in a decimal-comma locale exported: ';' between
// cells (Comma's default beside Decimal ','), CRLF line ends.
func ExampleReadCSV_decimalComma() {
	file := "Länge;Breite;Art\r\n5,1;3,5;0\r\n6,25;2,9;1\r\n"
	ds, err := data.ReadCSV(strings.NewReader(file), data.CSVConfig{Decimal: ',', Fields: []data.CSVField{
		{Name: "x"}, {Name: "y", Columns: []string{"Art"}},
	}})
	if err != nil {
		fmt.Println(err)
		return
	}
	x, y := make([]float32, 2), make([]float32, 1)
	for i := 0; i < ds.Len(); i++ {
		if err := ds.Read(i, [][]float32{x, y}); err != nil {
			fmt.Println(err)
			return
		}
		fmt.Println(x, y)
	}
	// A grouped number is refused, naming its cell, rather than guessed.
	_, err = data.ReadCSV(strings.NewReader("a;b\r\n1.234,5;0\r\n"), data.CSVConfig{Decimal: ',', Fields: []data.CSVField{{Name: "x"}}})
	fmt.Println(err)
	// Output:
	// [5.1 3.5] [0]
	// [6.25 2.9] [1]
	// data.ReadCSV: line 2, column "a": "1.234,5" has digit grouping, which is not read: export the numbers without it (1234,5)
}
