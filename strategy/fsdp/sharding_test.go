package fsdp_test

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"gorgonia.org/tensor"

	"github.com/fulgur-ml/fulgur/strategy"
	"github.com/fulgur-ml/fulgur/strategy/collective/inproc"
	"github.com/fulgur-ml/fulgur/strategy/fsdp"
	"github.com/fulgur-ml/fulgur/strategy/single"
	"github.com/fulgur-ml/fulgur/strategy/strategytest"
)

// heldParams counts the parameters (not optimizer state) in a rank's own
// shards.
func heldParams(sd *strategy.StateDict) int {
	held := 0
	for _, tn := range sd.Tensors {
		if !strings.HasPrefix(tn.Name, strategy.OptimizerPrefix) && tn.Name != "" {
			held += tn.Hi - tn.Lo
		}
	}
	return held
}

// Config.Sharding by name, on 4 ranks as 2 nodes of 2: every sharding
// trains as one device does with the global batch; each rank holds the
// share of the model its sharding says (HYBRID_SHARD: its node's half,
// NO_SHARD: all of it, SHARD_GRAD_OP: a quarter), and the ranks holding
// the same shard (one per node) hold the same values.
func TestFSDPShardingTrainsAsOneDevice(t *testing.T) {
	const n, B = 4, 8
	for _, tc := range []struct {
		sharding fsdp.Sharding
		nodeSize int
		share    int // ranks that split the model between them
		replicas [][2]int
	}{
		{fsdp.HybridShard, 2, 2, [][2]int{{0, 2}, {1, 3}}},
		{fsdp.HybridShard, 1, 1, [][2]int{{0, 1}, {0, 3}}},
		{fsdp.NoShard, 0, 1, [][2]int{{0, 1}, {2, 3}}},
		{fsdp.ShardGradOp, 0, 4, nil},
	} {
		t.Run(fmt.Sprintf("%s/node=%d", tc.sharding, tc.nodeSize), func(t *testing.T) {
			ctx := ctxFor(t)
			group, _ := inproc.NewGroup(n, inproc.Timeout(20*time.Second))
			strats := make([]strategy.Strategy, n)
			for r := range strats {
				var err error
				if strats[r], err = fsdp.New(fsdp.Config{Group: group[r], Sharding: tc.sharding, NodeSize: tc.nodeSize}); err != nil {
					t.Fatal(err)
				}
			}
			ds, _ := strategytest.Regression(4*B, in, out, 12)
			m := &deepMLP{Sizes: []int{in, 9, 7, out}, Opt: "adam", LR: 0.02}
			setup(t, ctx, strats, m, ds, tensor.Float32)
			ref := []strategy.Strategy{single.NewSingle()}
			setup(t, ctx, ref, m, ds, tensor.Float32)
			so := strategy.OptimizerOptions{ClipNorm: 0.5}
			train(t, ctx, strats, ds, B, 4, 1, so)
			train(t, ctx, ref, ds, B, 4, 1, so)
			got := fullState(t, ctx, strats)
			want := strategytest.StoreOf(ref[0])
			np := 0
			for _, e := range want.Entries() {
				np += e.Len
				wt, _ := want.Tensor(e.Name)
				w, g := values(&strategy.Tensor{Dtype: tensor.Float32, Data32: wt.Float32s()}), values(got.Lookup(e.Name))
				for i := range w {
					if d := math.Abs(g[i] - w[i]); !(d <= strategytest.AbsTol+strategytest.RelTol*math.Abs(w[i])) {
						t.Fatalf("%s[%d] is %g after 4 steps, one device gives %g", e.Name, i, g[i], w[i])
					}
				}
			}
			own := make([]*strategy.StateDict, n)
			if err := strategytest.Each(strats, func(r int, s strategy.Strategy) (err error) {
				own[r], err = s.SaveState(ctx, strategy.SaveOptions{})
				return err
			}); err != nil {
				t.Fatal(err)
			}
			for r, sd := range own {
				held := heldParams(sd)
				if d := held*tc.share - np; d < -tc.share*len(want.Entries()) || d > tc.share*len(want.Entries()) {
					t.Errorf("rank %d holds %d of the %d parameters, want about 1/%d", r, held, np, tc.share)
				}
			}
			for _, p := range tc.replicas {
				a, b := own[p[0]], own[p[1]]
				if len(a.Tensors) != len(b.Tensors) {
					t.Fatalf("ranks %d and %d are replicas but hold %d and %d tensors", p[0], p[1], len(a.Tensors), len(b.Tensors))
				}
				for i, ta := range a.Tensors {
					tb := &b.Tensors[i]
					if tb.Name != ta.Name || tb.Lo != ta.Lo || tb.Hi != ta.Hi {
						t.Fatalf("ranks %d and %d are replicas but hold %s[%d:%d] and %s[%d:%d]", p[0], p[1], ta.Name, ta.Lo, ta.Hi, tb.Name, tb.Lo, tb.Hi)
					}
					va, vb := values(&ta), values(tb)
					for i := range va {
						if va[i] != vb[i] {
							t.Fatalf("replicas %d and %d differ at %s[%d]: %g, %g", p[0], p[1], ta.Name, i, va[i], vb[i])
						}
					}
				}
			}
		})
	}
}

