package nn_test

import (
	"fmt"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/fulgur-ml/fulgur/module"
	"github.com/fulgur-ml/fulgur/nn"
)

// A module declares resnet8 once; every graph it builds (training here)
// shares the parameter store.
func Example() {
	b := module.NewBuilder(tensor.Float32)
	net := nn.NewResNet(b, nn.ResNetConfig{}) // resnet8 for 1x28x28 images, 10 classes
	specs, _ := b.Specs()
	store, _ := module.NewStore(specs, tensor.Float32, 1)
	// 23 layers: stem conv and BN, 3 blocks of (block, 2 convs, 2 BNs), 2
	// shortcut layers in each of the last two blocks, pooling, classifier.
	fmt.Println("parameters:", store.NumParams(), "layers:", len(b.Layers()))

	g := G.NewGraph()
	s := module.NewStep(g, module.Train, store, 2, []module.StepInput{{Name: "x", Shape: []int{1, 28, 28}}, {Name: "y"}}, 1)
	logits := net.Forward(s, s.Input("x"))
	loss := nn.CrossEntropy(logits, s.Input("y"))
	fmt.Println("logits:", logits.Shape(), "loss is scalar:", loss.IsScalar())
	// Output:
	// parameters: 77754 layers: 23
	// logits: (2, 10) loss is scalar: true
}
