// Package plot turns the metrics of a run into pictures and a report: it
// reads a metrics.csv written by the CSV logger (or collects the same rows
// in memory), draws every logged scalar against step, and against epoch where
// it is logged once per epoch, as PNG and SVG charts with gonum.org/v1/plot,
// lays several runs over each other to compare them, and writes report.md.
//
// Charts are grouped the way a person reads a run: train and validation
// loss on one chart, accuracy on another, the learning rate, memory figures,
// then one chart for each remaining scalar. Long step series are drawn raw
// in a faint line with an exponentially smoothed line over them, as
// TensorBoard does.
//
// plot owns the chart layout, the metrics.csv reader and the report format.
// It imports nothing of fulgur (callbacks and cmd/fulgur import it), so it
// must not import trainer, callbacks or strategy.
package plot
