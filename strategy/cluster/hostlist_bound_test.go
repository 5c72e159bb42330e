package cluster_test

import (
	"strings"
	"testing"

	"github.com/fulgur-ml/fulgur/strategy/cluster"
)

// Many large ranges in one bracket, or one range up to the largest int, are
// refused before they are expanded (the fuzzer found the first taking
// seconds and hundreds of megabytes).
func TestExpandHostListBoundsTheWholeExpansion(t *testing.T) {
	for _, s := range []string{
		"n[" + strings.Repeat("0-999999,", 8) + "0-9]",
		"n[0-9223372036854775807]",
		"a[0-999]-b[0-9999]",
	} {
		if _, err := cluster.ExpandHostList(s); err == nil || !strings.Contains(err.Error(), "expands to more than") {
			t.Errorf("%.40q: err = %v, want the size bound", s, err)
		}
	}
	hosts, err := cluster.ExpandHostList("n[0-999,1000-1999]")
	if err != nil || len(hosts) != 2000 || hosts[1999] != "n1999" {
		t.Fatalf("2000 hosts: got %d, %v", len(hosts), err)
	}
}
