package strategy

import (
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"

	"github.com/rs/zerolog"

	"github.com/fulgur-ml/fulgur/strategy/launch"
)

// Options are what a strategy built by name needs to know.
type Options struct {
	Devices     int    // per node; -1: all
	NumNodes    int    // machines
	Accelerator string // "cpu", "cuda", "auto"
	// Lookup reads launch variables (RANK, SLURM_PROCID, ...). nil: the
	// process environment. Tests inject their own.
	Lookup func(string) (string, bool)
	Log    zerolog.Logger
	// LogDir is where the ranks a strategy starts itself (ddp's ranks
	// 1..N-1) write their output, one rank_N.log each. "": they share this
	// process's stdout and stderr.
	LogDir string
	// SettingName names the trainer.Config field it is given ("Devices")
	// in the strategy's errors as its user knows it, such as a command
	// line's flag ("-devices"); "" or nil: the field's name
	// (trainer.Config.SettingName, which the trainer passes on).
	SettingName func(field string) string
}

// Name is how a strategy's errors name the trainer.Config field (o's
// SettingName, else the field): exported for the strategies, each a
// package of its own.
func (o Options) Name(field string) string {
	if o.SettingName != nil {
		if n := o.SettingName(field); n != "" {
			return n
		}
	}
	return field
}

// Factory builds a strategy from options.
type Factory func(o Options) (Strategy, error)

// LayoutCheck reports, without building anything, a layout (Devices,
// NumNodes, Accelerator) that a strategy can never run, whatever the
// environment: "single" on 2 devices, say. A Config is validated with it
// when it is made (trainer.New), so the mistake is refused there and not at
// Fit, after the data and the model are loaded.
type LayoutCheck func(o Options) error

var (
	regMu    sync.RWMutex
	registry = map[string]Factory{}
	checks   = map[string]LayoutCheck{}
)

// RegisterCheck gives the strategy called name a layout check, which Check
// runs; its Factory should run it too. It panics, as Register does, on a
// name that has a check already, an empty name or a nil check.
func RegisterCheck(name string, f LayoutCheck) {
	switch {
	case name == "":
		panic("strategy: RegisterCheck with an empty name: name the strategy as Register does")
	case f == nil:
		panic(fmt.Sprintf("strategy: RegisterCheck(%q) with a nil check", name))
	}
	regMu.Lock()
	defer regMu.Unlock()
	if _, dup := checks[name]; dup {
		panic(fmt.Sprintf("strategy: RegisterCheck(%q) called twice: the strategy has a layout check already (%s)", name, registeredBy(name)))
	}
	checks[name] = f
}

// Check runs the layout check of the strategy called name on o (with
// New's defaults: Devices and NumNodes 0 are 1); nil when the strategy has
// none or "auto" picks one by the layout.
func Check(name string, o Options) error {
	if o.Devices == 0 {
		o.Devices = 1
	}
	if o.NumNodes == 0 {
		o.NumNodes = 1
	}
	regMu.RLock()
	f, ok := checks[name]
	regMu.RUnlock()
	if !ok {
		return nil
	}
	return f(o)
}

// Register makes a strategy available by name to New, and so to
// trainer.Config.Strategy. Strategy packages register themselves in an
// init function; libraries and tests pass values instead
// (trainer.Config.StrategyImpl).
//
// Like database/sql.Register, it panics when name is registered already,
// a shipped name ("ddp", registered by strategy/ddp, which the trainer
// links) included: two packages claiming one name is a mistake in the
// program, and the later registration silently winning would make which
// strategy runs hang on the order of their init functions. To train with
// a strategy of your own in place of a shipped one, register it under a
// name of its own and set trainer.Config.Strategy to that name, or pass
// the value as trainer.Config.StrategyImpl. Register also panics on what
// New could never build: "auto" (New picks "single" or "ddp" for it), an
// empty name or a nil factory.
func Register(name string, f Factory) {
	switch {
	case name == "auto":
		panic(`strategy: Register("auto"): New picks "single" or "ddp" for "auto" and never builds a strategy of that name; register another name`)
	case name == "":
		panic("strategy: Register with an empty name: name the strategy as Config.Strategy will")
	case f == nil:
		panic(fmt.Sprintf("strategy: Register(%q) with a nil factory", name))
	}
	regMu.Lock()
	defer regMu.Unlock()
	if _, dup := registry[name]; dup {
		panic(fmt.Sprintf("strategy: Register(%q) called twice: %s registered it already; register yours under a name of its own and set Config.Strategy to it, or pass it as trainer.Config.StrategyImpl", name, registeredBy(name)))
	}
	registry[name] = f
}

// registeredBy says who registered name: the shipped package, or an
// earlier Register call.
func registeredBy(name string) string {
	if p, ok := shipped[name]; ok {
		return "package " + p
	}
	return "an earlier call"
}

