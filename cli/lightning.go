package cli

import (
	"flag"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// What a Lightning user types, answered: an unknown flag's error names the
// flag of ours they meant, with their value, and a value Lightning takes
// that we do not names what to type instead. Lightning's spellings are
// hinted, never accepted: one name per setting keeps -h, -print-config,
// the resume command and every error naming the flag the user must type
// (the trainer's errors say -root-dir, so an alias -default-root-dir would
// be answered by a name the user never wrote).

// lightningRename is a Lightning Trainer (or ModelCheckpoint) argument
// whose flag here has another name; note, when set, says how its values
// differ.
type lightningRename struct{ flag, note string }

// lightningNames are keyed by the argument written with '-' for '_'.
var lightningNames = map[string]lightningRename{
	"default-root-dir":       {"root-dir", ""},
	"weights-save-path":      {"root-dir", ""},
	"seed-everything":        {"seed", ""},
	"resume-from-checkpoint": {"ckpt-path", ""},
	"enable-checkpointing":   {"no-checkpoint", "checkpoints are written by default; -no-checkpoint turns them off"},
	"enable-progress-bar":    {"no-progress-bar", "the progress bar is on by default; -no-progress-bar turns it off"},
	"enable-model-summary":   {"no-model-summary", "the summary is printed by default; -no-model-summary turns it off"},
	"logger":                 {"loggers", "csv,tensorboard by default; none for no logger"},
	"gpus":                   {"devices", "with -accelerator cuda"},
	"num-processes":          {"devices", ""},
	"auto-lr-find":           {"", "it is the lr-find command here: PROGRAM lr-find"},
	"track-grad-norm":        {"log-grad-norm", "the L2 norm, logged as grad_norm"},
	// ModelCheckpoint's, given as --trainer.callbacks.init_args.monitor.
	"monitor":             {"ckpt-monitor", ""},
	"mode":                {"ckpt-mode", ""},
	"save-top-k":          {"ckpt-top-k", ""},
	"every-n-train-steps": {"ckpt-every-n-steps", ""},
	"dirpath":             {"root-dir", "checkpoints go under ROOT/lightning_logs/version_N/checkpoints"},
}

// lightningConfigOnly are Lightning Trainer arguments that trainer.Config
// has but no flag sets, with why: a program sets them in App.Callbacks.
var lightningConfigOnly = map[string]struct{ field, why string }{
	// Off, every rank would read the whole of the DataModule's loaders,
	// which are the same on every rank: only a program that shards its
	// data itself may turn it off.
	"use-distributed-sampler": {"UseDistributedSampler", "each rank reads its share of the data; a program that shards its loaders itself turns it off"},
}

// unknownFlags explains every flag in args that fs does not define, one
// line each, the way fs.Parse reads args (it stopped at the first). name
// is the program's, for PROGRAM in a hint. fixed is args with each
// unknown flag (and its value) replaced by ours, or nil when one of them
// has no clear replacement.
func unknownFlags(fs *flag.FlagSet, args []string, program string) (lines, fixed []string) {
	clear := true
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			fixed = append(fixed, args[i:]...)
			break
		}
		if len(a) < 2 || a[0] != '-' {
			if isCommand(a) {
				fixed = append(fixed, a)
				continue // fit after flags, as a launcher script writes it
			}
			fixed = append(fixed, args[i:]...)
			break
		}
		name := strings.TrimPrefix(strings.TrimPrefix(a, "-"), "-")
		if name == "" || name[0] == '-' || name[0] == '=' {
			fixed = append(fixed, args[i:]...)
			break
		}
		name, value, hasValue := strings.Cut(name, "=")
		if fl := fs.Lookup(name); fl != nil {
			fixed = append(fixed, a)
			if _, count := fl.Value.(*Count); count && !hasValue && i+1 < len(args) {
				if _, err := strconv.Atoi(args[i+1]); err == nil {
					i++ // -fast-dev-run 5, as parseArgs reads it
					fixed = append(fixed, args[i])
				}
			} else if !hasValue && !isBool(fl) && i+1 < len(args) {
				i++ // its value
				fixed = append(fixed, args[i])
			}
			continue
		}
		target, hint := meant(fs, name)
		if !hasValue && i+1 < len(args) && (!strings.HasPrefix(args[i+1], "-") || isNumber(args[i+1])) && !isCommand(args[i+1]) {
			// The next argument is this flag's value (Lightning's
			// --enable_checkpointing false too), unless it cannot be.
			_, notBool := strconv.ParseBool(args[i+1])
			// track_grad_norm takes the norm's order, our yes/no flag none.
			if fl := fs.Lookup(target); fl == nil || !isBool(fl) || notBool == nil || target == "log-grad-norm" && isNumber(args[i+1]) {
				i++
				value, hasValue = args[i], true
			}
		}
		line := "unknown flag -" + name
		if target != "" {
			write := "-" + target
			if hasValue {
				write = renamedValue(target, value)
			}
			hint = strings.ReplaceAll(hint, "WRITE", write)
			if vh := lightningValueHint(target, value); hasValue && vh != "" {
				hint += "; and for " + strconv.Quote(value) + ": " + vh
			}
		}
		if hint != "" {
			line += ": " + strings.ReplaceAll(hint, "PROGRAM", program)
		}
		lines = append(lines, line)
		r, ok := replacement(fs, target, value, hasValue)
		clear = clear && ok
		fixed = append(fixed, r...)
	}
	if !clear {
		fixed = nil
	}
	return lines, fixed
}

