package launch

import (
	"os"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"strings"
)

// Command is the command line that starts this program again with args,
// quoted for a POSIX shell: the command that started it (./train, or a
// name found in PATH; name when there is none) or, for a program that go
// run built, the go run command of its package. A fulgur program prints it
// to say how to resume a run; fulgur run hands its own to the ranks in
// EnvLaunchCommand, so that what a rank prints starts the whole job again.
func Command(name string, args ...string) string {
	exe, _ := os.Executable()
	bi, _ := debug.ReadBuildInfo()
	words := append(invocation(name, os.Args[0], exe, bi), args...)
	for i, w := range words {
		words[i] = shellQuote(w)
	}
	return strings.Join(words, " ")
}

// invocation is how to start this program again: the command that
// started it (argv0: ./train, ../bin/mlp, or a name found in PATH; prog
// when there is none), or, for a program that go run built, the go run
// command of its package, which
// works from anywhere in its module (a program built from files named on
// go run's command line: "go run ."). go run leaves the binary in the
// build cache (GOCACHE/xx/HASH-d/NAME) or, when it does not cache it, in a
// temporary go-build directory (go-buildN/b001/exe/NAME).
func invocation(prog, argv0, exe string, bi *debug.BuildInfo) []string {
	dir := filepath.Dir(exe)
	temp := filepath.Base(dir) == "exe" && strings.HasPrefix(filepath.Base(filepath.Dir(filepath.Dir(dir))), "go-build")
	if !temp && !goCacheEntry.MatchString(filepath.Base(dir)) {
		if argv0 == "" {
			return []string{prog}
		}
		return []string{argv0}
	}
	pkg := "."
	if bi != nil && bi.Path != "" && bi.Path != "command-line-arguments" {
		pkg = bi.Path
	}
	return []string{"go", "run", pkg}
}

var goCacheEntry = regexp.MustCompile(`^[0-9a-f]{64}-d$`)

func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_=./,:+@%") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