// shipped names the package whose init registers each strategy fulgur
// ships; New names it when a program asks for one without linking it.
var shipped = map[string]string{
	"single":            "github.com/fulgur-ml/fulgur/strategy/single",
	"dp":                "github.com/fulgur-ml/fulgur/strategy/dp",
	"ddp":               "github.com/fulgur-ml/fulgur/strategy/ddp",
	"ddp_spawn":         "github.com/fulgur-ml/fulgur/strategy/ddp",
	"sharded":           "github.com/fulgur-ml/fulgur/strategy/sharded",
	"sharded_stage1":    "github.com/fulgur-ml/fulgur/strategy/sharded",
	"sharded_stage2":    "github.com/fulgur-ml/fulgur/strategy/sharded",
	"fsdp":              "github.com/fulgur-ml/fulgur/strategy/fsdp",
	"fsdp_hybrid_shard": "github.com/fulgur-ml/fulgur/strategy/fsdp",
}

// Known reports whether name can be passed to New.
func Known(name string) bool {
	if name == "auto" {
		return true
	}
	regMu.RLock()
	defer regMu.RUnlock()
	_, ok := registry[name]
	return ok
}

// Names lists the names New accepts.
func Names() []string {
	regMu.RLock()
	defer regMu.RUnlock()
	out := []string{"auto"}
	for n := range registry {
		out = append(out, n)
	}
	sort.Strings(out[1:])
	return out
}

// New builds the strategy called name. "auto" picks "single" for one device
// on one node and "ddp" otherwise, also for one device in a process a
// launcher (torchrun, mpirun, srun) started as a rank of a larger world;
// but not in a rank that a program's own ddp or ddp_spawn started: that
// rank runs the whole program again, and a trainer of one device it meets
// before the distributed one (a quick check, a search) is its own.
func New(name string, o Options) (Strategy, error) {
	if o.Devices == 0 {
		o.Devices = 1
	}
	if o.NumNodes == 0 {
		o.NumNodes = 1
	}
	if o.Lookup == nil {
		o.Lookup = os.LookupEnv
	}
	if name == "auto" {
		name = "single"
		if o.Devices != 1 || o.NumNodes != 1 || (launchedByCluster(o.Lookup) && !selfLaunched(o.Lookup)) {
			name = "ddp"
		}
	}
	if v, ok := startedAsRank(o.Lookup); ok && (name == "single" || name == "dp") && !selfLaunched(o.Lookup) {
		// Each of the launcher's processes would train a whole job of
		// its own, every one as rank 0 writing the same run directory.
		return nil, fmt.Errorf("strategy %q trains in one process, but a launcher started this one as a rank of a job (%s): use ddp (or sharded, fsdp), which joins the launcher's job, or start the program once, without the launcher", name, v)
	}
	regMu.RLock()
	f, ok := registry[name]
	regMu.RUnlock()
	if !ok {
		if p, ok := shipped[name]; ok {
			return nil, fmt.Errorf("strategy %q is not available: package %s registers it; import it blank (import _ %q) or build through the trainer, which links it", name, p, p)
		}
		return nil, fmt.Errorf("strategy %q is not available: %s", name, UnknownAdvice(name))
	}
	return f(o)
}

// UnknownAdvice is what to write instead of name, which no strategy
// registers: the registered name it differs from only in case or spaces
// ("DDP"), or the shipped one and the package that registers it when that
// is not linked, or the list of names.
func UnknownAdvice(name string) string {
	name = strings.TrimSpace(name)
	for _, n := range Names() {
		if strings.EqualFold(n, name) {
			return fmt.Sprintf("names are lower case: write %q (one of %v)", n, Names())
		}
	}
	for n, p := range shipped {
		if strings.EqualFold(n, name) {
			return fmt.Sprintf("names are lower case: write %q, which package %s registers; import it blank (import _ %q) or build through the trainer, which links it", n, p, p)
		}
	}
	return fmt.Sprintf("use one of %v", Names())
}

// launchedByCluster reports whether a launcher (torchrun, mpirun, srun, a
// Kubernetes job) started this process as part of a larger world.
func launchedByCluster(lookup func(string) (string, bool)) bool {
	for _, k := range []string{"WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "SLURM_NTASKS"} {
		if v, ok := lookup(k); ok && v != "" && v != "1" {
			return true
		}
	}
	return false
}

// startedAsRank reports the variable by which a launcher that starts
// every process of a job itself (torchrun, fulgur run, mpirun) says this
// process is one of several. SLURM_NTASKS is not such a sign: an sbatch
// script's own shell has it too.
func startedAsRank(lookup func(string) (string, bool)) (string, bool) {
	for _, k := range []string{"WORLD_SIZE", "OMPI_COMM_WORLD_SIZE"} {
		if v, ok := lookup(k); ok && v != "" && v != "1" {
			return k + "=" + v, true
		}
	}
	return "", false
}

// selfLaunched reports whether this process is a rank that a program's
// ddp or ddp_spawn trainer started by running the program again.
func selfLaunched(lookup func(string) (string, bool)) bool {
	v, _ := lookup(launch.EnvLauncher)
	return v == "ddp" || v == "ddp_spawn"
}

// CUDAAvailable reports whether this build can use CUDA devices.
func CUDAAvailable() bool { return cudaBuilt }