// replacement is what an unknown flag and its value are written as with
// the flag target that it means; ok is false when that is not clear
// (no flag meant, or a value that flag does not take).
func replacement(fs *flag.FlagSet, target, value string, hasValue bool) (args []string, ok bool) {
	fl := fs.Lookup(target)
	if fl == nil {
		return nil, false
	}
	if !hasValue {
		// A bare Lightning enable_X is true, our no-X the opposite.
		return []string{"-" + target}, isBool(fl) && !strings.HasPrefix(target, "no-")
	}
	b, boolErr := strconv.ParseBool(value)
	switch {
	case target == "log-grad-norm":
		switch x, err := strconv.ParseFloat(value, 64); {
		case err == nil && x == -1:
			return nil, true
		case err == nil:
			return []string{"-log-grad-norm"}, true
		}
		return nil, false
	case strings.HasPrefix(target, "no-") || target == "loggers":
		switch {
		case boolErr != nil && target == "loggers":
			return []string{"-loggers", value}, true
		case boolErr != nil:
			return nil, false
		case b:
			return nil, true // the default
		case target == "loggers":
			return []string{"-loggers", "none"}, true
		}
		return []string{"-" + target}, true
	case isBool(fl):
		return []string{"-" + target + "=" + value}, boolErr == nil
	}
	// A value Lightning takes that we do not: its hint says what to write.
	return []string{"-" + target, value}, lightningValueHint(target, value) == ""
}

