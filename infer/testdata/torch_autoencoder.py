"""PyTorch side of infer's TestAutoencoderTrainsAsPyTorch: Lightning's
LitAutoEncoder, initialised by torch (seed 0) in float64 and trained with
Adam(lr=1e-3) on the batches of DIR/x.safetensors in order.

    python3 torch_autoencoder.py DIR BATCH
        -> DIR/init.safetensors (the initial state dict),
           DIR/torch_final.safetensors (the state dict after training),
           DIR/torch_losses.safetensors ("loss": the loss of each step)
"""
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

from torch_check import read, write


class LitAutoEncoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(28 * 28, 64), nn.ReLU(), nn.Linear(64, 3))
        self.decoder = nn.Sequential(nn.Linear(3, 64), nn.ReLU(), nn.Linear(64, 28 * 28))

    def training_step(self, x):
        x = x.view(x.size(0), -1)
        return F.mse_loss(self.decoder(self.encoder(x)), x)


def main():
    d, batch = sys.argv[1], int(sys.argv[2])
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = LitAutoEncoder().double()
    write(d + "/init.safetensors", model.state_dict())
    x = read(d + "/x.safetensors")["x"].double()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    losses = []
    for i in range(x.shape[0] // batch):
        opt.zero_grad()
        loss = model.training_step(x[i * batch:(i + 1) * batch])
        loss.backward()
        opt.step()
        losses.append(loss.item())
    write(d + "/torch_final.safetensors", model.state_dict())
    write(d + "/torch_losses.safetensors", {"loss": torch.tensor(losses, dtype=torch.float64)})


if __name__ == "__main__":
    main()
