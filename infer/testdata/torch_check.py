"""PyTorch side of infer's tests: builds the test's models in torch and moves
weights both ways through safetensors files written and read by hand (the
format is 8 bytes of little-endian header length, a JSON header, then the
raw little-endian bytes), so only torch is needed.

    python3 torch_check.py load ARCH PRECISION DIR
        DIR/fulgur.safetensors -> load_state_dict(strict=True);
        DIR/x.safetensors through it in eval mode -> DIR/torch_y.safetensors
    python3 torch_check.py save ARCH PRECISION DIR
        a seeded torch model (BatchNorm statistics moved off their initial
        values by a few training-mode batches) -> DIR/torch.safetensors;
        DIR/x.safetensors through it in eval mode -> DIR/torch_y.safetensors
"""
import json
import struct
import sys

import torch
import torch.nn as nn

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
        t = torch.frombuffer(bytearray(data[lo:hi]), dtype=DTYPES[e["dtype"]]) if hi > lo else torch.empty(0, dtype=DTYPES[e["dtype"]])
        out[name] = t.reshape(e["shape"]).clone()
    return out


def write(path, tensors):
    hdr, blobs, off = {}, [], 0
    for name, t in tensors.items():
        b = bytes(t.detach().contiguous().flatten().view(torch.uint8).tolist())
        hdr[name] = {"dtype": NAMES[t.dtype], "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    js = json.dumps(hdr).encode()
    js += b" " * ((8 - len(js) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(js)) + js + b"".join(blobs))


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(16, 12)
        self.fc2 = nn.Linear(12, 5)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x.flatten(1))))


class LNMLP(nn.Module):
    """16-12-5 with LayerNorm and GELU between (infer_test.go's tinyLN)."""

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(16, 12)
        self.ln = nn.LayerNorm(12)
        self.fc2 = nn.Linear(12, 5)

    def forward(self, x):
        return self.fc2(nn.functional.gelu(self.ln(self.fc1(x.flatten(1)))))


class Block(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        h = torch.relu(self.bn1(self.conv1(x)))
        h = self.bn2(self.conv2(h))
        return torch.relu(h + (self.downsample(x) if self.downsample is not None else x))


class ResNet(nn.Module):
    """nn.ResNet with Widths 4, 8, one block per stage, 5 classes."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 4, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(4)
        self.layer1 = nn.Sequential(Block(4, 4, 1))
        self.layer2 = nn.Sequential(Block(4, 8, 2))
        self.fc = nn.Linear(8, 5)

    def forward(self, x):
        h = torch.relu(self.bn1(self.conv1(x)))
        h = self.layer2(self.layer1(h))
        return self.fc(h.mean(dim=(2, 3)))


def main():
    mode, arch, precision, d = sys.argv[1:5]
    dt = torch.float64 if precision == "64" else torch.float32
    torch.manual_seed(0)
    model = {"mlp": MLP, "resnet": ResNet, "lnmlp": LNMLP}[arch]().to(dt)
    x = read(d + "/x.safetensors")["x"].to(dt)
    if mode == "load":
        model.load_state_dict(read(d + "/fulgur.safetensors"), strict=True)
    else:
        model.train()
        with torch.no_grad():
            if arch == "lnmlp":  # off LayerNorm's initial ones and zeros
                model.ln.weight.uniform_(0.5, 1.5)
                model.ln.bias.uniform_(-0.5, 0.5)
            for _ in range(3):
                model(torch.randn(x.shape, dtype=dt))
        write(d + "/torch.safetensors", model.state_dict())
    model.eval()
    with torch.no_grad():
        y = model(x)
    write(d + "/torch_y.safetensors", {"y": y})
    print("torch", torch.__version__, mode, arch, precision, "ok")


if __name__ == "__main__":
    main()
