"""flow.train.CheckPoint(): init, save and load the session's variables.

save(path) waits for every call in flight (callbacks included), then writes
OneFlow's layout atomically: path/<variable>/out, path/<variable>/meta,
path/snapshot_done. An existing checkpoint at `path` is replaced.
"""
from . import _jobflow as _C


class CheckPoint:
    def init(self):
        """(Re)initializes every variable from its initializer."""
        _C.checkpoint_init()

    def save(self, path):
        _C.sync_all()
        _C.checkpoint_save(str(path))

    def load(self, path):
        """Loads every variable of the checkpoint at `path` (also OneFlow 0.2/0.3
        folders without meta files)."""
        _C.sync_all()
        _C.checkpoint_load(str(path))
