package fakedevice_test

import (
	"context"
	"fmt"

	"github.com/fulgur-ml/fulgur/strategy/device/fakedevice"
)

func Example() {
	devs, err := fakedevice.New(4, fakedevice.FailAfter(3, 1))
	if err != nil {
		panic(err)
	}
	work := func() error { return nil }
	for step := 0; step < 2; step++ {
		for _, d := range devs {
			if err := d.Do(context.Background(), work); err != nil {
				fmt.Println(err)
			}
		}
	}
	// Output: device fake:3: device failed: injected fault after 1 units of work
}
