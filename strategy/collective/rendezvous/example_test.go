package rendezvous_test

import (
	"context"
	"fmt"
	"net"
	"sync"

	"github.com/fulgur-ml/fulgur/strategy/collective/rendezvous"
)

// Two ranks meet and swap a small blob each (a backend would swap a shared
// memory file name or an NCCL unique id). Ranks are goroutines here; in a job
// they are processes given Rank, Size, MasterAddr and MasterPort by
// strategy/cluster and Token from FULGUR_TOKEN.
func Example() {
	ln, _ := net.Listen("tcp", "127.0.0.1:0") // rank 0's rendezvous port
	port := ln.Addr().(*net.TCPAddr).Port
	got := make([][][]byte, 2)
	var wg sync.WaitGroup
	for rank := range 2 {
		cfg := rendezvous.Config{Rank: rank, Size: 2, MasterAddr: "127.0.0.1", MasterPort: port, Token: "s3cret", BindAddr: "127.0.0.1"}
		if rank == 0 {
			cfg.Listener = ln
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			rv, err := rendezvous.Meet(context.Background(), cfg)
			if err != nil {
				fmt.Println(err)
				return
			}
			defer rv.Close()
			got[rank], err = rv.Exchange(context.Background(), []byte(fmt.Sprintf("from %d", rank)))
			if err != nil {
				fmt.Println(err)
			}
		}()
	}
	wg.Wait()
	fmt.Printf("%q %q\n", got[0], got[1])
	// Output: ["from 0" "from 1"] ["from 0" "from 1"]
}
