// Package strategy decides where replicas of a module live and how their
// gradients are combined: Single (one replica), and the distributed
// strategies DP, DDP, DDP-spawn and Sharded. The trainer talks to every
// strategy through the small Strategy interface and never switches on its
// type; a name registry (Lookup) serves command-line programs only.
//
// strategy may import strategy/{device, collective, cluster, launch},
// module, data, optim, nn and profiler; it must not import trainer, parse
// flags or read os.Environ directly (cluster lookups are injected).
package strategy
