// Package strategytest is the conformance suite every strategy passes:
//
//	func TestDDP(t *testing.T) { strategytest.RunAll(t, newDDPRanks) }
//
// RunAll checks that N replicas with per-replica batch b, after K steps,
// hold the parameters one device reaches with batch N·b (within a stated
// float32 tolerance), that every process ends bit-identical, that gradient
// accumulation, clipping, evaluation, metric reduction, barriers and samplers
// behave, that a strategy broadcasts rank 0's initial parameters, and that
// TrainOptions.BeforeBackward runs between the forward and the backward
// pass (BeforeBackward, also run alone by strategies holding no whole
// store). It also exports the small modules and data the suite uses (MLP;
// Tapped, which counts its gradient ops; Regression) and the helpers that
// make and drive several in-process ranks at once (Ranks, Each, SetupAll),
// and LiveHeap, the live heap that memory tests measure.
//
// strategytest may import strategy, module, data, optim, the collective and
// device interfaces, the inproc collective and fakedevice; it must not
// import trainer.
package strategytest
