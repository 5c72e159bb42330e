package main

import (
	"errors"
	"flag"
	"fmt"
	"strconv"
	"strings"
)

// What a torchrun user types, answered: fulgur run's flags are torchrun's
// with '-' (-nproc for --nproc-per-node), and torchrun's rendezvous and
// worker options have no counterpart here, so each says what to do
// instead. They are hinted, never accepted, so that -h and every error
// name the one flag to type. (cli's matcher answers a training program's
// flags; commands import no internal package, so this one is its own.)

// torchrunFlag is a torchrun option: the flag here (none when there is no
// equivalent), what to do (for none), and whether it takes a value.
// A note that ends "drop it" makes the command line without the option
// the one to copy.
type torchrunFlag struct {
	flag  string
	note  string
	value bool
}

// torchrunFlags are keyed by the option written with '-' for '_'.
var torchrunFlags = map[string]torchrunFlag{
	"nproc-per-node":   {flag: "nproc", value: true},
	"node-rank":        {flag: "node-rank", value: true},
	"master-addr":      {flag: "master-addr", value: true},
	"master-port":      {flag: "master-port", value: true},
	"max-restarts":     {flag: "max-restarts", value: true},
	"nnodes":           {flag: "nnodes", value: true},
	"rdzv-endpoint":    {flag: "master-addr", value: true},
	"standalone":       {note: "one machine is the default here, with a free port: drop it"},
	"rdzv-backend":     {note: "rank 0 of node 0 holds the rendezvous here, at -master-addr and -master-port: drop it", value: true},
	"rdzv-id":          {note: "a job is told apart by $FULGUR_TOKEN here, the same secret exported on every machine: drop it", value: true},
	"rdzv-conf":        {note: "the rendezvous waits $FULGUR_TIMEOUT for every rank and has no other settings: drop it", value: true},
	"max-nodes":        {note: "fulgur run restarts ranks of one machine only: drop it (-nproc MIN:MAX for fewer ranks after a failure)", value: true},
	"monitor-interval": {note: "the launcher sees a rank end at once: drop it", value: true},
	"start-method":     {note: "every rank is a process of its own: drop it", value: true},
	"role":             {note: "every rank is a trainer: drop it", value: true},
	"log-dir":          {note: "every rank's output comes to this terminal, each line after its rank ([rank1] ...), for the launcher's redirection to keep: drop it", value: true},
	"redirects":        {note: "every rank's output comes to this terminal, each line after its rank ([rank1] ...): drop it", value: true},
	"tee":              {note: "every rank's output comes to this terminal, each line after its rank ([rank1] ...): drop it", value: true},
	"local-addr":       {note: "each rank reaches the others by the address it has towards node 0: drop it", value: true},
	"m":                {note: "fulgur run starts a compiled program: build it (go build -o train .) and give its path, fulgur run -nproc 2 ./train"},
	"module":           {note: "fulgur run starts a compiled program: build it (go build -o train .) and give its path, fulgur run -nproc 2 ./train"},
	"no-python":        {note: "PROGRAM is started as it is: drop it"},
	"run-path":         {note: "fulgur run starts a compiled program by its path: drop it"},
}

// unknownRunFlags explains every flag of args that fs does not define, one
// line each, reading args as fs.Parse does up to PROGRAM. fixed is args
// with each such flag replaced by ours (or dropped), nil when one of them
// has no clear replacement.
func unknownRunFlags(fs *flag.FlagSet, args []string) (lines, fixed []string) {
	clear := true
	for i := 0; i < len(args); i++ {
		a := args[i]
		name := strings.TrimPrefix(strings.TrimPrefix(a, "-"), "-")
		if a == "--" || !strings.HasPrefix(a, "-") || name == "" || name[0] == '-' || name[0] == '=' {
			fixed = append(fixed, args[i:]...)
			break
		}
		name, value, hasValue := strings.Cut(name, "=")
		if fl := fs.Lookup(name); fl != nil {
			fixed = append(fixed, a)
			if b, ok := fl.Value.(interface{ IsBoolFlag() bool }); !hasValue && (!ok || !b.IsBoolFlag()) && i+1 < len(args) {
				i++
				fixed = append(fixed, args[i])
			}
			continue
		}
		dashed := strings.ToLower(strings.ReplaceAll(name, "_", "-"))
		tr, isTorchrun := torchrunFlags[dashed]
		if !isTorchrun {
			if best := closestFlag(fs, dashed); best != "" {
				tr = torchrunFlag{flag: best, value: true}
			}
		}
		if !hasValue && tr.value && i+1 < len(args) {
			i++
			value, hasValue = args[i], true
		}
		line, repl, ok := "unknown flag -"+name, []string(nil), false
		switch {
		case isTorchrun && tr.flag == "":
			line += ": " + tr.note
			ok = strings.HasSuffix(tr.note, "drop it")
		case tr.flag != "":
			repl, ok = []string{"-" + tr.flag}, true
			if hasValue {
				repl, ok = runValue(tr.flag, dashed, value)
			}
			write := strings.Join(repl, " ")
			switch {
			case isTorchrun && tr.flag == dashed:
				line += ": write " + write + "; flags here are written with '-'"
			case isTorchrun:
				line += ": torchrun's --" + name + " is -" + tr.flag + " here: write " + write
				if dashed == "rdzv-endpoint" && ok {
					line = "unknown flag -" + name + ": torchrun's rendezvous endpoint is node 0's address and port here: write " + write
				}
			default:
				line += ": did you mean -" + tr.flag + "?"
			}
			if !ok {
				line = "unknown flag -" + name + ": " + repl[0]
				repl = nil
			}
		}
		lines = append(lines, line)
		clear = clear && ok
		fixed = append(fixed, repl...)
	}
	if !clear {
		fixed = nil
	}
	return lines, fixed
}

