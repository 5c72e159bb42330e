package launch_test

import (
	"fmt"

	"github.com/fulgur-ml/fulgur/strategy/launch"
)

// RankEnv is what a self-launched rank finds in its environment: the
// torchrun-style variables strategy/cluster reads, and the shared token.
func ExampleLocal_RankEnv() {
	l := launch.Local{World: 2, MasterPort: 29500, Token: "3f2a", Launcher: "ddp"}
	for _, kv := range l.RankEnv(1) {
		fmt.Println(kv)
	}
	// Output:
	// RANK=1
	// WORLD_SIZE=2
	// LOCAL_RANK=1
	// LOCAL_WORLD_SIZE=2
	// NODE_RANK=0
	// MASTER_ADDR=127.0.0.1
	// MASTER_PORT=29500
	// FULGUR_TOKEN=3f2a
	// FULGUR_LAUNCHER=ddp
}
