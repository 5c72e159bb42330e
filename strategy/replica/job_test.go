package replica_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fulgur-ml/fulgur/module"
	"github.com/fulgur-ml/fulgur/strategy"
	"github.com/fulgur-ml/fulgur/strategy/collective"
	"github.com/fulgur-ml/fulgur/strategy/collective/inproc"
	"github.com/fulgur-ml/fulgur/strategy/device"
	"github.com/fulgur-ml/fulgur/strategy/replica"
)

// joiner is a strategy built by name that hands its group over: only the
// methods a Job calls are real.
type joiner struct {
	strategy.Strategy
	info      strategy.Info
	group     collective.Collective
	dev       device.Device
	joinErr   error
	launched  bool
	tornDown  int
	launchErr error
}

func (j *joiner) Info() strategy.Info { return j.info }
func (j *joiner) JoinGroup(context.Context) (collective.Collective, device.Device, error) {
	return j.group, j.dev, j.joinErr
}
func (j *joiner) Launch(context.Context) (bool, error) { return j.launched, j.launchErr }
func (j *joiner) Teardown(context.Context) error {
	j.tornDown++
	return nil
}

func group(t *testing.T, n int) []collective.Collective {
	t.Helper()
	g, err := inproc.NewGroup(n, inproc.Timeout(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// both runs f on ranks 0 and 1 at once and returns their errors.
func both(f func(r int) error) [2]error {
	var errs [2]error
	var wg sync.WaitGroup
	for r := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = f(r)
		}()
	}
	wg.Wait()
	return errs
}

func TestJobReducesAndTearsDown(t *testing.T) {
	ctx := context.Background()
	g := group(t, 2)
	jobs := [2]*replica.Job{replica.NewJob("sharded_stage2", g[0], nil, 0), replica.NewJob("sharded_stage2", g[1], nil, 0)}
	for r, j := range jobs {
		if got, want := j.Info(), (strategy.Info{Name: "sharded_stage2", Rank: r, WorldSize: 2, GlobalZero: r == 0}); got != want {
			t.Errorf("rank %d: Info %+v, want %+v", r, got, want)
		}
		if _, dev, err := j.Join(ctx, nil); err != nil || dev == nil || dev.String() != "cpu:0" {
			t.Fatalf("rank %d: Join over a given group and no device: device %v, %v; want cpu:0", r, dev, err)
		}
	}
	sums := [2][]float64{{1, 5, -1}, {3, 2, -4}}
	weights := [2][]float64{{1, 1, 1}, {2, 1, 1}}
	ops := []module.Reduce{module.Mean, module.Max, module.Min}
	for r, err := range both(func(r int) error { return jobs[r].Reduce(ctx, sums[r], weights[r], ops) }) {
		if err != nil {
			t.Fatalf("rank %d: Reduce: %v", r, err)
		}
	}
	for r := range sums {
		if want := []float64{4, 5, -4}; !slices.Equal(sums[r], want) {
			t.Errorf("rank %d: reduced values %v, want %v", r, sums[r], want)
		}
		if want := []float64{3, 2, 2}; !slices.Equal(weights[r], want) {
			t.Errorf("rank %d: reduced weights %v, want %v", r, weights[r], want)
		}
	}
	for r, err := range both(func(r int) error { return jobs[r].Reduce(ctx, nil, nil, nil) }) {
		if err != nil {
			t.Errorf("rank %d: Reduce with nothing (a barrier): %v", r, err)
		}
	}
	for r, err := range both(func(r int) error { return jobs[r].Teardown(ctx) }) {
		if err != nil {
			t.Errorf("rank %d: Teardown: %v", r, err)
		}
	}
	if err := jobs[0].Teardown(ctx); err != nil {
		t.Errorf("a second Teardown: %v, want nothing done", err)
	}
}

// The first failure closes the job's group and the groups it was given
// (Closes), so that the peer's next operation on each fails, and every
// later call on the failed rank reports it.
func TestJobFailureFailsThePeers(t *testing.T) {
	ctx := context.Background()
	g, other := group(t, 2), group(t, 2)
	jobs := [2]*replica.Job{replica.NewJob("fsdp", g[0], nil, time.Second), replica.NewJob("fsdp", g[1], nil, time.Second)}
	var others [2]collective.Group
	for r, j := range jobs {
		if _, _, err := j.Join(ctx, nil); err != nil {
			t.Fatal(err)
		}
		others[r] = collective.WithAsync(other[r])
		j.Closes(others[r])
	}
	err := jobs[0].Fail("setup", errors.New("boom"))
	if want := "rank 0: setup: boom"; err == nil || err.Error() != want {
		t.Fatalf("Fail: %v, want %q", err, want)
	}
	if err := jobs[0].Fail("barrier", errors.New("later")); err == nil || err.Error() != "rank 0: barrier: later" {
		t.Errorf("a second Fail: %v, want it to name its own failure", err)
	}
	want := "the job failed earlier: rank 0: setup: boom"
	if err := jobs[0].Check(true); err == nil || err.Error() != want {
		t.Errorf("Check after the failure: %v, want %q", err, want)
	}
	if err := jobs[0].Reduce(ctx, nil, nil, nil); err == nil || err.Error() != want {
		t.Errorf("Reduce after the failure: %v, want %q", err, want)
	}
	if err := others[1].Barrier(ctx); !errors.Is(err, collective.ErrPeerLost) {
		t.Errorf("the peer's barrier on a group the job closes too: %v, want it lost", err)
	}
	if err := jobs[1].Reduce(ctx, nil, nil, nil); err == nil || !strings.HasPrefix(err.Error(), "rank 1: barrier: ") || !errors.Is(err, collective.ErrPeerLost) {
		t.Errorf("the peer's barrier: %v, want rank 1's barrier to fail on the lost peer", err)
	}
	if err := jobs[1].Check(true); err == nil || !strings.HasPrefix(err.Error(), "the job failed earlier: rank 1: barrier: ") {
		t.Errorf("rank 1's Check after its failure: %v", err)
	}
	for r, j := range jobs {
		if err := j.Teardown(ctx); err != nil {
			t.Errorf("rank %d: Teardown of a failed job: %v, want no final barrier", r, err)
		}
	}
}

func TestJobBeforeSetup(t *testing.T) {
	ctx := context.Background()
	g := group(t, 2)
	j := replica.NewJob("sharded_stage1", g[0], nil, 0)
	if err := j.Check(false); err == nil || err.Error() != "sharded_stage1: called before Setup" {
		t.Errorf("Check before Setup: %v", err)
	}
	if err := j.Reduce(ctx, nil, nil, nil); err == nil || err.Error() != "sharded_stage1: Reduce before Setup" {
		t.Errorf("Reduce before Setup: %v", err)
	}
	if launched, err := j.Launch(ctx); launched || err != nil {
		t.Errorf("Launch with no joiner: %v, %v; want false, nil", launched, err)
	}
	// Torn down before Setup, the job still closes the group it was given.
	if err := j.Teardown(ctx); err != nil {
		t.Fatal(err)
	}
	if err := g[1].Barrier(ctx); !errors.Is(err, collective.ErrPeerLost) {
		t.Errorf("the peer's barrier after Teardown before Setup: %v, want the given group closed", err)
	}
}

// Built by name, the job takes the joiner's rank, group, device and
// launch, and waits for it at Teardown.
func TestJobOverAJoiner(t *testing.T) {
	ctx := context.Background()
	g := group(t, 1)
	cpu := device.NewCPU(0)
	jn := &joiner{info: strategy.Info{Name: "ddp", Rank: 3, WorldSize: 4}, group: g[0], dev: cpu, launched: true}
	j := replica.NewJob("fsdp", nil, jn, 0)
	if j.Rank() != 3 || j.World() != 4 {
		t.Errorf("before Join: rank %d of %d, want the joiner's 3 of 4", j.Rank(), j.World())
	}
	if launched, err := j.Launch(ctx); !launched || err != nil {
		t.Errorf("Launch: %v, %v; want the joiner's true, nil", launched, err)
	}
	_, dev, err := j.Join(ctx, nil)
	if err != nil || dev != cpu {
		t.Fatalf("Join: device %v, %v; want the joiner's", dev, err)
	}
	if j.Rank() != 0 || j.World() != 1 {
		t.Errorf("after Join: rank %d of %d, want the group's 0 of 1", j.Rank(), j.World())
	}
	if err := j.Teardown(ctx); err != nil || jn.tornDown != 1 {
		t.Errorf("Teardown: %v, joiner torn down %d times; want nil, once", err, jn.tornDown)
	}

	mine := device.NewCPU(1)
	jn = &joiner{info: strategy.Info{Name: "ddp", Rank: 2, WorldSize: 4}, group: group(t, 1)[0], dev: cpu}
	if _, dev, err := replica.NewJob("fsdp", nil, jn, 0).Join(ctx, mine); err != nil || dev != mine {
		t.Errorf("Join with a device of the strategy's own: %v, %v; want it kept", dev, err)
	}

	jn = &joiner{info: strategy.Info{Name: "ddp", Rank: 2, WorldSize: 4}, joinErr: errors.New("rendezvous timed out")}
	j = replica.NewJob("fsdp", nil, jn, 0)
	if _, _, err := j.Join(ctx, nil); err == nil || err.Error() != "rank 2: join the group: rendezvous timed out" {
		t.Errorf("Join when the joiner cannot join: %v", err)
	}
	if err := j.Check(false); err == nil || err.Error() != "the job failed earlier: rank 2: join the group: rendezvous timed out" {
		t.Errorf("Check after a failed Join: %v", err)
	}
}

func TestJoinerByNameWithoutDDP(t *testing.T) {
	_, err := replica.JoinerByName(strategy.Options{Devices: 2}, "fsdp")
	if err == nil || !strings.HasPrefix(err.Error(), `strategy "fsdp" starts and joins its processes as "ddp" does: `) || !strings.Contains(err.Error(), "strategy/ddp") {
		t.Errorf("JoinerByName with no ddp linked: %v, want an error naming the package to link", err)
	}
}
