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
func (c *Config) conflicts() []error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if c.StrategyImpl != nil {
		name := c.StrategyImpl.Info().Name
		if c.Strategy != "" && c.Strategy != "auto" {
			bad("Strategy is %q and StrategyImpl is set (%s): StrategyImpl is used instead of Strategy; set only one of them", c.Strategy, name)
		}
		if c.Devices != 0 && c.Devices != 1 {
			bad("Devices is %d and StrategyImpl is set (%s): a strategy value brings its own devices; leave Devices unset, or set Strategy instead of StrategyImpl", c.Devices, name)
		}
		if c.NumNodes != 0 && c.NumNodes != 1 {
			bad("NumNodes is %d and StrategyImpl is set (%s): a strategy value brings its own ranks; leave NumNodes unset, or set Strategy instead of StrategyImpl", c.NumNodes, name)
		}
		if c.Accelerator == "cuda" || c.Accelerator == "gpu" {
			bad("Accelerator is %q and StrategyImpl is set (%s): a strategy value brings its own devices; leave Accelerator unset, or set Strategy instead of StrategyImpl", c.Accelerator, name)
		}
	}
	var bars []string
	var sched []string
	stateful := map[string]int{} // name -> index of the first Stateful callback
	type ckptNames struct{ dir, filename string }
	namers := map[ckptNames]int{} // -> index of the first checkpointNamer
	for i, cb := range c.Callbacks {
		if nilEntry(cb) != "" {
			continue // Validate names it; its methods would crash
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
			bad("DisableCheckpointing is true and Callbacks[%d] (%s) writes checkpoints: remove the callback, or leave DisableCheckpointing false", i, cb.Name())
		}
		if vs, ok := cb.(validationSaver); ok && c.FastDevRun == 0 && c.AccumulateGradBatches > 1 && c.ValCheckInterval > 0 &&
			c.ValCheckInterval%c.AccumulateGradBatches != 0 && asked("SavesOnValidation", vs.SavesOnValidation) {
			k := c.AccumulateGradBatches
			lo, hi := c.ValCheckInterval/k*k, (c.ValCheckInterval/k+1)*k
			fix := fmt.Sprintf("%d or %d", lo, hi)
			if lo == 0 {
				fix = fmt.Sprint(hi)
			}
			bad("ValCheckInterval is %d and AccumulateGradBatches is %d: the mid-epoch validations fall inside accumulation windows, where Callbacks[%d] (%s) cannot save the checkpoint it saves after validation (a checkpoint cannot hold partial gradients); set ValCheckInterval to a multiple of %d, such as %s", c.ValCheckInterval, k, i, cb.Name(), k, fix)
		}
	}
	if len(bars) > 0 && c.EnableProgressBar != nil && !*c.EnableProgressBar {
		bad("EnableProgressBar is false and %s draws a progress bar: remove the callback to have none, or leave EnableProgressBar unset", bars[0])
	}
	if len(bars) > 1 {
		bad("%s and %s both draw a progress bar: keep one", bars[0], bars[1])
	}
	if len(sched) > 0 && c.AccumulateGradBatches > 1 {
		bad("AccumulateGradBatches is %d and %s sets the batches per step by epoch: put the factor in the scheduler (epoch 0 -> %d) and leave AccumulateGradBatches unset", c.AccumulateGradBatches, sched[0], c.AccumulateGradBatches)
	}
	if len(sched) > 1 {
		bad("%s and %s both set the batches per step: keep one", sched[0], sched[1])
	}
	if c.DisableLogger && len(c.Loggers) > 0 {
		bad("DisableLogger is true and Loggers has %d logger(s) (%s first): leave Loggers empty to log nothing, or leave DisableLogger false", len(c.Loggers), c.Loggers[0].Name())
	}
	if c.GradientClipAlgorithm == "value" && c.GradientClipVal == 0 {
		bad("GradientClipAlgorithm is \"value\" and GradientClipVal is 0, which turns clipping off: set GradientClipVal to the bound, or leave GradientClipAlgorithm unset")
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
			out = append(out, fmt.Sprintf("%s=%d", name, v))
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
