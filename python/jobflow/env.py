"""flow.env: OneFlow's environment set-up. Jobflow needs none: init() is
accepted, and the engine starts when the first job is defined. Also what
this CPU gives the engine: cpu_isa(), bf16_fallback()."""

from . import _jobflow


def init():
    return True


def ctrl_port(port):
    pass


def data_port(port):
    pass


def log_dir(path):
    pass


def cpu_isa():
    """The instruction set the engine's CPU kernels use here, in words, with
    its bfloat16 support: "AVX-512 with bfloat16 dot products, no AMX
    (avx512_core_bf16)" (jobflow::cpu_isa())."""
    return _jobflow.cpu_isa()


def bf16_fallback():
    """Why a job with enable_auto_mixed_precision(True) computes in float32
    on this CPU, in words ("this CPU has neither AMX nor AVX512_BF16
    (avx2)"); "" where it computes in bfloat16 (docs/user-guide/
    job-functions.md, "bf16: which CPUs"). Raises flow.Error when
    JOBFLOW_BF16 is neither auto nor always."""
    return _jobflow.bf16_fallback()
