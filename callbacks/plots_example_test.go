package callbacks_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/fulgur-ml/fulgur/callbacks"
	"github.com/fulgur-ml/fulgur/plot"
	"github.com/fulgur-ml/fulgur/trainer"
)

// Plots reads the CSVLogger's metrics.csv at the end of Fit; here the
// trainer's calls are made by hand.
func ExamplePlots() {
	root, err := os.MkdirTemp("", "plots-example")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(root)
	dir, _ := callbacks.VersionDir(root, "")
	csvLog, _ := callbacks.NewCSVLogger(dir)
	for step := 10; step <= 100; step += 10 {
		csvLog.LogMetrics(step, map[string]float64{"train_loss": 2 / float64(step), "epoch": float64((step - 1) / 50)})
	}
	csvLog.LogMetrics(50, map[string]float64{"val_loss": 0.06, "val_acc": 0.8, "epoch": 0})
	csvLog.LogMetrics(100, map[string]float64{"val_loss": 0.03, "val_acc": 0.9, "epoch": 1})
	csvLog.Finalize("success")

	plots, err := callbacks.NewPlots(callbacks.PlotsConfig{Dir: dir, Options: plot.Options{Formats: []string{"png"}}})
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := plots.OnFitEnd(context.Background(), &trainer.State{IsGlobalZero: true, WorldSize: 1}); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(plots.Files())
	_, err = os.Stat(plots.ReportPath())
	fmt.Println(filepath.Base(plots.ReportPath()), err == nil)
	// Output:
	// [loss.png loss_epoch.png accuracy.png accuracy_epoch.png]
	// report.md true
}
