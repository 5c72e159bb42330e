package models_test

import (
	"fmt"

	"github.com/fulgur-ml/fulgur/models"
)

// Blocks and Width describe the ResNet family: 3 blocks per stage is
// ResNet-20; the stages double the width. Zero fields are the resnet8
// workload's values.
func Example() {
	fmt.Println((&models.ResNet{}).HParams())
	fmt.Println((&models.ResNet{Blocks: 3, Width: 8, LR: 0.01}).HParams())
	fmt.Println((&models.MLP{Sizes: []int{784}}).Validate())
	// Output:
	// map[blocks_per_stage:1 lr:0.001 model:resnet widths:[16 32 64]]
	// map[blocks_per_stage:3 lr:0.01 model:resnet widths:[8 16 32]]
	// MLP.Sizes (-sizes) is [784]: give the input width and at least one layer, each 1 or more, such as 784,256,10
}
