"""torchvision imports through the compat helper on the CPU torch wheel."""

from pipeline.tvcompat import import_torchvision


def test_import_torchvision_and_transforms_work():
    tv = import_torchvision()
    import torch

    t = tv.transforms.Normalize((0.5,), (0.5,))(torch.ones(1, 2, 2))
    assert torch.allclose(t, torch.ones(1, 2, 2))
    assert hasattr(tv.datasets, "MNIST") and hasattr(tv.datasets, "FashionMNIST")
