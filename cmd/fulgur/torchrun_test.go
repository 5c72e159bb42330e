package main

import (
	"bytes"
	"strings"
	"testing"
)

// A torchrun command line given to fulgur run: each torchrun flag is
// answered with ours, or with what to do where we have none, every one at
// once and without the whole usage; when each has a clear replacement,
// the last line is the command to copy.
func TestRunAnswersTorchrunFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		want []string
		last string // the command to copy; "" for none
	}{
		{[]string{"--nproc_per_node", "2", "./train", "-strategy", "ddp"},
			[]string{"unknown flag -nproc_per_node: torchrun's --nproc_per_node is -nproc here: write -nproc 2", "(see fulgur run -h)"}, ""},
		{[]string{"--nproc-per-node=4", "--node_rank", "1", "--nnodes", "2", "--master_addr", "node0", "--master_port", "29400", "./train", "--max_epochs", "3"},
			[]string{"-nproc-per-node: torchrun's --nproc-per-node is -nproc here: write -nproc 4", "-node_rank: write -node-rank 1", "-master_addr: write -master-addr node0", "-master_port: write -master-port 29400"},
			"with our flags: fulgur run -nproc 4 -node-rank 1 --nnodes 2 -master-addr node0 -master-port 29400 ./train --max_epochs 3"},
		{[]string{"--standalone", "--nproc_per_node", "2", "--max_restarts", "3", "./train"},
			[]string{"-standalone: one machine is the default here", "write -max-restarts 3"},
			"with our flags: fulgur run -nproc 2 -max-restarts 3 ./train"},
		{[]string{"--rdzv_endpoint", "node0:29400", "--rdzv_backend", "c10d", "--rdzv_id", "job7", "--nnodes", "2", "./train"},
			[]string{"-rdzv_endpoint: torchrun's rendezvous endpoint is node 0's address and port here: write -master-addr node0 -master-port 29400",
				"-rdzv_backend: rank 0 of node 0 holds the rendezvous here",
				"-rdzv_id: a job is told apart by $FULGUR_TOKEN here"},
			"with our flags: fulgur run -master-addr node0 -master-port 29400 --nnodes 2 ./train"},
		// torchrun's elastic node range: no equivalent across machines.
		{[]string{"--nnodes", "1:2", "./train"}, []string{`-nnodes "1:2"`, "-nproc MIN:MAX"}, ""},
		// No count: no line to copy.
		{[]string{"--nproc_per_node", "gpu", "--node_rank", "0", "./train"}, []string{`for "gpu": give the number of ranks`}, ""},
		{[]string{"-m", "train", "--nproc_per_node", "2"}, []string{"-m: fulgur run starts a compiled program"}, ""},
		// Misspellings of ours; none clear.
		{[]string{"-nprocs", "2", "-grase", "1m", "./train"}, []string{"unknown flag -nprocs: did you mean -nproc?", "unknown flag -grase: did you mean -grace?"},
			"with our flags: fulgur run -nproc 2 -grace 1m ./train"},
		{[]string{"-no-such-flag", "./train"}, []string{"unknown flag -no-such-flag (see fulgur run -h)"}, ""},
	} {
		var stdout, stderr bytes.Buffer
		err := run(append([]string{"run"}, c.args...), &stdout, &stderr)
		if err == nil {
			t.Errorf("%q: no error", c.args)
			continue
		}
		msg := err.Error()
		for _, w := range c.want {
			if !strings.Contains(msg, w) {
				t.Errorf("%q: err = %v\nwant it to contain %s", c.args, msg, w)
			}
		}
		lines := strings.Split(msg, "\n")
		if got := lines[len(lines)-1]; c.last != "" && got != c.last {
			t.Errorf("%q: err = %v\nwant the last line %q", c.args, msg, c.last)
		}
		if c.last == "" && strings.Contains(msg, "with our flags") {
			t.Errorf("%q: err = %v\nwant no command to copy", c.args, msg)
		}
		if strings.Contains(msg, "provided but not defined") || strings.Contains(stderr.String(), "usage:") {
			t.Errorf("%q: Go's message or the whole usage: err = %v\nstderr:\n%s", c.args, msg, stderr.String())
		}
	}
}
