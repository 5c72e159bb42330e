package trainer

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"maps"
	"runtime/debug"
	"slices"
	"strings"

	"github.com/fulgur-ml/fulgur/data"
	"github.com/fulgur-ml/fulgur/module"
)

// agreeSettings fails a Fit of several ranks whose ranks were started with
// different settings: a batch size, learning rate or model width given to
// one machine and not the other, or another build of the program or of
// fulgur there. Nothing else catches such a job: with as many batches and
// parameters on every rank, the collectives match, and each rank trains
// with its own settings, the replicas drifting apart without an error.
//
// Each rank hashes its settings (settingsOf) and the hashes are gathered;
// only when they differ are rank 0's settings and the first differing
// rank's sent to every rank, so that every rank's error names the same
// differences.
func (t *Trainer) agreeSettings(ctx context.Context, m module.Module, train, val *data.Loader) error {
	info := t.strat.Info()
	if info.WorldSize < 2 {
		return nil
	}
	mine, err := t.settingsOf(m, train, val)
	if err != nil {
		return fmt.Errorf("Fit: compare the ranks' settings: %w", err)
	}
	text, err := json.Marshal(mine)
	if err != nil {
		return fmt.Errorf("Fit: compare the ranks' settings: %w", err)
	}
	h := fnv.New32a()
	h.Write(text)
	// Each rank fills its own slots (hash, length); the sum gathers them.
	row := make([]float64, 2*info.WorldSize)
	row[2*info.Rank], row[2*info.Rank+1] = float64(h.Sum32()), float64(len(text))
	if err := t.strat.Reduce(ctx, row, make([]float64, len(row)), sumOps(len(row))); err != nil {
		return fmt.Errorf("Fit: compare the ranks' settings: %w", err)
	}
	var differ []int
	for r := 1; r < info.WorldSize; r++ {
		if row[2*r] != row[0] || row[2*r+1] != row[1] {
			differ = append(differ, r)
		}
	}
	if len(differ) == 0 {
		return nil
	}
	d := differ[0]
	n0, nd := int(row[1]), int(row[2*d+1])
	both := make([]float64, n0+nd)
	switch info.Rank {
	case 0:
		putBytes(both[:n0], text)
	case d:
		putBytes(both[n0:], text)
	}
	if err := t.strat.Reduce(ctx, both, make([]float64, len(both)), sumOps(len(both))); err != nil {
		return fmt.Errorf("Fit: the ranks' settings differ (ranks %v from rank 0's); sending them to every rank: %w", differ, err)
	}
	var s0, sd map[string]string
	if err := json.Unmarshal(getBytes(both[:n0]), &s0); err != nil {
		return fmt.Errorf("Fit: the ranks' settings differ (ranks %v from rank 0's); rank 0's: %w", differ, err)
	}
	if err := json.Unmarshal(getBytes(both[n0:]), &sd); err != nil {
		return fmt.Errorf("Fit: the ranks' settings differ (ranks %v from rank 0's); rank %d's: %w", differ, d, err)
	}
	return fmt.Errorf("Fit: the ranks were started with different settings: ranks %v differ from rank 0; rank %d against rank 0: %s: start every rank (every machine's launcher) with the same program build, flags and configuration", differ, d, diffSettings(&t.cfg, s0, sd, d))
}

