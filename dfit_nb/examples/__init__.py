"""JAX programs to analyse, shared by the tests, the notebooks and the CLI.

>>> from dfit_nb import examples
>>> sorted(examples.names())
['bert_block', 'cnn', 'encoder', 'mlp', 'scan_model']
>>> fn, args = examples.get("mlp").build()
>>> fn(*args).shape
(8, 10)
"""

from __future__ import annotations

from ._registry import Example as Example
from ._registry import get as get
from ._registry import names as names
from ._registry import register as register
from . import cnn as cnn
from . import encoder as encoder
from . import mlp as mlp
from . import resnet18 as resnet18
from . import scan_model as scan_model

__all__ = ("Example", "cnn", "encoder", "get", "mlp", "names", "register", "resnet18", "scan_model")
