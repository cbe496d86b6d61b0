"""flow.config: OneFlow's environment settings that the seeds call.

Jobflow runs each job on one device (the CPU, or the GPU where ops are
placed there and a CUDA backend is present), so these are recorded and
otherwise have no effect; gpu_device_num(n) accepts n >= 0.
"""
from . import _jobflow as _C

_settings = {"gpu_device_num": 1, "cpu_device_num": 1, "machine_num": 1, "debug_mode": False}


def gpu_device_num(n):
    if int(n) < 0:
        raise _C.Error("[config.gpu_device_num] must be >= 0, got %d" % int(n))
    _settings["gpu_device_num"] = int(n)


def cpu_device_num(n):
    _settings["cpu_device_num"] = int(n)


def machine_num(n):
    _settings["machine_num"] = int(n)


def enable_debug_mode(enabled=True):
    _settings["debug_mode"] = bool(enabled)


def enable_legacy_model_io(enabled=True):
    pass


def enable_model_io_v2(enabled=True):
    pass


def settings():
    return dict(_settings)