// Bad sharding settings are refused at construction, naming the setting
// and the fix; by name, the environment variables too.
func TestFSDPShardingRefusesBadConfig(t *testing.T) {
	group, _ := inproc.NewGroup(4)
	s2, _ := inproc.NewGroup(2)
	for _, tc := range []struct {
		cfg  fsdp.Config
		want string
	}{
		{fsdp.Config{Group: group[0], Sharding: fsdp.HybridShard}, "NodeSize is 0: set the number of ranks per node"},
		{fsdp.Config{Group: group[0], Sharding: fsdp.HybridShard, NodeSize: 3}, "NodeSize is 3 but the job has 4 ranks"},
		{fsdp.Config{Group: group[0], Sharding: fsdp.HybridShard, NodeSize: -1}, "NodeSize is -1"},
		{fsdp.Config{Group: group[0], Sharding: fsdp.Sharding(7)}, "Sharding is Sharding(7)"},
		{fsdp.Config{Group: group[0], Sharding: fsdp.NoShard, ShardGroup: s2[0], ReplicaGroup: s2[1]}, "set one or the other"},
	} {
		if _, err := fsdp.New(tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%+v): %v, want an error saying %q", tc.cfg, err, tc.want)
		}
	}
	for _, tc := range []struct {
		name string
		env  map[string]string
		want string
	}{
		{"fsdp", map[string]string{fsdp.EnvSharding: "zero3"}, `FULGUR_FSDP_SHARDING="zero3": use full_shard, hybrid_shard, shard_grad_op or no_shard`},
		{"fsdp", map[string]string{fsdp.EnvSharding: "shard_grad_op", fsdp.EnvReshardAfterForward: "1"}, "unset one"},
		{"fsdp", map[string]string{fsdp.EnvSharding: "hybrid_shard", fsdp.EnvNodeSize: "0"}, `FULGUR_FSDP_NODE_SIZE="0": use a positive number`},
		{"fsdp_hybrid_shard", map[string]string{fsdp.EnvSharding: "no_shard"}, `FULGUR_FSDP_SHARDING="no_shard" asks for another sharding`},
		// Rank 1 as local rank 0 of node 1: not numbered node by node.
		{"fsdp_hybrid_shard", map[string]string{"RANK": "1", "WORLD_SIZE": "4", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "2", "NODE_RANK": "1"}, "assume ranks numbered node by node"},
	} {
		lookup := func(k string) (string, bool) { v, ok := tc.env[k]; return v, ok }
		_, err := strategy.New(tc.name, strategy.Options{Devices: 2, NumNodes: 2, Lookup: lookup})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s with %v: %v, want an error saying %q", tc.name, tc.env, err, tc.want)
		}
	}
}

