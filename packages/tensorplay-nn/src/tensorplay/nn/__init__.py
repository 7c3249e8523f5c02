"""Modules, layers and losses (distribution ``tensorplay-nn``). See ``docs/nn.md``."""

from __future__ import annotations

# First: ImportError with the fix if `tensorplay` is PyPI's unrelated package, not our core
import tensorplay.utils._require_core as _require_core
from tensorplay.nn import functional, init, utils
from tensorplay.nn.modules import (
    Module,
    ModuleDict,
    ModuleList,
    ParameterDict,
    ParameterList,
    Sequential,
)
from tensorplay.nn.modules.activation import (
    GELU,
    LeakyReLU,
    LogSoftmax,
    ReLU,
    Sigmoid,
    SiLU,
    Softmax,
    Tanh,
)
from tensorplay.nn.modules.activation_attention import MultiheadAttention
from tensorplay.nn.modules.batchnorm import BatchNorm1d, BatchNorm2d, BatchNorm3d
from tensorplay.nn.modules.conv import Conv1d, Conv2d, ConvTranspose1d, ConvTranspose2d
from tensorplay.nn.modules.dropout import Dropout
from tensorplay.nn.modules.flatten import Flatten
from tensorplay.nn.modules.linear import Bilinear, Identity, Linear
from tensorplay.nn.modules.loss import (
    BCELoss,
    BCEWithLogitsLoss,
    CrossEntropyLoss,
    L1Loss,
    MSELoss,
    NLLLoss,
)
from tensorplay.nn.modules.normalization import GroupNorm, LayerNorm, RMSNorm
from tensorplay.nn.modules.pooling import AdaptiveAvgPool2d, AvgPool2d, MaxPool2d
from tensorplay.nn.modules.sparse import Embedding
from tensorplay.nn.parameter import Buffer, Parameter

__all__ = [
    "functional",
    "init",
    "utils",
    "Module",
    "Sequential",
    "ModuleList",
    "ModuleDict",
    "ParameterList",
    "ParameterDict",
    "Parameter",
    "Buffer",
    "Identity",
    "Linear",
    "ReLU",
    "GELU",
    "SiLU",
    "Tanh",
    "Sigmoid",
    "Softmax",
    "LogSoftmax",
    "LeakyReLU",
    "Dropout",
    "Flatten",
    "Embedding",
    "LayerNorm",
    "GroupNorm",
    "RMSNorm",
    "BatchNorm1d",
    "BatchNorm2d",
    "BatchNorm3d",
    "Bilinear",
    "MultiheadAttention",
    "Conv1d",
    "Conv2d",
    "ConvTranspose1d",
    "ConvTranspose2d",
    "MaxPool2d",
    "AvgPool2d",
    "AdaptiveAvgPool2d",
    "MSELoss",
    "L1Loss",
    "CrossEntropyLoss",
    "NLLLoss",
    "BCELoss",
    "BCEWithLogitsLoss",
]
