package trainer

// The strategies fulgur ships register their names (Config.Strategy:
// "single", "dp", "ddp", "ddp_spawn", "sharded", "fsdp", "fsdp_hybrid_shard")
// with package strategy when strategy/single, strategy/dp, strategy/ddp,
// strategy/sharded and strategy/fsdp are linked. The trainer
// links them here, at its construction, so that a program that names a
// strategy needs no import of its own; the trainer's code still reaches
// strategies only through the strategy interface and its name registry.
import (
	_ "github.com/fulgur-ml/fulgur/strategy/ddp"
	_ "github.com/fulgur-ml/fulgur/strategy/dp"
	_ "github.com/fulgur-ml/fulgur/strategy/fsdp"
	_ "github.com/fulgur-ml/fulgur/strategy/sharded"
	_ "github.com/fulgur-ml/fulgur/strategy/single"
)
