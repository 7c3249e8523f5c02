"""Optimisers and learning-rate schedules (distribution ``tensorplay-nn``). See
``docs/nn.md``."""

from __future__ import annotations

# First: ImportError with the fix if `tensorplay` is PyPI's unrelated package, not our core
import tensorplay.utils._require_core as _require_core
from tensorplay.optim import lr_scheduler
from tensorplay.optim.adagrad import Adagrad
from tensorplay.optim.adam import Adam
from tensorplay.optim.adamw import AdamW
from tensorplay.optim.optimizer import Optimizer
from tensorplay.optim.rmsprop import RMSprop
from tensorplay.optim.sgd import SGD

__all__ = ["Optimizer", "SGD", "Adam", "AdamW", "RMSprop", "Adagrad", "lr_scheduler"]
