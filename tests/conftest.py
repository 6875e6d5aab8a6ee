"""Test-wide settings: one torch thread (the models are small; threads only contend)."""

import torch

torch.set_num_threads(1)
