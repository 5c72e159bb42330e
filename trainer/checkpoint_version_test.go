package trainer

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"gorgonia.org/tensor"

	"github.com/fulgur-ml/fulgur/module"
	"github.com/fulgur-ml/fulgur/strategy"
)

// A format_version 1 checkpoint stored Linear weights [in, out]; it cannot
// say which 2-D tensors are Linear weights (a square one looks the same
// either way), so its 2-D tensors are refused, naming each, rather than
// loaded transposed. Version 2 files load.
func TestCheckpointVersion1Refused(t *testing.T) {
	specs := []module.Spec{{Name: "fc.weight", Shape: []int{3, 3}}, {Name: "fc.bias", Shape: []int{3}}}
	st, err := module.NewStore(specs, tensor.Float32, 1)
	if err != nil {
		t.Fatal(err)
	}
	file := func(version string) []byte {
		var ts []stTensor
		for _, e := range st.Entries() {
			ts = append(ts, stTensor{Name: e.Name, Dtype: "F32", Shape: e.Shape, Data: f32Bytes(st.Data32()[e.Offset : e.Offset+e.Len])})
		}
		tj, _ := json.Marshal(ckptTrainer{})
		meta := map[string]string{keyFormat: CheckpointFormat, keyVersion: version, keyTrainer: string(tj)}
		sums := map[string]string{}
		for _, tn := range ts {
			sums["tensor:"+tn.Name] = tensorSum(tn)
		}
		for k, v := range meta {
			sums["meta:"+k] = metaSum(k, v)
		}
		sj, _ := json.Marshal(sums)
		meta[keySums] = string(sj)
		var b bytes.Buffer
		if err := encodeSafetensors(&b, ts, meta); err != nil {
			t.Fatal(err)
		}
		return b.Bytes()
	}
	c, err := parseCheckpoint(file("1"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.stateDict(tensor.Float32, "Precision")
	if err == nil || !strings.Contains(err.Error(), `tensor "fc.weight" [3 3]: the checkpoint is format_version 1, which stored Linear weights [in, out]`) || strings.Contains(err.Error(), "fc.bias") {
		t.Errorf("version 1: %v", err)
	}
	c, err = parseCheckpoint(file("2"))
	if err != nil {
		t.Fatal(err)
	}
	sd, err := c.stateDict(tensor.Float32, "Precision")
	if err != nil {
		t.Fatalf("version 2: %v", err)
	}
	if err := strategy.LoadStore(sd, st); err != nil {
		t.Errorf("version 2: %v", err)
	}
}
