package trainer

import (
	"fmt"
	"path/filepath"
)

// conflicts reports settings that contradict each other: with both set, one
// would silently be ignored. Each message names both fields and the fix.
// Defaults count as unset (Strategy "auto", Devices and NumNodes 1), so a
// validated Config validates again.
//
// FastDevRun is not in this list: as Lightning's fast_dev_run, it is a
// switch added to a working configuration to smoke-test it, and it
// overrides MaxEpochs, MaxSteps, the Limit*Batches, ValCheckInterval and
// CheckValEveryNEpoch (fastDevRunOverrides names the ones it replaces, and
// Validate logs them).
//
// unready holds each callback's CheckReady error: a callback refused there
// is left out here.
func (c *Config) conflicts(unready []error) []error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	n := c.name
	if c.StrategyImpl != nil {
		name := c.StrategyImpl.Info().Name
		if c.Strategy != "" && c.Strategy != "auto" {
			bad("%s is %q and StrategyImpl is set (%s): StrategyImpl is used instead of %[1]s; set only one of them", n("Strategy"), c.Strategy, name)
		}
		if c.Devices != 0 && c.Devices != 1 {
			bad("%s is %d and StrategyImpl is set (%s): a strategy value brings its own devices; leave %[1]s unset, or set %[4]s instead of StrategyImpl", n("Devices"), c.Devices, name, n("Strategy"))
		}
		if c.NumNodes != 0 && c.NumNodes != 1 {
			bad("%s is %d and StrategyImpl is set (%s): a strategy value brings its own ranks; leave %[1]s unset, or set %[4]s instead of StrategyImpl", n("NumNodes"), c.NumNodes, name, n("Strategy"))
		}
		if c.Accelerator == "cuda" || c.Accelerator == "gpu" {
			bad("%s is %q and StrategyImpl is set (%s): a strategy value brings its own devices; leave %[1]s unset, or set %[4]s instead of StrategyImpl", n("Accelerator"), c.Accelerator, name, n("Strategy"))
		}
	}
	var bars []string
	var sched []string
	stateful := map[string]int{} // name -> index of the first Stateful callback
	type ckptNames struct{ dir, filename string }
	namers := map[ckptNames]int{} // -> index of the first checkpointNamer
	for i, cb := range c.Callbacks {
		if nilEntry(cb, "") != "" || unready[i] != nil {
			continue // Validate names it; its methods would crash, or say nothing of use
		}
		if _, ok := cb.(Stateful); ok {
			if cb.Name() == "" {
				bad("Callbacks[%d] (%T) keeps state in checkpoints under its Name, which is empty: return a name from Name", i, cb)
			} else if j, dup := stateful[cb.Name()]; dup {
				bad("Callbacks[%d] and Callbacks[%d] are both named %q, which keys their state in checkpoints: one would overwrite the other's and a resumed run would give both the same; give each its own Name (ModelCheckpointConfig.Name, EarlyStoppingConfig.Name)", j, i, cb.Name())
			} else {
				stateful[cb.Name()] = i
			}
		}
		if n, ok := cb.(checkpointNamer); ok {
			dir, filename := n.CheckpointNames()
			k := ckptNames{dir, filename}
			if dir != "" {
				k.dir = filepath.Clean(dir)
			}
			if j, dup := namers[k]; dup {
				where := "the run directory's checkpoints/"
				if dir != "" {
					where = dir
				}
				bad("Callbacks[%d] (%s) and Callbacks[%d] (%s) both write checkpoints named %q into %s: each deletes the files it no longer keeps, which are the other's too (one's best checkpoint removed when the other's newest is replaced); give each its own Dirpath or Filename", j, c.Callbacks[j].Name(), i, cb.Name(), filename, where)
			} else {
				namers[k] = i
			}
		}
		asked := func(method string, ask func() bool) bool {
			yes, err := ability("callbacks/"+cb.Name(), method, ask)
			if err != nil {
				errs = append(errs, err)
			}
			return yes
		}
		if d, ok := cb.(ProgressDisplay); ok && asked("DisplaysProgress", d.DisplaysProgress) {
			bars = append(bars, fmt.Sprintf("Callbacks[%d] (%s)", i, cb.Name()))
		}
		if _, ok := cb.(AccumulationScheduler); ok {
			sched = append(sched, fmt.Sprintf("Callbacks[%d] (%s)", i, cb.Name()))
		}
		if _, ok := cb.(bestPather); ok && c.DisableCheckpointing {
			bad("%s is true and Callbacks[%d] (%s) writes checkpoints: remove the callback, or leave %[1]s false", n("DisableCheckpointing"), i, cb.Name())
		}
		if vs, ok := cb.(validationSaver); ok && c.FastDevRun == 0 && c.AccumulateGradBatches > 1 && c.ValCheckInterval > 0 &&
			c.ValCheckInterval%c.AccumulateGradBatches != 0 && asked("SavesOnValidation", vs.SavesOnValidation) {
			k := c.AccumulateGradBatches
			lo, hi := c.ValCheckInterval/k*k, (c.ValCheckInterval/k+1)*k
			fix := fmt.Sprintf("%d or %d", lo, hi)
			if lo == 0 {
				fix = fmt.Sprint(hi)
			}
			vi := n("ValCheckInterval")
			bad("%s is %d and %s is %d: the mid-epoch validations fall inside accumulation windows, where Callbacks[%d] (%s) cannot save the checkpoint it saves after validation (a checkpoint cannot hold partial gradients); set %[1]s to a multiple of %[4]d, such as %[7]s", vi, c.ValCheckInterval, n("AccumulateGradBatches"), k, i, cb.Name(), fix)
		}
	}
	if len(bars) > 0 && c.EnableProgressBar != nil && !*c.EnableProgressBar {
		bad("%s is false and %s draws a progress bar: remove the callback to have none, or leave %[1]s unset", n("EnableProgressBar"), bars[0])
	}
	if len(bars) > 1 {
		bad("%s and %s both draw a progress bar: keep one", bars[0], bars[1])
	}
	if len(sched) > 0 && c.AccumulateGradBatches > 1 {
		bad("%s is %d and %s sets the batches per step by epoch: put the factor in the scheduler (epoch 0 -> %[2]d) and leave %[1]s unset", n("AccumulateGradBatches"), c.AccumulateGradBatches, sched[0])
	}
	if len(sched) > 1 {
		bad("%s and %s both set the batches per step: keep one", sched[0], sched[1])
	}
	if c.DisableLogger && len(c.Loggers) > 0 {
		bad("%s is true and Loggers has %d logger(s) (%s first): leave Loggers empty to log nothing, or leave %[1]s false", n("DisableLogger"), len(c.Loggers), c.Loggers[0].Name())
	}
	if c.GradientClipAlgorithm == "value" && c.GradientClipVal == 0 {
		bad("%s is \"value\" and %s is 0, which turns clipping off: set %[2]s to the bound, or leave %[1]s unset", n("GradientClipAlgorithm"), n("GradientClipVal"))
	}
	return errs
}

// fastDevRunOverrides names the fields FastDevRun replaces that were set
// to something else.
func (c *Config) fastDevRunOverrides() []string {
	if c.FastDevRun <= 0 {
		return nil
	}
	n := c.FastDevRun
	var out []string
	set := func(name string, v, want int) {
		if v != 0 && v != want {
			out = append(out, fmt.Sprintf("%s=%d", c.name(name), v))
		}
	}
	set("MaxEpochs", c.MaxEpochs, 1)
	set("MaxSteps", c.MaxSteps, 0)
	set("LimitTrainBatches", c.LimitTrainBatches, n)
	set("LimitValBatches", c.LimitValBatches, n)
	set("LimitTestBatches", c.LimitTestBatches, n)
	set("LimitPredictBatches", c.LimitPredictBatches, n)
	set("ValCheckInterval", c.ValCheckInterval, 0)
	set("CheckValEveryNEpoch", c.CheckValEveryNEpoch, 1)
	return out
}
