"""Offline IQL over the joint actions: config, the single-file algorithm, and its controller (`iql:PATH`).

Importing this package registers the `iql` controller.
"""

from esper.simic.iql.config import RESUMABLE_FIELDS, IQLConfig
from esper.simic.iql.controller import IQLPolicy
from esper.simic.iql.iql import EPOCH_METRICS, IQL_FORMAT, FeatureScaler, IQLLearner, load_iql_checkpoint, train_iql

__all__ = [
    "EPOCH_METRICS",
    "IQL_FORMAT",
    "RESUMABLE_FIELDS",
    "FeatureScaler",
    "IQLConfig",
    "IQLLearner",
    "IQLPolicy",
    "load_iql_checkpoint",
    "train_iql",
]
