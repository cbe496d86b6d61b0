"""flow.env: OneFlow's environment set-up. Jobflow needs none: init() is
accepted, and the engine starts when the first job is defined."""


def init():
    return True


def ctrl_port(port):
    pass


def data_port(port):
    pass


def log_dir(path):
    pass
