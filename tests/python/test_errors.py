# Errors: C++ exceptions become jobflow.Error with the same message; a
# Python callback that raises does not kill the process (its exception is
# raised again by the job's next call or sync()); Ctrl-C interrupts sync().
import os
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import jobflow as flow
import jobflow.typing as tp


def callback_job(name="cb_job"):
    @flow.global_function(function_config=flow.function_config().name(name))
    def job(x: tp.Numpy.Placeholder((3,))) -> tp.Callback[tp.Numpy]:
        return x * 2.0

    return job


ONES = np.ones(3, np.float32)


def test_error_is_a_runtime_error_with_the_engine_message():
    assert issubclass(flow.Error, RuntimeError)

    @flow.global_function(function_config=flow.function_config().name("gather_job"))
    def job(x: tp.Numpy.Placeholder((2,))) -> tp.Numpy:
        return flow.gather(x, flow.constant(np.array([7], np.int32), dtype=flow.int32))

    with pytest.raises(flow.Error, match=r"^\[gather\] .*7"):
        job(np.ones(2, np.float32))


def test_callbacks_run_in_call_order_with_arrays():
    job = callback_job()
    got = []
    for i in range(50):
        job(np.full(3, i, np.float32))(lambda r: got.append(r))
    job.sync()
    assert all(isinstance(r, np.ndarray) and r.dtype == np.float32 for r in got)
    assert [float(r[0]) for r in got] == [2.0 * i for i in range(50)]


def test_a_raising_callback_is_raised_at_the_next_call():
    job = callback_job("raise_next_call")

    def bad(r):
        raise ValueError("boom in the callback")

    job(ONES)(bad)
    with pytest.raises(ValueError, match="boom in the callback"):
        for _ in range(100):  # raised by the first call that finds it stored
            job(ONES)(lambda r: None)
    job.sync()  # raised once: the job keeps working
    got = []
    job(ONES)(got.append)
    job.sync()
    assert len(got) == 1


def test_a_raising_callback_is_raised_at_sync():
    job = callback_job("raise_at_sync")
    job(ONES)(lambda r: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        job.sync()
    job.sync()


def test_an_asynchronous_engine_error_is_raised_at_sync():
    @flow.global_function(function_config=flow.function_config().name("async_gather"))
    def job(x: tp.Numpy.Placeholder((2,))) -> tp.Callback[tp.Numpy]:
        return flow.gather(x, flow.constant(np.array([7], np.int32), dtype=flow.int32))

    called = []
    job(np.ones(2, np.float32))(called.append)
    with pytest.raises(flow.Error, match=r"\[gather\]"):
        job.sync()
    assert called == []  # a failed step calls no callback


def test_a_callback_may_call_another_job():
    @flow.global_function()
    def double(x: tp.Numpy.Placeholder((3,))) -> tp.Numpy:
        return x * 2.0

    job = callback_job("calls_another")
    got = []
    job(ONES)(lambda r: got.append(double(r)))
    job.sync()
    np.testing.assert_array_equal(got[0], ONES * 4)


def test_waiting_for_itself_from_a_callback_is_an_error():
    job = callback_job("self_sync")
    job(ONES)(lambda r: job.sync())
    with pytest.raises(flow.Error, match=r"called from the job's own callback would wait for itself"):
        job.sync()


CTRL_C = textwrap.dedent("""
    import os, signal, time, numpy as np
    import jobflow as flow, jobflow.typing as tp

    config = flow.function_config().max_in_flight(64)

    @flow.global_function(function_config=config)
    def job(x: tp.Numpy.Placeholder((3,))) -> tp.Callback[tp.Numpy]:
        return x

    done, stop, syncing = [], [], []
    def slow(r):
        if len(done) == 2:
            while not syncing:  # main is (about to be) in sync(): Ctrl-C now
                time.sleep(0.01)
            os.kill(os.getpid(), signal.SIGINT)
        if not stop:
            time.sleep(0.2)
        done.append(r)

    for i in range(30):
        job(np.ones(3, np.float32))(slow)
    try:
        syncing.append(1)
        WAIT
        print("not interrupted", len(done), flush=True)
    except KeyboardInterrupt:
        print("interrupted after", len(done), "of 30", flush=True)
        stop.append(1)
""")


@pytest.mark.parametrize("wait", ["job.sync()", "flow.sync_default_session()", "flow.train.CheckPoint().save('m')"])
def test_ctrl_c_interrupts_sync(tmp_path, wait):
    # The 3rd callback sends SIGINT while the main thread waits in sync():
    # sync() raises KeyboardInterrupt long before the 30 slow callbacks end
    # (a sync() that ignored it would return after all 30).
    script = tmp_path / "ctrl_c.py"
    script.write_text(CTRL_C.replace("WAIT", wait))
    p = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    words = p.stdout.split()
    assert words[:2] == ["interrupted", "after"] and int(words[2]) < 30, p.stdout
