// Package profiler records spans of a run: Nop (the default, free), Simple
// (a table at the end of fit). Spans are opened only by the trainer's
// dispatcher and by strategies.
//
// profiler imports nothing of fulgur.
package profiler