// runValue is flag with the value a torchrun option was given, as typed
// here; when the value has no equivalent, ok is false and the one string
// says what to do.
func runValue(flagName, option, value string) (args []string, ok bool) {
	switch {
	case option == "rdzv-endpoint":
		host, port, found := strings.Cut(value, ":")
		if _, err := strconv.Atoi(port); !found || err != nil || host == "" {
			return []string{fmt.Sprintf("torchrun's rendezvous endpoint is node 0's address and port here: write -master-addr HOST -master-port PORT (%q has no HOST:PORT)", value)}, false
		}
		return []string{"-master-addr", host, "-master-port", port}, true
	case option == "nproc-per-node":
		if _, err := strconv.Atoi(value); err != nil {
			return []string{fmt.Sprintf("torchrun's --nproc-per-node is -nproc here, and for %q: give the number of ranks to start on this machine, such as -nproc 2", value)}, false
		}
	}
	return []string{"-" + flagName, value}, true
}

// closestFlag is the flag of fs a misspelt name means, when exactly one
// is within a small edit distance ("" otherwise).
func closestFlag(fs *flag.FlagSet, name string) string {
	limit := 1
	if len(name) >= 6 {
		limit = 2
	}
	best, bestD, tie := "", limit+1, false
	fs.VisitAll(func(f *flag.Flag) {
		switch d := distance(name, f.Name); {
		case d < bestD:
			best, bestD, tie = f.Name, d, false
		case d == bestD:
			tie = true
		}
	})
	if tie {
		return ""
	}
	return best
}

// distance counts the insertions, deletions, substitutions and swaps of
// neighbouring letters that turn a into b.
func distance(a, b string) int {
	prev2, prev, cur := make([]int, len(b)+1), make([]int, len(b)+1), make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			sub := 1
			if a[i-1] == b[j-1] {
				sub = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+sub)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(b)]
}

// runParseError is fs.Parse's error for fulgur run as a torchrun user
// reads it: after -h the usage (and flag.ErrHelp); every unknown flag
// named with ours, or what to do instead, and the command line to copy
// when each has a clear replacement.
func runParseError(fs *flag.FlagSet, args []string, err error, usage func()) error {
	if errors.Is(err, flag.ErrHelp) {
		usage()
		return err
	}
	msg := err.Error()
	if strings.HasPrefix(msg, "flag provided but not defined: ") {
		if lines, fixed := unknownRunFlags(fs, args); len(lines) > 0 {
			msg = "run: " + strings.Join(lines, "\n") + " (see fulgur run -h)"
			if len(lines) > 1 && fixed != nil {
				msg += "\nwith our flags: " + shellLine(append([]string{"fulgur", "run"}, fixed...))
			}
			return errors.New(msg)
		}
	}
	if v := fs.Lookup("nnodes"); v != nil && strings.Contains(msg, " for flag -nnodes: ") {
		for i, a := range args {
			val, ok := strings.CutPrefix(strings.TrimLeft(a, "-"), "nnodes=")
			if !ok && strings.TrimLeft(a, "-") == "nnodes" && i+1 < len(args) {
				val, ok = args[i+1], true
			}
			if ok && strings.Contains(val, ":") {
				return fmt.Errorf("run: -nnodes %q: a range of machines is torchrun's elastic mode; here give the number of machines (restarts do not cross machines), and -nproc MIN:MAX for a job on one machine that goes on with fewer ranks after a failure (see fulgur run -h)", val)
			}
		}
	}
	return fmt.Errorf("run: %s (see fulgur run -h)", msg)
}

// shellLine is args as a shell reads them back.
func shellLine(args []string) string {
	out := make([]string, len(args))
	for i, a := range args {
		if a == "" || strings.ContainsFunc(a, func(r rune) bool {
			return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_.,/:=@%+", r))
		}) {
			a = "'" + strings.ReplaceAll(a, "'", `'\\''`) + "'"
		}
		out[i] = a
	}
	return strings.Join(out, " ")
}
