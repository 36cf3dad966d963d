"""Import torchvision on the CPU torch wheel.

The registry's torchvision 0.28.0 is a CUDA build: its ``_C`` extension cannot load against the CPU
torch, and ``import torchvision`` then dies registering fake kernels for ``torchvision::nms``. We
define those two operator schemas ourselves and import again. Where ``_C`` loads (CUDA torch) this
is a no-op. Afterwards datasets, transforms, models and utils work; ``torchvision.ops`` and the
``torchvision.io`` decoders do not. Import torchvision only through :func:`import_torchvision`.
"""

from __future__ import annotations

import sys
from types import ModuleType

import torch

_LIBRARY: torch.library.Library | None = None  # kept alive: dropping it unregisters the schemas


def import_torchvision() -> ModuleType:
    global _LIBRARY
    try:
        import torchvision

        return torchvision
    except RuntimeError as exc:
        if "torchvision::" not in str(exc):
            raise
    for name in [m for m in sys.modules if m == "torchvision" or m.startswith("torchvision.")]:
        del sys.modules[name]
    if _LIBRARY is None:
        _LIBRARY = torch.library.Library("torchvision", "DEF")
        _LIBRARY.define("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
        _LIBRARY.define("qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    import torchvision

    return torchvision
