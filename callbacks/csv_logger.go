package callbacks

import "github.com/fulgur-ml/fulgur/trainer"

// CSVLogger writes metrics.csv and hparams.yaml into a run directory, like
// Lightning's CSVLogger. It lives in package trainer, which adds one by
// default (trainer.Config.DisableLogger turns that off); this is the same
// type.
type CSVLogger = trainer.CSVLogger

// NewCSVLogger logs into dir, usually a run directory (VersionDir, or
// trainer.State.LogDir).
func NewCSVLogger(dir string) (*CSVLogger, error) { return trainer.NewCSVLogger(dir) }

// FormatValue writes a metric value as metrics.csv does: shortest
// round-trip decimal, "nan", "inf", "-inf" as Python writes them.
func FormatValue(v float64) string { return trainer.FormatValue(v) }

func mergeHParams(into, h map[string]any) map[string]any { return trainer.MergeHParams(into, h) }
