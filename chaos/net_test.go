//go:build chaos

package chaos_test

import (
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fulgur-ml/fulgur/deploy/netns"
)

// The network faults run the two ranks as two "machines": network
// namespaces of their own, joined through a relay (deploy/netns) that
// delays, drops or cuts their frames as the fault asks.

// twoNodes makes the two nodes, removed when the test ends.
func twoNodes(t *testing.T, delay time.Duration, loss float64) *netns.Pair {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("the network faults make network namespaces, which needs root (CI runs as root)")
	}
	n, err := netns.Up(netns.Config{Delay: delay, Loss: loss})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := n.Close(); err != nil {
			t.Errorf("the relay: %v", err)
		}
	})
	return n
}

// rankOn starts rank i of a two-node job in node i.
func rankOn(t *testing.T, n *netns.Pair, marker string, i, port int, token string, env []string, args ...string) *job {
	return rankOf(t, n, marker, i, 1, port, token, env, args...)
}

// rankOf starts rank i of a job of perNode ranks on each of the two nodes,
// in node i/perNode.
func rankOf(t *testing.T, n *netns.Pair, marker string, i, perNode, port int, token string, env []string, args ...string) *job {
	node := i / perNode
	env = append([]string{"RANK=" + strconv.Itoa(i), "WORLD_SIZE=" + strconv.Itoa(2*perNode), "LOCAL_RANK=" + strconv.Itoa(i%perNode),
		"LOCAL_WORLD_SIZE=" + strconv.Itoa(perNode), "NODE_RANK=" + strconv.Itoa(node), "MASTER_ADDR=" + n.Addr[0],
		"MASTER_PORT=" + strconv.Itoa(port), "FULGUR_TOKEN=" + token, "FULGUR_SOCKET_IFNAME=" + n.Dev[node]}, env...)
	return startVia(t, n.Exec(node), marker, env, append(args, "-devices", strconv.Itoa(perNode), "-num-nodes", "2")...)
}

// TestNetworkFaults: the two ranks on two "machines" joined by a link
// that is clean, lossy and slow, or cut mid-training.
func TestNetworkFaults(t *testing.T) {
	want := baseline(t)
	var clean time.Duration
	t.Run("clean link", func(t *testing.T) { clean = netRun(t, want, 0, 0, 0) })
	t.Run("loss and delay", func(t *testing.T) { netRun(t, want, 50*time.Millisecond, 0.01, clean) })
	t.Run("partition", func(t *testing.T) { partition(t, want, 1) })
	t.Run("partition of two-level collectives", func(t *testing.T) { partition(t, want, 2) })
}

// netRun trains the job across the link and returns how long it took.
func netRun(t *testing.T, want string, delay time.Duration, loss float64, clean time.Duration) time.Duration {
	r := row{section: sectionNet, fault: "none: the same job through the relay (the reference for the slowdown)",
		phase: "whole job", timeToError: "-"}
	if delay > 0 {
		r.fault = fmt.Sprintf("%.0f%% of frames dropped and %v added each way, both directions", loss*100, delay)
	}
	defer recordRow(t, &r)
	n := twoNodes(t, delay, loss)
	marker, token, port := newMarker(t), hex.EncodeToString([]byte(newMarker(t))), 29500
	began := time.Now()
	js := []*job{rankOn(t, n, marker, 0, port, token, nil, "-root", t.TempDir()), rankOn(t, n, marker, 1, port, token, nil, "-root", t.TempDir())}
	for i, j := range js {
		if !j.wait(t, 5*time.Minute) {
			r.outcome = "hang"
			return 0
		}
		if j.err != nil {
			t.Errorf("rank %d failed: %v\n%s", i, j.err, j.stderr.String())
			r.outcome = "rank " + strconv.Itoa(i) + " failed: " + trimProgram(lastLine(j.stderr.String()))
			return 0
		}
	}
	end := js[0].ended
	if js[1].ended.After(end) {
		end = js[1].ended
	}
	took := end.Sub(began)
	r.outcome = fmt.Sprintf("completes in %.1fs", took.Seconds())
	if clean > 0 {
		r.outcome += fmt.Sprintf(", %.1f× the clean link's %.1fs", took.Seconds()/clean.Seconds(), clean.Seconds())
	}
	checked := []string{fmt.Sprintf("%d frames relayed, %d dropped", n.Relay.Frames(), n.Relay.Dropped())}
	if got := js[0].result(t).SHA256; got != want {
		t.Errorf("weights %s across the link, undisturbed %s", got, want)
		checked = append(checked, "OTHER weights")
	} else {
		checked = append(checked, "weights = undisturbed run's")
	}
	r.checked = strings.Join(checked, "; ")
	return took
}

