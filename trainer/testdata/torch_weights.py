"""PyTorch side of trainer's fine-tuning test: reads DIR/batch.safetensors
(x [64, 4], y [64]), writes a seeded linear model's state dict in float64 as
DIR/torch.safetensors (written by hand: 8 bytes of little-endian header
length, a JSON header, the raw bytes; only torch is needed), and prints the
mean squared error of those weights on the batch. The same weights are also
written with a wrapper's prefix, from the state_dict() of the wrapper itself:
DIR/torch_ddp.safetensors from torch.nn.DataParallel (names "module.w", as
DistributedDataParallel's; DataParallel needs no process group) and
DIR/torch_lit.safetensors from a module holding the net as self.model (names
"model.w", as a LightningModule's).

    python3 torch_weights.py DIR
"""
import json
import struct
import sys

import torch

DTYPES = {"F64": torch.float64, "F32": torch.float32, "I64": torch.int64}
NAMES = {v: k for k, v in DTYPES.items()}


def read(path):
    with open(path, "rb") as f:
        raw = f.read()
    n, = struct.unpack("<Q", raw[:8])
    hdr = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    out = {}
    for name, e in hdr.items():
        if name == "__metadata__":
            continue
        lo, hi = e["data_offsets"]
        out[name] = torch.frombuffer(bytearray(data[lo:hi]), dtype=DTYPES[e["dtype"]]).reshape(e["shape"]).clone()
    return out


def write(path, tensors):
    hdr, blobs, off = {"__metadata__": {"format": "pt"}}, [], 0
    for name, t in tensors.items():
        b = bytes(t.detach().contiguous().flatten().view(torch.uint8).tolist())
        hdr[name] = {"dtype": NAMES[t.dtype], "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    js = json.dumps(hdr).encode()
    js += b" " * ((8 - len(js) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(js)) + js + b"".join(blobs))


class LinReg(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(4, 1, dtype=torch.float64))
        self.b = torch.nn.Parameter(torch.randn(1, dtype=torch.float64))

    def forward(self, x):
        return (x @ self.w + self.b).reshape(-1)


class Wrapper(torch.nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model


def main():
    d = sys.argv[1]
    torch.manual_seed(0)
    m = LinReg()
    batch = read(d + "/batch.safetensors")
    x, y = batch["x"].double(), batch["y"].double()
    loss = torch.mean((m(x) - y) ** 2)
    write(d + "/torch.safetensors", m.state_dict())
    write(d + "/torch_ddp.safetensors", torch.nn.DataParallel(m).state_dict())
    write(d + "/torch_lit.safetensors", Wrapper(m).state_dict())
    print(repr(loss.item()))


main()
