package safetensors_test

import (
	"encoding/binary"
	"fmt"

	"github.com/fulgur-ml/fulgur/safetensors"
)

// A file as PyTorch's safetensors.torch.save_file writes one: a half
// precision weight, read as float64s.
func Example() {
	header := `{"fc.weight":{"dtype":"F16","shape":[1,2],"data_offsets":[0,4]}}`
	b := binary.LittleEndian.AppendUint64(nil, uint64(len(header)))
	b = append(b, header...)
	b = binary.LittleEndian.AppendUint16(b, 0x3c00) // 1
	b = binary.LittleEndian.AppendUint16(b, 0xb800) // -0.5
	f, err := safetensors.Decode(b)
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, t := range f.Tensors {
		fmt.Println(t.Name, t.Dtype, t.Shape, t.Float64s())
	}
	// Output:
	// fc.weight F16 [1 2] [1 -0.5]
}
