package callbacks_test

import (
	"fmt"

	"github.com/fulgur-ml/fulgur/callbacks"
)

// EarlyStopping's decisions on a scripted sequence of validation losses.
func ExampleEarlyStopping() {
	es, err := callbacks.NewEarlyStopping(callbacks.EarlyStoppingConfig{Monitor: "val_loss", Patience: 2, MinDelta: 0.01})
	if err != nil {
		panic(err)
	}
	for epoch, v := range []float64{0.9, 0.7, 0.695, 0.71, 0.5} {
		stop, reason := es.Update(v)
		fmt.Printf("epoch %d: val_loss %.3f, best %.3f, wait %d\n", epoch, v, es.Best(), es.Wait())
		if stop {
			fmt.Println(reason)
			break
		}
	}
	// Output:
	// epoch 0: val_loss 0.900, best 0.900, wait 0
	// epoch 1: val_loss 0.700, best 0.700, wait 0
	// epoch 2: val_loss 0.695, best 0.700, wait 1
	// epoch 3: val_loss 0.710, best 0.700, wait 2
	// monitored metric val_loss did not improve in the last 2 checks; the best was 0.7
}