// commandLine is program and args as a shell reads them back.
func commandLine(program string, args []string) string {
	out := []string{program}
	for _, a := range args {
		if a == "" || strings.ContainsFunc(a, func(r rune) bool {
			return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_.,/:=@%+", r))
		}) {
			a = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
		out = append(out, a)
	}
	return strings.Join(out, " ")
}

// renamedValue is flag given Lightning's value, as typed here: the
// Trainer's enable_X=False is a bare -no-X, logger=False is -loggers none.
func renamedValue(flag, value string) string {
	b, err := strconv.ParseBool(value)
	switch {
	case strings.HasPrefix(flag, "no-") && err == nil && !b:
		return "-" + flag
	case strings.HasPrefix(flag, "no-") && err == nil:
		return "nothing: it is the default"
	case flag == "loggers" && err == nil && !b:
		return "-loggers none"
	case flag == "loggers" && err == nil:
		return "nothing: it is the default"
	case flag == "log-grad-norm":
		// Lightning 1.x's track_grad_norm is the norm's order, -1 off.
		switch x, err := strconv.ParseFloat(value, 64); {
		case err == nil && x == -1:
			return "nothing: it is the default"
		case err == nil && x == 2:
			return "-log-grad-norm"
		}
		return "-log-grad-norm (the L2 norm: no other order is logged)"
	}
	return "-" + flag + " " + value
}

// isNumber reports whether s is a number, such as -1: a value, not a flag.
func isNumber(s string) bool {
	_, err := strconv.ParseFloat(s, 64)
	return err == nil
}

func isBool(fl *flag.Flag) bool {
	b, ok := fl.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// meant is the flag an unknown name most likely means ("" when none is
// clear), and a hint in which WRITE stands for that flag with the user's
// value.
func meant(fs *flag.FlagSet, name string) (target, hint string) {
	dashed := strings.ToLower(strings.ReplaceAll(name, "_", "-"))
	// --trainer.max_epochs, --model.init_args.lr: LightningCLI's sections;
	// the last part names the setting.
	last := dashed
	if i := strings.LastIndexByte(dashed, '.'); i >= 0 {
		last = dashed[i+1:]
	}
	var ways []string
	if last != dashed {
		ways = append(ways, "have no section prefix")
	}
	if strings.Contains(name, "_") {
		ways = append(ways, "are written with '-' ('_' only in a config file)")
	}
	if strings.ToLower(name) != name {
		ways = append(ways, "are lower case")
	}
	why := ""
	if len(ways) > 0 {
		why = "; flags here " + strings.Join(ways, " and ")
	}
	if fs.Lookup(last) != nil {
		return last, "write WRITE" + why
	}
	lightning := strings.ReplaceAll(last, "-", "_")
	if r, ok := lightningNames[last]; ok && (r.flag == "" || fs.Lookup(r.flag) != nil) {
		hint := "Lightning's " + lightning + " is -" + r.flag + " here: write WRITE"
		if r.flag == "" {
			hint = "Lightning's " + lightning + ": " + r.note
		} else if r.note != "" {
			hint += " (" + r.note + ")"
		}
		return r.flag, hint
	}
	if c, ok := lightningConfigOnly[last]; ok {
		return "", "Lightning's " + lightning + " has no flag here: " + c.why + " (trainer.Config." + c.field + ", in App.Callbacks)"
	}
	best, renamed := closest(fs, last)
	if best == "" {
		return "", ""
	}
	if renamed != "" {
		return best, "did you mean -" + best + "? (Lightning's " + renamed + ")"
	}
	return best, "did you mean -" + best + "?"
}

// closest is the flag a misspelt name means, when one is clearly closest
// ("" when none is), and the Lightning name it was closest to when it was
// one of lightningNames.
func closest(fs *flag.FlagSet, name string) (flagName, lightning string) {
	best, bestD, tie := "", 1<<30, false
	consider := func(n string) {
		switch d := editDistance(name, n); {
		case d < bestD:
			best, bestD, tie = n, d, false
		case d == bestD && n != best:
			tie = true
		}
	}
	fs.VisitAll(func(f *flag.Flag) { consider(f.Name) })
	for n, r := range lightningNames {
		if r.flag != "" && fs.Lookup(r.flag) != nil {
			consider(n)
		}
	}
	limit := 1
	if len(name) >= 6 {
		limit = 2
	}
	if tie || bestD > limit {
		return "", ""
	}
	if r, ok := lightningNames[best]; ok {
		return r.flag, strings.ReplaceAll(best, "-", "_")
	}
	return best, ""
}

// configHint is what a config file's unknown key (with '_' or '-') most
// likely means, in the file's spelling ("" when nothing is clear).
func configHint(fs *flag.FlagSet, key string) string {
	dashed := strings.ToLower(strings.ReplaceAll(key, "_", "-"))
	under := func(s string) string { return strings.ReplaceAll(s, "-", "_") }
	if r, ok := lightningNames[dashed]; ok && r.flag != "" && fs.Lookup(r.flag) != nil {
		hint := "Lightning's " + under(dashed) + " is " + under(r.flag) + " here"
		if r.note != "" {
			hint += " (" + r.note + ")"
		}
		return hint
	}
	if c, ok := lightningConfigOnly[dashed]; ok {
		return "Lightning's " + under(dashed) + " has no setting here: " + c.why + " (trainer.Config." + c.field + ", in App.Callbacks)"
	}
	if best, renamed := closest(fs, dashed); best != "" {
		if renamed != "" {
			return "did you mean " + under(best) + "? (Lightning's " + renamed + ")"
		}
		return "did you mean " + under(best) + "?"
	}
	return ""
}

// editDistance is the optimal-string-alignment distance: insertions,
// deletions, substitutions and swaps of neighbours each count 1.
func editDistance(a, b string) int {
	d := make([][]int, len(a)+1)
	for i := range d {
		d[i] = make([]int, len(b)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(a); i++ {
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(a)][len(b)]
}

// strayValueHint explains a stray "true" or "false" after a yes/no flag
// (Lightning's --trainer.deterministic true): prev is the argument before
// the stray one.
func strayValueHint(fs *flag.FlagSet, prev, stray string) string {
	if !strings.HasPrefix(prev, "-") || strings.Contains(prev, "=") {
		return ""
	}
	if _, err := strconv.ParseBool(stray); err != nil {
		return ""
	}
	name := strings.TrimLeft(prev, "-")
	fl := fs.Lookup(name)
	if fl == nil || !isBool(fl) {
		return ""
	}
	return fmt.Sprintf("; write -%s=%s: a yes/no flag takes its value after '=' (a bare -%s is true)", name, stray, name)
}

// lightningValueHint says what to type instead of a value Lightning takes
// for the trainer flag name that this program does not ("" when there is
// nothing to add).
func lightningValueHint(name, value string) string {
	v := strings.ToLower(strings.TrimSpace(value))
	switch name {
	case "precision":
		switch v {
		case "32-true", "32", "float32", "single":
			return "write -precision 32"
		case "64-true", "64", "float64", "double":
			return "write -precision 64"
		case "16-mixed", "bf16-mixed", "16", "bf16", "16-true", "bf16-true", "half",
			"transformer-engine", "transformer-engine-float16":
			return "fulgur computes in float32 or float64, with no half or mixed precision: write -precision 32"
		}
	case "devices":
		if v == "auto" {
			return "Lightning's \"auto\" is -devices -1 (all) here"
		}
		if strings.ContainsAny(v, ",[") {
			n := 0
			for _, p := range strings.Split(strings.Trim(v, "[] "), ",") {
				if strings.TrimSpace(p) != "" {
					n++
				}
			}
			return fmt.Sprintf("a list of device indices is Lightning's; here give a count of devices: -devices %d", n)
		}
	case "limit-train-batches", "limit-val-batches", "limit-test-batches", "limit-predict-batches":
		if x, err := strconv.ParseFloat(v, 64); err == nil && x != float64(int64(x)) || strings.Contains(v, ".") {
			return fmt.Sprintf("a fraction of the batches is Lightning's; here give a number of batches (0: all): -%s N", name)
		}
	case "val-check-interval":
		x, err := strconv.ParseFloat(v, 64)
		switch {
		case err == nil && x == 1 && strings.Contains(v, "."):
			return "Lightning's 1.0 (once, at the epoch's end) is the default here: drop the flag"
		case err == nil && x > 0 && x < 1:
			return "a fraction of the epoch is Lightning's; here give a number of training batches: -val-check-interval N (validation also runs at the epoch's end)"
		}
	case "max-time":
		// Lightning's "DD:HH:MM:SS".
		parts := strings.Split(v, ":")
		if len(parts) != 4 {
			return ""
		}
		var d time.Duration
		for i, unit := range []time.Duration{24 * time.Hour, time.Hour, time.Minute, time.Second} {
			n, err := strconv.Atoi(parts[i])
			if err != nil || n < 0 {
				return ""
			}
			d += time.Duration(n) * unit
		}
		return fmt.Sprintf("Lightning's DD:HH:MM:SS is written as a duration here: -max-time %s", d)
	case "loggers":
		switch v {
		case "false":
			return "Lightning's logger=False is -loggers none here"
		case "true":
			return "Lightning's logger=True is the default here: drop the flag (csv,tensorboard)"
		}
	case "strategy":
		switch {
		case v == "deepspeed_stage_1":
			return "DeepSpeed's ZeRO stage 1 (optimizer state sharded) is -strategy sharded_stage1 here"
		case v == "deepspeed_stage_2" || v == "deepspeed_stage_2_offload" || v == "deepspeed":
			return "DeepSpeed's ZeRO stage 2 (optimizer state and gradients sharded) is -strategy sharded_stage2 here"
		case strings.HasPrefix(v, "deepspeed_stage_3"):
			return "DeepSpeed's ZeRO stage 3 (parameters sharded too) is -strategy fsdp here"
		case strings.HasPrefix(v, "ddp_find_unused_parameters"):
			return "write -strategy ddp (it has no find_unused_parameters setting)"
		case v == "ddp_fork" || v == "ddp_notebook":
			return "write -strategy ddp"
		}
	}
	return ""
}
