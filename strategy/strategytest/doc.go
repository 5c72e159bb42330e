// Package strategytest is the conformance suite every strategy passes:
//
//	func TestDDP(t *testing.T) { strategytest.RunAll(t, newDDPRanks) }
//
// RunAll checks that N replicas with per-replica batch b, after K steps,
// hold the parameters one device reaches with batch N·b (within a stated
// float32 tolerance), that every process ends bit-identical, that gradient
// accumulation, clipping, evaluation, metric reduction, barriers and samplers
// behave, and that a strategy broadcasts rank 0's initial parameters. It also
// exports the small module and data the suite uses (MLP, Regression) and the
// helpers that drive several in-process ranks at once (Each, SetupAll).
//
// strategytest may import strategy, module, data, optim, the inproc
// collective and fakedevice; it must not import trainer.
package strategytest
