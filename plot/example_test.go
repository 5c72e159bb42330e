package plot_test

import (
	"fmt"
	"strings"

	"github.com/fulgur-ml/fulgur/plot"
)

// A metrics.csv as the CSV logger writes it: step metrics every few steps,
// epoch metrics at each epoch end, empty cells for what a row did not log.
func Example() {
	csv := `epoch,step,lr,train_loss_step,train_loss_epoch,val_loss,val_acc
0,50,0.001,1.20,,,
0,100,0.001,0.80,,,
0,100,,,0.95,,
0,100,,,,0.70,0.74
1,150,0.001,0.60,,,
1,200,0.001,0.50,,,
1,200,,,0.55,,
1,200,,,,0.52,0.81
`
	h, err := plot.ReadCSV(strings.NewReader(csv), "metrics.csv")
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, c := range plot.Layout(h) {
		fmt.Printf("%-15s %-6s %v\n", c.Name, c.X, c.Keys)
	}
	for _, s := range h.Summaries() {
		if s.Goal != plot.NoGoal {
			fmt.Printf("%s: final %g, best %g at step %d\n", s.Key, s.Final, s.Best, s.BestStep)
		}
	}
	// Output:
	// loss            step   [train_loss_epoch train_loss_step val_loss]
	// loss_epoch      epoch  [train_loss_epoch val_loss]
	// accuracy        step   [val_acc]
	// accuracy_epoch  epoch  [val_acc]
	// lr              step   [lr]
	// train_loss_epoch: final 0.55, best 0.55 at step 200
	// train_loss_step: final 0.5, best 0.5 at step 200
	// val_acc: final 0.81, best 0.81 at step 200
	// val_loss: final 0.52, best 0.52 at step 200
}
