//go:build chaos

package chaos_test

import (
	"bufio"
	"crypto/rand"
	"encoding/csv"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestEpochEndLogging: a SyncDist metric logged by the module, and a
// callback that logs from the epoch-end hooks on rank 0 only (what
// deadlocks Lightning jobs whose ranks disagree on sync_dist calls): the job
// must complete with every value in metrics.csv.
func TestEpochEndLogging(t *testing.T) {
	r := row{section: sectionMis, fault: "SyncDist metric (train_loss_synced) plus a callback logging from OnTrainEpochEnd and OnValidationEnd on rank 0 only",
		phase: "epoch end", timeToError: "-"}
	defer recordRow(t, &r)
	want := baseline(t)
	marker, root := newMarker(t), t.TempDir()
	j := start(t, marker, nil, "-root", root, "-epoch-log")
	if !j.wait(t, 5*time.Minute) {
		r.outcome = "hang"
		return
	}
	if j.err != nil {
		t.Errorf("the job failed: %v\n%s", j.err, j.stderr.String())
		r.outcome = "error: " + trimProgram(lastLine(j.stderr.String()))
		return
	}
	r.outcome = "completes"
	var checked []string
	if got := j.result(t).SHA256; got != want {
		t.Errorf("weights %s, undisturbed %s", got, want)
		checked = append(checked, "OTHER weights")
	} else {
		checked = append(checked, "weights = undisturbed run's")
	}
	csvPath := findFile(root, "metrics.csv")
	f, err := os.Open(csvPath)
	if err != nil {
		t.Fatalf("metrics.csv: %v", err)
	}
	defer f.Close()
	recs, err := csv.NewReader(bufio.NewReader(f)).ReadAll()
	if err != nil || len(recs) < 2 {
		t.Fatalf("metrics.csv: %v (%d lines)", err, len(recs))
	}
	filled := map[string]int{}
	for _, rec := range recs[1:] {
		for i, v := range rec {
			if i < len(recs[0]) && v != "" {
				filled[recs[0][i]]++
			}
		}
	}
	for _, col := range []string{"train_loss_synced_epoch", "rank0_train_epoch_end", "rank0_val_end", "val_loss"} {
		if filled[col] < 2 {
			t.Errorf("metrics.csv has %d values of %s, want one per epoch (2); columns %v", filled[col], col, recs[0])
			checked = append(checked, col+" MISSING")
		}
	}
	if !t.Failed() {
		checked = append(checked, "metrics.csv holds train_loss_synced_epoch, rank0_train_epoch_end, rank0_val_end for both epochs")
	}
	r.checked = strings.Join(checked, "; ")
}

// TestUnevenBatchesSyncBatchNorm: without the distributed sampler rank 0
// has 24 batches an epoch and rank 1 has 20, with SyncBatchNorm making
// every forward a collective: the job must complete or every rank must
// fail with an error, within the timeout; never a hang.
func TestUnevenBatchesSyncBatchNorm(t *testing.T) {
	r := row{section: sectionMis, fault: "uneven batches per rank (24 and 20, UseDistributedSampler off) with SyncBatchNorm",
		phase: "start of epoch 0 (the ranks compare their batch counts)"}
	defer recordRow(t, &r)
	marker, root := newMarker(t), t.TempDir()
	began := time.Now()
	j := start(t, marker, nil, "-root", root, "-uneven")
	if !j.wait(t, timeout+margin+2*time.Minute) {
		r.outcome = "hang"
		return
	}
	if left := survivors(marker, timeout+5*time.Second); len(left) > 0 {
		t.Errorf("processes %v of the job outlived it", left)
	}
	if j.err == nil {
		r.outcome, r.timeToError = "completes", "-"
		res := j.result(t)
		r.checked = fmt.Sprintf("global_step %d", res.GlobalStep)
		return
	}
	msg := strings.ReplaceAll(lastLine(j.stderr.String()), root, "ROOT")
	r.outcome = "error: " + trimProgram(msg)
	r.timeToError = j.ended.Sub(began).Round(10*time.Millisecond).String() + " from the start"
	if !strings.Contains(msg, "disagree") || !strings.Contains(msg, "rank 1") {
		t.Errorf("the error does not say that the ranks disagree, naming rank 1:\n%s", j.stderr.String())
	}
	var checked []string
	if log := findFile(root, "rank_1.log"); log != "" {
		b, _ := os.ReadFile(log)
		if l := lastLine(string(b)); strings.Contains(l, "disagree") || strings.Contains(l, "rank 0") {
			checked = append(checked, "rank 1 failed too: "+trimProgram(l))
		} else {
			t.Errorf("rank 1's log does not end with its error:\n%s", b)
		}
	}
	if p := findFile(root, "last.ckpt"); p != "" {
		checked = append(checked, "last.ckpt kept")
	}
	r.checked = strings.Join(checked, "; ")
}

// listeningPorts lists the TCP ports pid listens on (from /proc).
func listeningPorts(pid int) []int {
	inodes := map[string]bool{}
	fds, _ := filepath.Glob(fmt.Sprintf("/proc/%d/fd/*", pid))
	for _, fd := range fds {
		if l, err := os.Readlink(fd); err == nil && strings.HasPrefix(l, "socket:[") {
			inodes[strings.TrimSuffix(strings.TrimPrefix(l, "socket:["), "]")] = true
		}
	}
	var ports []int
	for _, table := range []string{"tcp", "tcp6"} {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/net/%s", pid, table))
		for _, line := range strings.Split(string(b), "\n")[1:] {
			f := strings.Fields(line)
			if len(f) < 10 || f[3] != "0A" || !inodes[f[9]] { // 0A: LISTEN
				continue
			}
			i := strings.LastIndexByte(f[1], ':')
			if p, err := strconv.ParseUint(f[1][i+1:], 16, 16); err == nil && !slices.Contains(ports, int(p)) {
				ports = append(ports, int(p))
			}
		}
	}
	return ports
}

// TestGarbageOnDataPorts: rank 0 of a torchrun-style job waits at the
// rendezvous for rank 1 with its ring data port open; a stranger connects
// to that port and sends random bytes, then rank 1 starts: the job must
// complete with the undisturbed weights.
func TestGarbageOnDataPorts(t *testing.T) {
	r := row{section: sectionPeers, fault: "a stranger sends 4 KiB of random bytes to rank 0's ring data port (its listening port besides the rendezvous)",
		phase: "rendezvous (rank 0 waiting for rank 1)", timeToError: "-"}
	defer recordRow(t, &r)
	want := baseline(t)
	marker, root, port := newMarker(t), t.TempDir(), freePort(t)
	token := hex.EncodeToString([]byte(newMarker(t)))
	r0 := torchrun(t, marker, 0, port, token, root)
	var data []int
	for deadline := time.Now().Add(2 * time.Minute); len(data) == 0; {
		for _, p := range listeningPorts(r0.cmd.Process.Pid) {
			if p != port {
				data = append(data, p)
			}
		}
		select {
		case <-r0.done:
			t.Fatalf("rank 0 ended before rank 1 joined: %v\n%s", r0.err, r0.stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("rank 0 opened no port besides the rendezvous port %d", port)
		}
		time.Sleep(20 * time.Millisecond) // polling for rank 0's listeners
	}
	var sent []string
	for _, p := range data {
		c, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)), 5*time.Second)
		if err != nil {
			sent = append(sent, fmt.Sprintf("port %d refused the connection", p))
			continue
		}
		junk := make([]byte, 4096)
		rand.Read(junk)
		c.SetWriteDeadline(time.Now().Add(5 * time.Second))
		_, err = c.Write(junk)
		defer c.Close()
		if err != nil {
			sent = append(sent, fmt.Sprintf("port %d: %v", p, err))
		} else {
			sent = append(sent, fmt.Sprintf("port %d took the bytes", p))
		}
	}
	r1 := torchrun(t, marker, 1, port, token, root)
	for i, j := range []*job{r0, r1} {
		if !j.wait(t, 5*time.Minute) {
			r.outcome = "hang"
			return
		}
		if j.err != nil {
			t.Errorf("rank %d failed after garbage on the data port (%v): %v\n%s", i, sent, j.err, j.stderr.String())
			r.outcome = fmt.Sprintf("rank %d failed: %s", i, trimProgram(strings.ReplaceAll(lastLine(j.stderr.String()), root, "ROOT")))
			r.checked = strings.Join(sent, ", ")
			return
		}
	}
	r.outcome = "the job completes"
	r.checked = strings.Join(sent, ", ") + "; "
	if got := r0.result(t).SHA256; got != want {
		t.Errorf("weights %s after garbage on the data port, undisturbed %s", got, want)
		r.checked += "OTHER weights"
	} else {
		r.checked += "weights = undisturbed run's"
	}
	if left := survivors(marker, timeout+5*time.Second); len(left) > 0 {
		t.Errorf("processes %v of the job outlived it", left)
	}
}
