package main

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// The exit status of the fulgur command, as a shell sees it: -h on a
// command prints its usage and exits 0, as "fulgur -h" and the cli
// programs' -h do (it exited 2, as for an error, so "fulgur run -h && ..."
// failed); a -grace that is not above 0 is an error naming the flag (it was
// taken silently as the default 30s).
func TestFulgurExitStatus(t *testing.T) {
	for _, c := range []struct {
		args     []string
		status   int
		inStderr string
	}{
		{[]string{"-h"}, 0, ""},
		{[]string{"run", "-h"}, 0, "usage: fulgur run"},
		{[]string{"plot", "-help"}, 0, "usage: fulgur plot"},
		{[]string{"run", "-grace", "-1s", "true"}, 2, "-grace is -1s: use a duration above 0"},
		{[]string{"run", "-grace", "0", "true"}, 2, "-grace is 0s: use a duration above 0"},
		{[]string{"run", "-no-such-flag"}, 2, "fulgur: run: unknown flag -no-such-flag (see fulgur run -h)"},
		{[]string{"run", "--nproc_per_node", "2", "--rdzv_backend", "c10d", "./train"}, 2, "\nwith our flags: fulgur run -nproc 2 ./train\n"},
		{[]string{"frobnicate"}, 2, `unknown command "frobnicate"`},
	} {
		cmd := exec.Command(os.Args[0], append([]string{asFulgur}, c.args...)...)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		err := cmd.Run()
		status := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			status = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		if status != c.status || !strings.Contains(stderr.String(), c.inStderr) {
			t.Errorf("fulgur %s: exit %d, want %d; stderr:\n%s\nwant it to contain %q", strings.Join(c.args, " "), status, c.status, stderr.String(), c.inStderr)
		}
	}
}
