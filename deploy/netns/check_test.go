package netns

import (
	"errors"
	"strings"
	"testing"
)

func TestCheckWithoutPrivilegesSaysWhatItNeeds(t *testing.T) {
	found := func(string) (string, error) { return "/bin/x", nil }
	err := check(1<<capNetAdmin, found)
	if err == nil || !strings.Contains(err.Error(), "need CAP_SYS_ADMIN: run as root") {
		t.Errorf("without CAP_SYS_ADMIN: %v", err)
	}
	err = check(0, func(string) (string, error) { return "", errors.New("not found") })
	for _, want := range []string{"CAP_SYS_ADMIN and CAP_NET_ADMIN", "the ip command", "the tc command"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("without anything: %v does not mention %q", err, want)
		}
	}
	if err := check(1<<capNetAdmin|1<<capSysAdmin, found); err != nil {
		t.Errorf("with both capabilities and the tools: %v", err)
	}
}

func TestCreatorReadsThePidBack(t *testing.T) {
	for _, pid := range []int{1, 4242, 4194304} {
		p := names(pid, 37)
		if got, ok := creator(p.NS[1]); !ok || got != pid {
			t.Errorf("creator(%q) = %d, %v; want %d", p.NS[1], got, ok, pid)
		}
	}
	for _, ns := range []string{"fulgur-chaos123-0", "fulgur4242-n0", "other"} {
		if pid, ok := creator(ns); ok {
			t.Errorf("creator(%q) = %d: not a name Up makes", ns, pid)
		}
	}
}
