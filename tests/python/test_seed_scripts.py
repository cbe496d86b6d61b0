# The seeds' four scripts (../shared/seeds 003: lenet_train.py,
# lenet_eval.py, async_single_job.py, async_batch_job.py), copied into
# seeds/ with only the import lines changed and an --epochs option (see
# seeds/README.md), run as the pages run them: `python3 script.py` in a
# folder, the eval scripts loading what the train scripts saved there.
import os
import re
import subprocess
import sys

import pytest

from conftest import make_subset, need_fashion

HERE = os.path.dirname(os.path.abspath(__file__))
SEEDS = os.path.join(HERE, "seeds")
NUMBER = re.compile(r"^-?\d+(\.\d+)?(e[-+]?\d+)?$")


def run(script, cwd, *args, data=None):
    env = dict(os.environ)
    if data:
        env["JOBFLOW_DATA"] = data
    p = subprocess.run([sys.executable, os.path.join(SEEDS, script), *args], cwd=cwd, env=env,
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, "%s failed:\n%s\n%s" % (script, p.stdout, p.stderr)
    return p.stdout


def losses(out):
    return [float(line) for line in out.split("\n") if NUMBER.match(line.strip())]


def accuracy(out):
    m = re.search(r"^accuracy: (\d+\.\d)%$", out, re.M)
    assert m, "no 'accuracy: N%' line in:\n" + out
    return float(m.group(1))


def test_async_mlp_train_then_eval(tmp_path):
    need_fashion()
    # The MLP on 24000 training images (240 steps, a loss every 20) and the
    # whole test set.
    data = make_subset(str(tmp_path / "fashion"), 24000, 10000)
    out = run("async_single_job.py", tmp_path, "--epochs", "1", data=data)
    printed = losses(out)
    assert len(printed) == 12, out
    assert printed[-1] < printed[0]
    assert (tmp_path / "mlp_models_1" / "snapshot_done").exists()
    assert (tmp_path / "mlp_models_1" / "hidden-weight" / "meta").exists()
    # The seed prints right after its last call: the accuracy counts the
    # batches whose callbacks have run by then (all but at most the last
    # max_in_flight), as OneFlow's did.
    assert accuracy(run("async_batch_job.py", tmp_path, data=data)) >= 75.0


def test_sync_lenet_train_then_eval(tmp_path):
    need_fashion()
    # LeNet on a subset (6000 training images: 60 steps, a loss every 20;
    # 1000 test images), so the test stays short on two cores.
    data = make_subset(str(tmp_path / "fashion"), 6000, 1000)
    out = run("synchronize_single_job.py", tmp_path, "--epochs", "1", data=data)
    printed = losses(out)
    assert len(printed) == 3, out
    assert out.rstrip().endswith("model saved")
    assert (tmp_path / "lenet_models_1" / "conv1-weight" / "out").stat().st_size == 32 * 1 * 5 * 5 * 4
    acc = accuracy(run("synchronize_batch_job.py", tmp_path, data=data))
    assert acc >= 60.0