// trainer.Config{Strategy: "fsdp_hybrid_shard", Devices: 2, NumNodes: 2}
// in four processes started as torchrun starts them on two nodes (ranks
// numbered node by node, LOCAL_WORLD_SIZE 2): sharded within each node's
// pair, replicated across the nodes, over shared memory and over tcp,
// they checkpoint one device's weights with the global batch, within
// float32 tolerance.
func TestFSDPHybridShardByNameOnTwoNodes(t *testing.T) {
	dir, want := oneDeviceGlobalBatch(t)
	for _, backend := range []string{"shm", "tcp"} {
		t.Run(backend, func(t *testing.T) {
			got := filepath.Join(dir, backend+".ckpt")
			logs := onTwoNodes(t, dir, "fsdp_hybrid_shard", backend, got)
			for r, b := range logs {
				// Each rank says which groups it sharded and replicated over.
				node, local := r/2, r%2
				for _, want := range []string{fmt.Sprintf(" shard_group=[%d,%d]", node*2, node*2+1), fmt.Sprintf("replica_group=[%d,%d]", local, local+2), "sharding=hybrid_shard"} {
					if !strings.Contains(b, want) {
						t.Errorf("rank %d's log does not say %q:\n%s", r, want, b)
					}
				}
			}
			closeToOneDevice(t, got, want, "hybrid_shard on 2 × 2 processes")
		})
	}
}

// Full sharding on 2 nodes x 2 processes over FULGUR_BACKEND=hier: every
// unit's all-gather and every gradient's reduce-scatter runs on the two
// levels (shared memory in a node, tcp across), and the job still
// checkpoints one device's weights within float32 tolerance.
func TestFSDPOverTwoLevelCollectivesOnTwoNodes(t *testing.T) {
	dir, want := oneDeviceGlobalBatch(t)
	got := filepath.Join(dir, "hier.ckpt")
	// Rank 0 logs the group it built.
	if b := onTwoNodes(t, dir, "fsdp", "hier", got)[0]; !strings.Contains(b, "shared memory inside each host, tcp across hosts") {
		t.Errorf("rank 0 did not build the two-level group:\n%s", b)
	}
	closeToOneDevice(t, got, want, "fsdp over hier on 2 × 2 processes")
}

// oneDeviceGlobalBatch checkpoints one device trained on the 2 x 2
// processes' global batch into dir (a new one), to compare them with.
func oneDeviceGlobalBatch(t *testing.T) (dir, ckpt string) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	dir = t.TempDir()
	ckpt = filepath.Join(dir, "single.ckpt")
	program(t, "-strategy", "single", "-devices", "1", "-batch", "16", "-ckpt", ckpt)
	return dir, ckpt
}

// onTwoNodes runs the program with strategy on 4 processes started as
// torchrun starts them on two nodes of two (ranks numbered node by node),
// over FULGUR_BACKEND=backend, checkpointing to ckpt, and returns each
// rank's log once every rank has trained in a world of 4.
func onTwoNodes(t *testing.T, dir, strategy, backend, ckpt string) []string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	const nodes, perNode = 2, 2
	outs := make([]bytes.Buffer, nodes*perNode)
	errs := make([]error, nodes*perNode)
	var wg sync.WaitGroup
	mark := filepath.Join(dir, backend+"-"+strategy)
	if err := os.MkdirAll(mark, 0o755); err != nil {
		t.Fatal(err)
	}
	for r := range nodes * perNode {
		log := filepath.Join(mark, fmt.Sprintf("%d.log", r))
		cmd := exec.CommandContext(ctx, os.Args[0], "-strategy", strategy, "-devices", "2", "-nodes", "2", "-batch", "4", "-ckpt", ckpt, "-mark", mark, "-log", log)
		cmd.Env = append(os.Environ(), programEnv+"=1", "FULGUR_TIMEOUT=60s", "FULGUR_BACKEND="+backend, "FULGUR_TOKEN=two-nodes-test",
			"MASTER_ADDR=127.0.0.1", "MASTER_PORT="+port, "WORLD_SIZE=4", "LOCAL_WORLD_SIZE=2",
			"RANK="+strconv.Itoa(r), "LOCAL_RANK="+strconv.Itoa(r%perNode), "NODE_RANK="+strconv.Itoa(r/perNode))
		cmd.Stdout, cmd.Stderr = &outs[r], &outs[r]
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = cmd.Run()
		}()
	}
	wg.Wait()
	logs := make([]string, nodes*perNode)
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v\n%s", r, err, outs[r].String())
		}
		if b, err := os.ReadFile(filepath.Join(mark, "rank_"+strconv.Itoa(r))); err != nil || string(b) != "4" {
			t.Fatalf("process of rank %d: %q, %v: want it to have trained in a world of 4", r, b, err)
		}
		b, err := os.ReadFile(filepath.Join(mark, fmt.Sprintf("%d.log", r)))
		if err != nil {
			t.Fatal(err)
		}
		logs[r] = string(b)
	}
	return logs
}
