"""flow.scope: placement scopes and logical views.

    with flow.scope.placement("gpu", "0:0"):
        logits = lenet(images)

places the ops defined inside on that device ("cpu" or "gpu"; "cuda" reads
as "gpu"). Without a usable CUDA backend, "gpu" ops run on the CPU (one
line on stderr says so). Views are accepted (one device: both are the same).
"""
from . import _jobflow as _C


class placement:
    def __init__(self, device_tag, machine_device_ids="0:0", hierarchy=None):
        if isinstance(machine_device_ids, (list, tuple)):
            machine_device_ids = ",".join(str(i) for i in machine_device_ids)
        self.device_tag = str(device_tag)
        self.machine_device_ids = str(machine_device_ids)

    def __enter__(self):
        _C.push_placement(self.device_tag, self.machine_device_ids)
        return self

    def __exit__(self, *exc):
        _C.pop_placement()
        return False


fixed_placement = placement


class _View:
    def __init__(self, name):
        self.name = name

    def __repr__(self):
        return "flow.scope.%s_view()" % self.name


def mirrored_view():
    return _View("mirrored")


def consistent_view():
    return _View("consistent")
