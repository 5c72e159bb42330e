package sharded_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/rs/zerolog"
	"gorgonia.org/tensor"

	"github.com/fulgur-ml/fulgur/data"
	"github.com/fulgur-ml/fulgur/models"
	"github.com/fulgur-ml/fulgur/module"
	"github.com/fulgur-ml/fulgur/strategy"
	_ "github.com/fulgur-ml/fulgur/strategy/ddp" // "sharded" starts and joins its processes through "ddp", by name
	"github.com/fulgur-ml/fulgur/strategy/strategytest"
)

// memProgramEnv makes the test binary one rank of a memory measurement:
// the value is the strategy's name; ddp's launcher re-executes the binary
// for the other local ranks, which inherit it.
const memProgramEnv = "FULGUR_SHARDED_MEM_PROGRAM"

func TestMain(m *testing.M) {
	if name := os.Getenv(memProgramEnv); name != "" {
		if err := memProgram(context.Background(), name); err != nil {
			fmt.Fprintln(os.Stderr, "memory program:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// memSizes is a wide mlp: 1,182,218 parameters (4.5 MiB in float32), in
// units of at most 1 MiB (FULGUR_BUCKET_MB=1: one layer each), so that the
// parameters, their gradients and Adam's state dwarf the activations of a
// batch of 8 and the engine's unit buffers.
var memSizes = []int{256, 512, 512, 512, 512, 512, 10}

const memBatch, memSteps = 8, 3

func memParams() int {
	n := 0
	for i := 1; i < len(memSizes); i++ {
		n += memSizes[i-1]*memSizes[i] + memSizes[i]
	}
	return n
}

// memProgram is one rank: it builds the strategy by name on -devices
// processes, trains memSteps steps of Adam and reports, from rank 0, every
// rank's growth of the live heap from before Setup to after the steps.
func memProgram(ctx context.Context, name string) error {
	n, err := strconv.Atoi(os.Getenv("FULGUR_SHARDED_MEM_DEVICES"))
	if err != nil {
		return err
	}
	s, err := strategy.New(name, strategy.Options{Devices: n, Log: zerolog.Nop()})
	if err != nil {
		return err
	}
	if l, ok := s.(strategy.Launcher); ok {
		if _, err := l.Launch(ctx); err != nil {
			return err
		}
	}
	defer s.Teardown(ctx)
	m := &models.MLP{Sizes: memSizes}
	b := module.NewBuilder(tensor.Float32)
	if err := m.Configure(b); err != nil {
		return err
	}
	specs, err := b.Specs()
	if err != nil {
		return err
	}
	fields := []data.Field{{Name: "x", Shape: []int{memSizes[0]}}, {Name: "y", Shape: []int{}}}
	batch := &data.Batch{Size: memBatch, Fields: fields, Data: [][]float32{make([]float32, memBatch*memSizes[0]), make([]float32, memBatch)}}
	rng := rand.New(rand.NewPCG(1, uint64(s.Info().Rank)))
	for i := range batch.Data[0] {
		batch.Data[0][i] = float32(rng.NormFloat64())
	}
	for i := range batch.Data[1] {
		batch.Data[1][i] = float32(rng.IntN(memSizes[len(memSizes)-1]))
	}
	base := strategytest.LiveHeap()
	if err := s.Setup(ctx, strategy.Setup{Module: m, Specs: specs, Dtype: tensor.Float32, Seed: 1, Fields: fields, NewOptimizer: m.ConfigureOptimizers, Log: zerolog.Nop()}); err != nil {
		return err
	}
	for range memSteps {
		if _, err := s.Step(ctx, module.Train, batch, strategy.TrainOptions{Sync: true, Scale: 1}); err != nil {
			return err
		}
		if _, err := s.OptimizerStep(ctx, strategy.OptimizerOptions{}); err != nil {
			return err
		}
	}
	grown := float64(int64(strategytest.LiveHeap()) - int64(base))
	// Each rank's figure in its own slot; Max keeps it.
	vals, ws, ops := make([]float64, n), make([]float64, n), make([]module.Reduce, n)
	for i := range vals {
		ws[i], ops[i] = 1, module.Max
	}
	vals[s.Info().Rank] = grown
	if err := s.Reduce(ctx, vals, ws, ops); err != nil {
		return err
	}
	if s.Info().Rank == 0 {
		return json.NewEncoder(os.Stdout).Encode(vals)
	}
	return nil
}

// measure runs the strategy on n processes and returns each rank's growth
// of its live heap, in bytes.
func measure(t *testing.T, name string, n int) []float64 {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), memProgramEnv+"="+name, "FULGUR_SHARDED_MEM_DEVICES="+strconv.Itoa(n), "FULGUR_BUCKET_MB=1")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s on %d processes: %v\n%s", name, n, err, stderr.String())
	}
	var vals []float64
	if err := json.Unmarshal(out, &vals); err != nil || len(vals) != n {
		t.Fatalf("%s on %d processes printed %q (%v), want %d figures", name, n, out, err, n)
	}
	return vals
}

// What a rank allocates from the Go heap for training, measured (the live
// heap after a collection, each rank a process of its own) on a wide mlp
// whose parameters dwarf everything else. Stage 2 keeps no whole gradient
// buffer: it holds a model's worth of gradient (P·4 bytes) less than stage
// 1 at every N > 1 (stage 1's all-gather buffer, P/N, is stage 2's
// gradient shard). And under stage 2 the optimizer state and gradients
// (Adam: 2·P·4 + P·4 bytes at N = 1) fall as 1/N: from N = 1 to N, the
// heap falls by (1 - 1/N) of them.
func TestShardedMemoryMeasured(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	if runtime.GOOS != "linux" {
		t.Skip("ddp's launcher re-executes the test binary on linux only")
	}
	P := float64(memParams())
	grads, state := 4*P, 2*4*P // float32 gradients; Adam's exp_avg and exp_avg_sq
	ns := []int{1, 2, 4}
	heap := map[string]map[int]float64{}
	for _, name := range []string{"sharded_stage1", "sharded_stage2"} {
		heap[name] = map[int]float64{}
		for _, n := range ns {
			per := measure(t, name, n)
			worst := 0.0
			for _, v := range per {
				worst = max(worst, v)
			}
			heap[name][n] = worst
			t.Logf("%s N=%d: %.2f MiB per rank (largest rank; every rank %v MiB)", name, n, worst/(1<<20), mib(per))
		}
	}
	s1, s2 := heap["sharded_stage1"], heap["sharded_stage2"]
	for _, n := range ns[1:] {
		if d := s1[n] - s2[n]; d < 0.9*grads {
			t.Errorf("N=%d: stage 2 holds %.2f MiB, stage 1 %.2f MiB: %.2f MiB less, want a whole gradient buffer (%.2f MiB) less, within 10%%",
				n, s2[n]/(1<<20), s1[n]/(1<<20), d/(1<<20), grads/(1<<20))
		}
	}
	for _, n := range ns[1:] {
		want := (1 - 1/float64(n)) * (state + grads)
		got := s2[1] - s2[n]
		if got < want-0.1*(state+grads) || got > want+0.1*(state+grads) {
			t.Errorf("stage 2 from N=1 to N=%d: the heap falls by %.2f MiB, want (1 - 1/%d) of the optimizer state and gradients, %.2f MiB, within %.2f MiB",
				n, got/(1<<20), n, want/(1<<20), 0.1*(state+grads)/(1<<20))
		}
	}
}

func mib(vs []float64) []string {
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = fmt.Sprintf("%.2f", v/(1<<20))
	}
	return out
}