// settingsOf is what every rank of a job must have alike, by name: the
// builds, the Config's settings that shape training, the module's type and
// HParams, the loaders' batch sizes and data sizes (with the distributed
// sampler, which shards one dataset between the ranks), and
// Config.SameOnEveryRank. Paths and display settings may differ between
// machines and are left out.
func (t *Trainer) settingsOf(m module.Module, train, val *data.Loader) (map[string]string, error) {
	s := map[string]string{}
	for k, v := range buildSettings() {
		s[k] = v
	}
	c := &t.cfg
	for k, v := range map[string]any{
		"MaxEpochs": c.MaxEpochs, "MaxSteps": c.MaxSteps, "MinEpochs": c.MinEpochs, "MinSteps": c.MinSteps, "LimitTrainBatches": c.LimitTrainBatches,
		"LimitValBatches": c.LimitValBatches, "LimitTestBatches": c.LimitTestBatches, "LimitPredictBatches": c.LimitPredictBatches,
		"ValCheckInterval": c.ValCheckInterval, "CheckValEveryNEpoch": c.CheckValEveryNEpoch,
		"NumSanityValSteps": c.NumSanityValSteps, "DisableSanityCheck": c.DisableSanityCheck,
		"OverfitBatches": c.OverfitBatches, "FastDevRun": c.FastDevRun, "AccumulateGradBatches": c.AccumulateGradBatches,
		"GradientClipVal": c.GradientClipVal, "GradientClipAlgorithm": c.GradientClipAlgorithm, "LogGradNorm": c.LogGradNorm,
		"Seed": c.Seed, "Deterministic": c.Deterministic, "SyncBatchNorm": c.SyncBatchNorm, "LogEveryNSteps": c.LogEveryNSteps,
		"DisableCheckpointing": c.DisableCheckpointing, "Precision": c.Precision, "Devices": c.Devices, "NumNodes": c.NumNodes,
		"Strategy": c.Strategy, "ShardedCheckpoint": c.ShardedCheckpoint, "Accelerator": c.Accelerator,
		"UseDistributedSampler": c.distributedSampler(),
	} {
		s["Config."+k] = fmt.Sprint(v)
	}
	s["module type"] = fmt.Sprintf("%T", m)
	if h, ok := m.(module.HParamser); ok {
		hp, err := hparamsOf(h)
		if err != nil {
			return nil, err
		}
		for k, v := range hp {
			s["HParams "+k] = settingValue(v)
		}
	}
	for name, l := range map[string]*data.Loader{"training": train, "validation": val} {
		if l == nil || !c.distributedSampler() {
			// Without the distributed sampler each rank may read data of
			// its own (a shard per rank), in batches of its own.
			continue
		}
		lc := l.Config()
		s[name+" loader's BatchSize"] = fmt.Sprint(lc.BatchSize)
		s[name+" loader's DropLast"] = fmt.Sprint(lc.DropLast)
		s[name+" loader's Shuffle"] = fmt.Sprint(lc.Shuffle)
		s[name+" data's examples"] = fmt.Sprint(l.Dataset().Len())
	}
	for k, v := range c.SameOnEveryRank {
		s[k] = settingValue(v)
	}
	return s, nil
}

// settingValue writes v as JSON where it can (so maps and slices read the
// same on every rank), else as fmt does.
func settingValue(v any) string {
	if b, err := json.Marshal(v); err == nil {
		return string(b)
	}
	return fmt.Sprint(v)
}

// buildSettings names the program's build and fulgur's: two machines
// running different builds may train differently, or meet collectives
// that no longer match. The Go version and platform are left out (a
// mixed cluster may build for each).
func buildSettings() map[string]string {
	s := map[string]string{}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return s
	}
	const self = "github.com/fulgur-ml/fulgur"
	prog := bi.Main.Path + " " + bi.Main.Version
	if bi.Main.Version == "" || bi.Main.Version == "(devel)" {
		// A version stamped from a checkout holds the revision already.
		for _, st := range bi.Settings {
			if st.Key == "vcs.revision" || st.Key == "vcs.modified" {
				prog += " " + st.Key + "=" + st.Value
			}
		}
	}
	s["program build"] = prog
	if bi.Main.Path == self {
		s["fulgur version"] = bi.Main.Version
		return s
	}
	for _, d := range bi.Deps {
		if d.Path != self {
			continue
		}
		v := d.Version + " " + d.Sum
		if d.Replace != nil {
			// A local directory's path differs between machines; a
			// replacing module's version does not.
			v = d.Version + " replaced by " + d.Replace.Version + " " + d.Replace.Sum
		}
		s["fulgur version"] = strings.TrimSpace(v)
	}
	return s
}

// diffSettings lists, in name order, the settings of rank d that differ
// from rank 0's (at most a few, then how many more).
func diffSettings(c *Config, s0, sd map[string]string, d int) string {
	keys := slices.Sorted(maps.Keys(s0))
	for k := range sd {
		if _, ok := s0[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	const most = 6
	var parts []string
	n := 0
	for _, k := range keys {
		v0, ok0 := s0[k]
		vd, okd := sd[k]
		if ok0 && okd && v0 == vd {
			continue
		}
		if n++; n > most {
			continue
		}
		if !ok0 {
			v0 = "not set"
		}
		if !okd {
			vd = "not set"
		}
		what := k
		if f, ok := strings.CutPrefix(k, "Config."); ok {
			what = c.field(f) // the keys stay Go names: the ranks compare them
		}
		parts = append(parts, fmt.Sprintf("%s is %s on rank %d, %s on rank 0", what, vd, d, v0))
	}
	if n > most {
		parts = append(parts, fmt.Sprintf("and %d more", n-most))
	}
	if len(parts) == 0 {
		return "the same settings, written differently"
	}
	return strings.Join(parts, "; ")
}

func sumOps(n int) []module.Reduce {
	ops := make([]module.Reduce, n)
	for i := range ops {
		ops[i] = module.Sum
	}
	return ops
}

// putBytes and getBytes carry bytes through a float64 sum, one a value.
func putBytes(dst []float64, b []byte) {
	for i, c := range b {
		dst[i] = float64(c)
	}
}

func getBytes(src []float64) []byte {
	b := make([]byte, len(src))
	for i, v := range src {
		b[i] = byte(v)
	}
	return b
}
