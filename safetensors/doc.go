// Package safetensors reads the safetensors format
// (https://github.com/huggingface/safetensors), the one file format of
// fulgur's weights: trainer's checkpoints and state dicts, infer's state
// dicts, and the state dicts PyTorch writes with
// safetensors.torch.save_file. It is the one decoder both read with:
// the framing, the header, each tensor's dtype, shape and data offsets,
// and the values of every dtype a state dict holds (F64, F32, F16, BF16
// and the integers) as float64s.
//
//	8 bytes   N, little-endian uint64: the length of the header
//	N bytes   a JSON object: for each tensor name {"dtype", "shape",
//	          "data_offsets": [begin, end]} (byte offsets into the data
//	          section), plus "__metadata__": a string-to-string map;
//	          padded with spaces
//	rest      the data section: each tensor's values, little-endian, C order
//
// Nothing in it is executable: reading it is parsing JSON and copying
// bytes. A file that is cut, corrupt or of another format (torch.save's
// pickles) is an error naming the tensor or the field at fault, never a
// panic. Writing stays with the packages that write (trainer signs its
// checkpoints as it writes them).
//
// safetensors imports nothing of fulgur, so that trainer (which may not
// import internal packages) and infer share it.
package safetensors
