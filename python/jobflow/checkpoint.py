"""flow.checkpoint: variables as NumPy arrays (OneFlow 0.3's model I/O).

    vars = flow.checkpoint.get("./lenet_models_1")   # {name: ndarray}
    flow.load_variables(vars)                         # into the session
    flow.checkpoint.save("./copy")
"""
from . import _jobflow as _C


def get(path):
    """The variables of the checkpoint folder `path`: {name: numpy.ndarray}."""
    return _C.checkpoint_read(str(path))


def save(path):
    """Saves every variable of the session (as flow.train.CheckPoint().save)."""
    _C.sync_all()
    _C.checkpoint_save(str(path))


def load_variables(value_dict, ignore_mismatch=True):
    """Copies each value into the variable of the same name. Names no job has
    defined are skipped, unless ignore_mismatch is False (then an error)."""
    for name, value in value_dict.items():
        if not _C.has_variable(name):
            if ignore_mismatch:
                continue
            raise _C.Error("[load_variables] no variable named '%s'" % name)
        _C.assign(name, value.numpy() if hasattr(value, "numpy") and callable(value.numpy) else value)


def get_all_variables():
    """{name: ndarray}: a copy of every variable of the session."""
    return {name: _C.variable(name) for name in _C.variable_names()}
