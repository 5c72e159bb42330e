package panics_test

import (
	"errors"
	"fmt"

	"github.com/fulgur-ml/fulgur/panics"
)

func readRecord(i int) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("read %d: %w", i, panics.Recovered(r))
		}
	}()
	parse(i)
	return nil
}

// parse has a user's bug.
func parse(i int) int {
	var rows []int
	return rows[i]
}

func Example() {
	err := readRecord(3)
	var pe *panics.Error
	if errors.As(err, &pe) {
		fmt.Println(pe.Value)
		fmt.Println("user frame:", pe.HasUserFrame())
	}
	// Output:
	// runtime error: index out of range [3] with length 0
	// user frame: true
}
