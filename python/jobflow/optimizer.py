"""flow.optimizer: learning-rate schedules and optimizers.

    lr_scheduler = flow.optimizer.PiecewiseConstantScheduler([], [0.1])
    flow.optimizer.SGD(lr_scheduler, momentum=0).minimize(loss)

minimize() is called in a train job's body; every call of the job then runs
forward, backward and the update. Optimizer state lives in variables
("<var>-momentum", "<var>-m", "<var>-v"), so checkpoints carry it.
"""
from . import _jobflow as _C


class _Warmup:
    def __init__(self, steps, start_multiplier):
        self.steps = int(steps)
        self.start_multiplier = float(start_multiplier)

    def _wrap(self, sched):
        return _C.linear_warmup_scheduler(sched, self.steps, self.start_multiplier)


class warmup:
    """flow.optimizer.warmup.linear(steps, start_multiplier)."""

    @staticmethod
    def linear(steps, start_multiplier):
        return _Warmup(steps, start_multiplier)


class LrScheduler:
    def __init__(self, sched, warmup=None):
        self._sched = warmup._wrap(sched) if warmup is not None else sched

    def lr(self, step):
        """The rate at step `step` (from 0)."""
        return self._sched.lr(int(step))

    def __repr__(self):
        return repr(self._sched)


class PiecewiseConstantScheduler(LrScheduler):
    """values[i] for boundaries[i-1] <= step < boundaries[i]."""

    def __init__(self, boundaries, values, warmup=None):
        super().__init__(_C.piecewise_constant_scheduler([int(b) for b in boundaries], [float(v) for v in values]),
                         warmup)


class PiecewiseScalingScheduler(LrScheduler):
    """base_lr, then base_lr * scale[i] from boundaries[i] on (a number:
    scale ** (i + 1))."""

    def __init__(self, base_lr, boundaries, scale, warmup=None):
        boundaries = [int(b) for b in boundaries]
        if isinstance(scale, (int, float)):
            scale = [float(scale) ** (i + 1) for i in range(len(boundaries))]
        values = [float(base_lr)] + [float(base_lr) * float(s) for s in scale]
        super().__init__(_C.piecewise_constant_scheduler(boundaries, values), warmup)


class CosineScheduler(LrScheduler):
    """base_lr * (alpha + (1 - alpha) * (1 + cos(pi * step / steps)) / 2)."""

    def __init__(self, base_lr, steps, alpha=0.0, warmup=None):
        super().__init__(_C.cosine_scheduler(float(base_lr), int(steps), float(alpha)), warmup)


def _schedule(lr_scheduler):
    if isinstance(lr_scheduler, LrScheduler):
        return lr_scheduler._sched
    if isinstance(lr_scheduler, (int, float)):
        return _C.piecewise_constant_scheduler([], [float(lr_scheduler)])
    raise _C.Error("[optimizer] lr_scheduler must be a flow.optimizer scheduler or a number, got %s"
                   % type(lr_scheduler).__name__)


class Optimizer:
    def minimize(self, loss):
        """Marks `loss` (its mean when not a scalar) as the train job's objective."""
        self._opt.minimize(loss)


class SGD(Optimizer):
    """v = momentum * v - lr * g; w += v (momentum 0: w -= lr * g)."""

    def __init__(self, lr_scheduler, loss_scale_factor=None, momentum=0.9, grad_clipping=None,
                 train_step_lbn=None, variables=None):
        if grad_clipping is not None:
            raise _C.Error("[optimizer.SGD] grad_clipping is not supported")
        self._opt = _C.sgd(_schedule(lr_scheduler), float(momentum))


class Adam(Optimizer):
    """Adam, always with bias correction."""

    def __init__(self, lr_scheduler, beta1=0.9, beta2=0.999, epsilon=1e-8, do_bias_correction=True,
                 loss_scale_factor=None, grad_clipping=None, train_step_lbn=None, variables=None):
        if grad_clipping is not None:
            raise _C.Error("[optimizer.Adam] grad_clipping is not supported")
        self._opt = _C.adam(_schedule(lr_scheduler), float(beta1), float(beta2), float(epsilon))
