// Package profiler records spans of a run:
//
//   - Nop, the default: a span costs an interface call and a nil check;
//   - Simple: a table at the end of fit (action, calls, mean, total, share
//     of the fit span), of this process's spans: after an elastic restart,
//     of the last attempt only;
//   - Advanced: the Simple table plus pprof CPU and heap profiles per stage
//     (fit, validate, test, predict), CPU samples labelled action=<span>;
//   - Timeline: a Chrome trace-event JSON file per rank, one process per
//     rank and one thread per track ("main", and the tracks strategies open
//     with StartTrack for communication goroutines), merged on rank 0 into
//     one file that Perfetto opens; an elastic restart writes it again, for
//     its own attempt.
//
// Spans are opened only by the trainer's dispatcher and by strategies.
//
// profiler imports nothing of fulgur.
package profiler