// partition cuts the link while the last rank is held in a training step:
// every rank must end with an error within the timeout, naming a rank of
// the other node. With perNode 2, over FULGUR_BACKEND=hier, the ranks of
// each node wait for the other node in the cross-node level.
func partition(t *testing.T, want string, perNode int) {
	r := row{section: sectionNet, fault: "partition: the link drops every frame from then on", phase: phaseNames["forward"]}
	held := 2*perNode - 1
	env := []string{holdEnv + "=forward " + strconv.Itoa(held) + " "}
	if perNode > 1 {
		r.fault = fmt.Sprintf("partition, 2 nodes x %d ranks over FULGUR_BACKEND=hier (shm inside a node, tcp across)", perNode)
		r.checked = "every rank's error names a rank of the other node"
	}
	defer recordRow(t, &r)
	n := twoNodes(t, 0, 0)
	marker, token, port, holdDir := newMarker(t), hex.EncodeToString([]byte(newMarker(t))), 29500, t.TempDir()
	root := t.TempDir()
	env[0] += holdDir
	if perNode > 1 {
		env = append(env, "FULGUR_BACKEND=hier")
	}
	var js []*job
	for i := range 2 * perNode {
		dir := root
		if i > 0 {
			dir = t.TempDir()
		}
		js = append(js, rankOf(t, n, marker, i, perNode, port, token, env, "-root", dir))
	}
	if !waitFile(t, js[held], filepath.Join(holdDir, "reached"), 5*time.Minute) {
		r.outcome = "phase not reached"
		return
	}
	n.Relay.Cut()
	injected := time.Now()
	os.WriteFile(filepath.Join(holdDir, "go"), nil, 0o644)
	var outcomes []string
	var last time.Time
	for i, j := range js {
		if !j.wait(t, timeout+margin+timeout) {
			r.outcome = "hang"
			return
		}
		if j.ended.After(last) {
			last = j.ended
		}
		if j.err == nil {
			t.Errorf("rank %d succeeded across a partition", i)
			outcomes = append(outcomes, fmt.Sprintf("rank %d SUCCEEDED", i))
			continue
		}
		msg := lastLine(j.stderr.String())
		other := 1 - i/perNode // the other node
		named := false
		for k := other * perNode; k < (other+1)*perNode; k++ {
			named = named || strings.Contains(msg, "rank "+strconv.Itoa(k))
		}
		if !named {
			t.Errorf("rank %d's error names no rank of node %d:\n%s", i, other, j.stderr.String())
			r.checked = "an error names no rank of the other node"
		}
		// Each side saw silence, not a reset: the other rank may be alive,
		// and the message says the network may be at fault and what to
		// check.
		if perNode == 1 && !strings.Contains(msg, "the network between this machine and rank "+strconv.Itoa(1-i)+"'s ("+n.Addr[1-i]+")") {
			t.Errorf("rank %d's error does not name the network to rank %d's machine (%s) as a possible cause:\n%s", i, 1-i, n.Addr[1-i], msg)
		}
		if d := j.ended.Sub(injected); d > timeout+margin {
			t.Errorf("rank %d's error came %v after the partition, past the timeout %v + %v", i, d, timeout, margin)
		}
		outcomes = append(outcomes, fmt.Sprintf("rank %d: %s", i, trimProgram(strings.ReplaceAll(msg, root, "ROOT"))))
	}
	both := "error on both ranks; "
	if perNode > 1 {
		both = "error on every rank; "
	}
	r.outcome = both + strings.Join(outcomes, "; ")
	r.timeToError = last.Sub(injected).Round(10 * time.Millisecond).String()
	if left := survivors(marker, timeout+5*time.Second); len(left) > 0 {
		t.Errorf("processes %v of the job outlived it", left)
	}
	if p := findFile(root, "last.ckpt"); p != "" && perNode == 1 {
		r.checked = checkResume(t, p, want)
	}
}
