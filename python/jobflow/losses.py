"""flow.losses: the older API's objective (OneFlow 0.1).

In an @flow.function train job, flow.losses.add_loss(loss) makes `loss` the
objective; the optimizer comes from the config (train.primary_lr,
train.model_update_conf). New code calls flow.optimizer.SGD(...).minimize(loss).
"""
from . import _job


def add_loss(loss):
    _job.current_definition("losses.add_loss").losses.append(loss)
