//go:build linux

package netns

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

// What the relay tells a carrier comes back whole, and what no relay
// writes is refused with the variable's name.
func TestCarrySpecRoundTrips(t *testing.T) {
	for _, s := range []carrySpec{
		{dir: 0, delay: 100 * time.Microsecond, loss: 0, cpus: nil},
		{dir: 1, delay: 3 * time.Millisecond, loss: 0.25, cpus: []int{0}},
		{dir: 1, delay: 0, loss: 1, cpus: []int{2, 3, 1023}},
	} {
		got, err := parseCarrySpec(s.String())
		if err != nil || !reflect.DeepEqual(got, s) {
			t.Errorf("parse(%q) = %+v, %v; want %+v", s.String(), got, err, s)
		}
	}
	for _, v := range []string{"", "2 100 0 any", "0 -1 0 any", "0 100 1.5 any", "0 100 NaN any", "0 100 0 1,x", "0 100 0 1024", "0 100 0"} {
		if _, err := parseCarrySpec(v); err == nil || !strings.Contains(err.Error(), carryEnv) {
			t.Errorf("parse(%q): %v, want an error naming %s", v, err, carryEnv)
		}
	}
}
