package launch

import (
	"runtime/debug"
	"strings"
	"testing"
)

// TestInvocationUnderGoRun: the resume command printed after an interrupt
// starts the program the way it was started. Under go run, the binary's
// name (a file in a deleted go-build directory) does not start it again.
func TestInvocationUnderGoRun(t *testing.T) {
	pkg := &debug.BuildInfo{Path: "example.com/me/train"}
	files := &debug.BuildInfo{Path: "command-line-arguments"}
	for _, c := range []struct {
		argv0, exe string
		bi         *debug.BuildInfo
		want       string
	}{
		{"/tmp/go-build1294084878/b001/exe/train", "/tmp/go-build1294084878/b001/exe/train", pkg, "go run example.com/me/train"},
		{"/tmp/go-build652309489/b001/exe/main", "/tmp/go-build652309489/b001/exe/main", files, "go run ."},
		{"/home/me/.cache/go-build/5e/5e8efeba9c9dca27bd421d3ac384b6fa7c2bd8da01135b8973c3f767c910d361-d/train", "/home/me/.cache/go-build/5e/5e8efeba9c9dca27bd421d3ac384b6fa7c2bd8da01135b8973c3f767c910d361-d/train", pkg, "go run example.com/me/train"},
		// A built program: the command as typed, not the App's name
		// (which printed "mlp ..." for ./train, not a command).
		{"./train", "/home/me/bin/train", pkg, "./train"},
		{"train", "/home/me/bin/train", pkg, "train"},
		{"/srv/exe/train", "/srv/exe/train", pkg, "/srv/exe/train"}, // a directory called exe, not go run's
		{"", "", nil, "mlp"},
	} {
		if got := strings.Join(invocation("mlp", c.argv0, c.exe, c.bi), " "); got != c.want {
			t.Errorf("invocation(mlp, %q, %q, %v) = %q, want %q", c.argv0, c.exe, c.bi, got, c.want)
		}
	}
}
