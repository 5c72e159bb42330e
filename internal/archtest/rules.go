package archtest

// Rules is the layering of DESIGN.md's "Layers" section and the packages'
// doc.go, as imports a package must not make. It is the one table the
// architecture test checks; a change to the layering changes it and the docs
// it cites together.
var Rules = []Rule{
	{
		From:   []string{"nn/...", "optim/..."},
		Forbid: []string{"trainer/...", "strategy/...", "callbacks/...", "cli/..."},
		Says:   "nn and optim never import trainer, strategy, callbacks or cli",
		Doc:    "DESIGN.md Layers; nn/doc.go, optim/doc.go",
	},
	{
		From:   []string{"module/...", "data/..."},
		Forbid: []string{"trainer/...", "strategy/...", "callbacks/...", "cli/..."},
		Says:   "module and data import nothing of trainer or strategy",
		Doc:    "DESIGN.md Layers; module/doc.go, data/doc.go",
	},
	{
		From:   []string{"profiler/...", "plot/..."},
		Forbid: []string{"trainer/...", "strategy/...", "callbacks/...", "cli/..."},
		Says:   "profiler and plot sit below trainer, strategy and callbacks",
		Doc:    "profiler/doc.go, plot/doc.go",
	},
	{
		From:   []string{"strategy"},
		Forbid: []string{"strategy/collective/*/...", "strategy/device/*/...", "strategy/*/...", "internal/..."},
		Allow:  []string{"strategy/collective", "strategy/device", "strategy/cluster/...", "strategy/launch/..."},
		Says:   "the strategy interface package imports no backend: no strategy/collective/<backend>, no strategy/<name>, no engine or BLAS past the device layer",
		Doc:    "DESIGN.md Layers; issue 14 item 2; strategy/doc.go",
	},
	{
		From:   []string{"strategy/*/..."},
		Unless: []string{"strategy/device/...", "strategy/collective/...", "strategy/cluster/...", "strategy/launch/...", "strategy/strategytest/..."},
		Forbid: []string{"strategy/*/...", "internal/engine/...", "trainer/...", "callbacks/...", "cli/..."},
		Allow:  []string{"strategy/$1/...", "strategy/device/...", "strategy/collective/...", "strategy/cluster/...", "strategy/launch/...", "strategy/replica"},
		Says:   "strategy/<name> imports strategy, strategy/replica (the implementations' shared machinery) and strategy/{device,collective,cluster,launch}, never another strategy, the engine past the device layer, or the layers above",
		Doc:    "DESIGN.md Layers; strategy/doc.go",
	},
	{
		From:   []string{"strategy/collective/*/..."},
		Forbid: []string{"strategy/collective/*/..."},
		Allow:  []string{"strategy/collective/$1/...", "strategy/collective/rendezvous", "strategy/collective/wire"},
		Says:   "collective backends do not import each other (they share strategy/collective/rendezvous)",
		Doc:    "strategy/collective/doc.go; issue 14 item 2",
	},
	{
		From:   []string{"strategy/collective/..."},
		Forbid: []string{"strategy", "strategy/launch/...", "trainer/...", "callbacks/...", "cli/..."},
		Says:   "collectives must not import trainer, strategy or strategy/launch",
		Doc:    "strategy/collective/doc.go",
	},
	{
		From:   []string{"strategy/device/...", "strategy/cluster/...", "strategy/launch/..."},
		Forbid: []string{"strategy", "strategy/collective/...", "trainer/...", "callbacks/...", "cli/..."},
		Says:   "device, cluster and launch know nothing of strategies, collectives or training",
		Doc:    "strategy/device/doc.go, strategy/cluster/doc.go, strategy/launch/doc.go",
	},
	{
		From:   []string{"strategy/cluster/..."},
		Forbid: []string{"net"},
		Says:   "cluster reads where ranks come from; it must not open sockets",
		Doc:    "DESIGN.md package table",
	},
	{
		From:   []string{"trainer/..."},
		Forbid: []string{"callbacks/...", "cli/...", "strategy/*/...", "internal/..."},
		Allow:  []string{"strategy/collective", "strategy/device", "strategy/cluster/...", "strategy/ddp", "strategy/dp", "strategy/fsdp", "strategy/sharded", "strategy/single", "internal/typednil"},
		Says:   "trainer imports module, data, optim, nn, profiler, blas and strategy; of the implementations only the registering packages, blank, so that Config.Strategy names resolve (trainer/strategies.go); of internal/ only typednil, the typed-nil test it shares with data and infer",
		Doc:    "DESIGN.md Layers; issue 14 item 2; trainer/doc.go",
	},
	{
		From:   []string{"callbacks/..."},
		Forbid: []string{"cli/...", "strategy/*/..."},
		Says:   "callbacks sit below cli and see strategies only through the trainer",
		Doc:    "DESIGN.md Layers; callbacks/doc.go",
	},
	{
		From:   []string{"internal/..."},
		Forbid: []string{"trainer/...", "callbacks/...", "cli/...", "strategy/...", "module/...", "nn/...", "optim/..."},
		Says:   "internal/ holds only the lowest layers",
		Doc:    "DESIGN.md Layers",
	},
	{
		From:   []string{"*/..."},
		Unless: []string{"strategy/collective/..."},
		Forbid: []string{"strategy/collective/wire"},
		Says:   "the frame format is the collectives' own: only strategy/collective/... imports it (public only so that programs link no internal package)",
		Doc:    "strategy/collective/wire/wire.go",
	},
	{
		From:   []string{"safetensors/..."},
		Forbid: []string{"trainer/...", "infer/...", "strategy/...", "internal/...", "module/...", "nn/...", "data/...", "callbacks/...", "cli/..."},
		Says:   "safetensors is the file format alone, below every layer that reads weights: trainer and infer both read with it",
		Doc:    "safetensors/doc.go",
	},
	{
		From:   []string{"examples/...", "cmd/..."},
		Forbid: []string{"internal/..."},
		Says:   "examples and cmd import public packages only, so a user can copy them into their own module",
		Doc:    "DESIGN.md Layers; issue 14 item 3",
	},
}
