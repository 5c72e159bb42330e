package device_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/fulgur-ml/fulgur/strategy/device"
)

func TestOpen(t *testing.T) {
	for _, tc := range []struct {
		acc   string
		n     int
		names string
		err   string
	}{
		{"cpu", 2, "cpu:0 cpu:1", ""},
		{"", 1, "cpu:0", ""},
		{"auto", 1, "cpu:0", ""},
		{"cpu", 0, "", "use 1 or more"},
		{"tpu", 1, "", `device kind "tpu" is not available`},
	} {
		devs, err := device.Open(tc.acc, tc.n)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("Open(%q, %d) error = %v, want %q", tc.acc, tc.n, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("Open(%q, %d): %v", tc.acc, tc.n, err)
		}
		var names []string
		for _, d := range devs {
			names = append(names, d.String())
		}
		if got := strings.Join(names, " "); got != tc.names {
			t.Errorf("Open(%q, %d) = %s, want %s", tc.acc, tc.n, got, tc.names)
		}
	}
}

func Example() {
	devs, err := device.Open("cpu", 2)
	if err != nil {
		panic(err)
	}
	for _, d := range devs {
		err := d.Do(context.Background(), func() error { return nil })
		fmt.Println(d, d.Kind(), err)
	}
	// Output:
	// cpu:0 cpu <nil>
	// cpu:1 cpu <nil>
}
