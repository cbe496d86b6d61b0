# Every code fragment of the five seed pages (OneFlow's guide to job
# functions, ../shared/seeds) that is a whole job definition, defined as the
# page writes it (the text below is the pages', verbatim) and run on a few
# batches of Fashion-MNIST. The networks the fragments call (lenet, mlp)
# and the configs are the ones of the same pages' complete scripts.
#
# Pages 000 and 003 (results, Chinese), 002 and 004 (definition and call,
# Chinese and English; the same fragments) share fragments; each is run
# once. Not run: `def cb_func(result: T): #...` (a prototype, not Python),
# 001's second train_job ("#... code not shown": its body is elided), and
# 002/004's header-only train_job, which is run with the body of the same
# page's MLP.
import os
import textwrap
from typing import Tuple

import numpy as np
import pytest

import jobflow as flow
import jobflow.typing as tp

from conftest import make_subset, need_fashion

BATCHES = 3  # train batches of 100 in the subset


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    need_fashion()
    folder = make_subset(str(tmp_path_factory.mktemp("fashion")), BATCHES * 100, 200)
    old = os.environ.get("JOBFLOW_DATA")
    os.environ["JOBFLOW_DATA"] = folder
    yield flow.data.load_mnist(100, 100)
    if old is None:
        del os.environ["JOBFLOW_DATA"]
    else:
        os.environ["JOBFLOW_DATA"] = old


# ---- the pages' networks and configs ----

NETWORKS = '''
def lenet(data, train=False):
    initializer = flow.truncated_normal(0.1)
    conv1 = flow.layers.conv2d(
        data,
        32,
        5,
        padding="SAME",
        activation=flow.nn.relu,
        name="conv1",
        kernel_initializer=initializer,
    )
    pool1 = flow.nn.max_pool2d(conv1, ksize=2, strides=2, padding="SAME", name="pool1")
    conv2 = flow.layers.conv2d(
        pool1,
        64,
        5,
        padding="SAME",
        activation=flow.nn.relu,
        name="conv2",
        kernel_initializer=initializer,
    )
    pool2 = flow.nn.max_pool2d(conv2, ksize=2, strides=2, padding="SAME", name="pool2")
    reshape = flow.reshape(pool2, [pool2.shape[0], -1])
    hidden = flow.layers.dense(
        reshape,
        512,
        activation=flow.nn.relu,
        kernel_initializer=initializer,
        name="dense1",
    )
    if train:
        hidden = flow.nn.dropout(hidden, rate=0.5, name="dropout")
    return flow.layers.dense(hidden, 10, kernel_initializer=initializer, name="dense2")


def mlp(data):
    initializer = flow.truncated_normal(0.1)
    reshape = flow.reshape(data, [data.shape[0], -1])
    hidden = flow.layers.dense(
        reshape,
        512,
        activation=flow.nn.relu,
        kernel_initializer=initializer,
        name="hidden",
    )
    return flow.layers.dense(hidden, 10, kernel_initializer=initializer, name="output")
'''

NETWORKS_0_1 = '''
def mlp(data):
  initializer = flow.truncated_normal(0.1)
  reshape = flow.reshape(data, [data.shape[0], -1])
  hidden = flow.layers.dense(reshape, 512, activation=flow.nn.relu, kernel_initializer=initializer)
  return flow.layers.dense(hidden, 10, kernel_initializer=initializer)

def lenet(data, train=False):
  initializer = flow.truncated_normal(0.1)
  conv1 = flow.layers.conv2d(data, 32, 5, padding='SAME', activation=flow.nn.relu,
                              kernel_initializer=initializer, name="conv1")
  pool1 = flow.nn.max_pool2d(conv1, ksize=2, strides=2, padding='SAME', name="pool1")
  conv2 = flow.layers.conv2d(pool1, 64, 5, padding='SAME', activation=flow.nn.relu,
                              kernel_initializer=initializer, name="conv2")
  pool2 = flow.nn.max_pool2d(conv2, ksize=2, strides=2, padding='SAME', name="pool2")
  reshape = flow.reshape(pool2, [pool2.shape[0], -1])
  hidden = flow.layers.dense(reshape, 512, activation=flow.nn.relu, kernel_initializer=initializer, name="hidden")
  if train: hidden = flow.nn.dropout(hidden, rate=0.5)
  return flow.layers.dense(hidden, 10, kernel_initializer=initializer, name="outlayer")

def get_train_config():
  config = flow.function_config()
  config.default_data_type(flow.float)
  config.train.primary_lr(0.1)
  config.train.model_update_conf({"naive_conf": {}})
  return config

def get_eval_config():
  config = flow.function_config()
  config.default_data_type(flow.float)
  return config
'''


def page(*sources):
    """A namespace as the page's script has it, after running `sources`."""
    ns = {"flow": flow, "tp": tp, "np": np, "Tuple": Tuple, "BATCH_SIZE": 100, "__name__": "seed_page"}
    for s in sources:
        exec(compile(textwrap.dedent(s), "<seed fragment>", "exec"), ns)
    return ns


def run(ns, code, **values):
    ns.update(values)
    exec(compile(textwrap.dedent(code), "<seed fragment>", "exec"), ns)
    return ns


# ---- 000 / 003: getting results ----

SYNC_TRAIN_JOB = '''
@flow.global_function(type="train")
def train_job(
    images: tp.Numpy.Placeholder((BATCH_SIZE, 1, 28, 28), dtype=flow.float),
    labels: tp.Numpy.Placeholder((BATCH_SIZE,), dtype=flow.int32),
) -> tp.Numpy:
    with flow.scope.placement("gpu", "0:0"):
        logits = lenet(images, train=True)
        loss = flow.nn.sparse_softmax_cross_entropy_with_logits(
            labels, logits, name="softmax_loss"
        )
    lr_scheduler = flow.optimizer.PiecewiseConstantScheduler([], [0.1])
    flow.optimizer.SGD(lr_scheduler, momentum=0).minimize(loss)
    return loss
'''

SYNC_CALL = '''
loss = train_job(images, labels)
if i % 20 == 0:
    print(loss.mean())
'''

ASYNC_TRAIN_JOB = '''
@flow.global_function(type="train")
def train_job(
    images: tp.Numpy.Placeholder((BATCH_SIZE, 1, 28, 28), dtype=flow.float),
    labels: tp.Numpy.Placeholder((BATCH_SIZE,), dtype=flow.int32),
) -> tp.Callback[tp.Numpy]:
    # mlp
    initializer = flow.truncated_normal(0.1)
    reshape = flow.reshape(images, [images.shape[0], -1])
    hidden = flow.layers.dense(
        reshape,
        512,
        activation=flow.nn.relu,
        kernel_initializer=initializer,
        name="hidden",
    )
    logits = flow.layers.dense(
        hidden, 10, kernel_initializer=initializer, name="output"
    )

    loss = flow.nn.sparse_softmax_cross_entropy_with_logits(
        labels, logits, name="softmax_loss"
    )
    lr_scheduler = flow.optimizer.PiecewiseConstantScheduler([], [0.1])
    flow.optimizer.SGD(lr_scheduler, momentum=0).minimize(loss)
    return loss
'''

CB_PRINT_LOSS = '''
def cb_print_loss(result: tp.Numpy):
    global g_i
    if g_i % 20 == 0:
        print(result.mean())
    g_i += 1
'''

ASYNC_EVAL_JOB = '''
@flow.global_function(type="predict")
def eval_job(
    images: tp.Numpy.Placeholder((BATCH_SIZE, 1, 28, 28), dtype=flow.float),
    labels: tp.Numpy.Placeholder((BATCH_SIZE,), dtype=flow.int32),
) -> tp.Callback[Tuple[tp.Numpy, tp.Numpy]]:
    with flow.scope.placement("cpu", "0:0"):
        logits = mlp(images)
        loss = flow.nn.sparse_softmax_cross_entropy_with_logits(
            labels, logits, name="softmax_loss"
        )

    return (labels, logits)
'''

ACC = '''
g_total = 0
g_correct = 0


def acc(arguments: Tuple[tp.Numpy, tp.Numpy]):
    global g_total
    global g_correct

    labels = arguments[0]
    logits = arguments[1]
    predictions = np.argmax(logits, 1)
    right_count = np.sum(predictions == labels)
    g_total += labels.shape[0]
    g_correct += right_count
'''

REGISTER_LONG = '''
callbacker = train_job(images, labels)
callbacker(cb_print_loss)
'''

REGISTER_SHORT = '''
train_job(images, labels)(cb_print_loss)
'''


def test_sync_train_job_lenet(data, capsys):
    (train_images, train_labels), _ = data
    ns = page(NETWORKS, SYNC_TRAIN_JOB)
    flow.train.CheckPoint().init()
    losses = []
    for i, (images, labels) in enumerate(zip(train_images, train_labels)):
        run(ns, SYNC_CALL, images=images, labels=labels, i=i * 20)
        losses.append(ns["loss"])
    assert all(isinstance(l, np.ndarray) and l.shape == (100,) and l.dtype == np.float32 for l in losses)
    printed = [float(x) for x in capsys.readouterr().out.split()]
    assert printed == pytest.approx([float(l.mean()) for l in losses])


def test_async_train_job_mlp_both_registrations(data, capsys):
    (train_images, train_labels), _ = data
    ns = page(NETWORKS, ASYNC_TRAIN_JOB, "g_i = 0\n", CB_PRINT_LOSS)
    flow.train.CheckPoint().init()
    for i, (images, labels) in enumerate(zip(train_images, train_labels)):
        run(ns, REGISTER_LONG if i % 2 else REGISTER_SHORT, images=images, labels=labels)
    ns["train_job"].sync()
    assert ns["g_i"] == BATCHES  # one callback per call
    assert len(capsys.readouterr().out.split()) == 1  # the loss of call 0 (every 20th)


def test_async_eval_job_tuple(data):
    _, (test_images, test_labels) = data
    ns = page(NETWORKS, ASYNC_EVAL_JOB, ACC)
    flow.train.CheckPoint().init()
    for images, labels in zip(test_images, test_labels):
        ns["eval_job"](images, labels)(ns["acc"])
    ns["eval_job"].sync()
    assert ns["g_total"] == 200
    assert 0 <= ns["g_correct"] <= 200


# ---- 001: the older API ----

TRAIN_JOB_0_1 = '''
@flow.function(get_train_config())
def train_job(images=flow.FixedTensorDef((BATCH_SIZE, 1, 28, 28), dtype=flow.float),
              labels=flow.FixedTensorDef((BATCH_SIZE, ), dtype=flow.int32)):
  with flow.fixed_placement("cpu", "0:0"):
    logits = mlp(images)
    loss = flow.nn.sparse_softmax_cross_entropy_with_logits(labels, logits, name="softmax_loss")
  flow.losses.add_loss(loss)
  return loss
'''

GET_0_1 = '''
loss = train_job(images, labels).get()
print(loss.mean())
'''

CB_PRINT_LOSS_0_1 = '''
g_i = 0
def cb_print_loss(result):
  global g_i
  if g_i % 20 == 0:
    print(result.mean())
  g_i+=1
'''

ASYNC_GET_0_1 = '''
train_job(images,labels).async_get(cb_print_loss)
'''

EVAL_JOB_0_1 = '''
@flow.function(get_eval_config())
def eval_job(images=flow.FixedTensorDef((BATCH_SIZE, 1, 28, 28), dtype=flow.float),
              labels=flow.FixedTensorDef((BATCH_SIZE, ), dtype=flow.int32)):
  with flow.fixed_placement("gpu", "0:0"):
    logits = lenet(images, train=True)
    loss = flow.nn.sparse_softmax_cross_entropy_with_logits(labels, logits, name="softmax_loss")

  return {"labels":labels, "logits":logits}
'''

ACC_0_1 = '''
def acc(eval_result):
  global g_total
  global g_correct

  labels = eval_result["labels"]
  logits = eval_result["logits"]

  predictions = np.argmax(logits.ndarray(), 1)
  right_count = np.sum(predictions == labels)
  g_total += labels.shape[0]
  g_correct += right_count
'''


def test_older_api_train_job_get_and_async_get(data, capsys):
    (train_images, train_labels), _ = data
    ns = page(NETWORKS_0_1, TRAIN_JOB_0_1, CB_PRINT_LOSS_0_1)
    flow.train.CheckPoint().init()
    losses = []
    for i, (images, labels) in enumerate(zip(train_images, train_labels)):
        run(ns, GET_0_1 if i % 2 == 0 else ASYNC_GET_0_1, images=images, labels=labels)
        if i % 2 == 0:
            losses.append(ns["loss"])
    ns["train_job"].sync()
    assert all(l.shape == (100,) for l in losses)
    # A train job (add_loss with the config's SGD): one step per call.
    assert flow.get_all_variables()["System-Train-TrainStep-train_job"].tolist() == [BATCHES]
    assert ns["g_i"] == BATCHES // 2
    assert len(capsys.readouterr().out.split()) == len(losses) + 1


def test_older_api_eval_job_dict(data):
    _, (test_images, test_labels) = data
    ns = page(NETWORKS_0_1, "g_total = 0\ng_correct = 0\n", EVAL_JOB_0_1, ACC_0_1)
    flow.train.CheckPoint().init()
    for images, labels in zip(test_images, test_labels):
        ns["eval_job"](images, labels).async_get(ns["acc"])
    ns["eval_job"].sync()
    assert ns["g_total"] == 200


# ---- 002 / 004: defining and calling ----

GET_TRAIN_CONFIG = '''
def get_train_config():
    config = flow.function_config()
    config.default_data_type(flow.float)
    return config
'''

# The page's header, and the body of the page's MLP train job.
CONFIGURED_TRAIN_JOB = '''
@flow.global_function(type="train", function_config=get_train_config())
def train_job(
    images: tp.Numpy.Placeholder((BATCH_SIZE, 1, 28, 28), dtype=flow.float),
    labels: tp.Numpy.Placeholder((BATCH_SIZE,), dtype=flow.int32),
) -> tp.Numpy:
''' + ASYNC_TRAIN_JOB[ASYNC_TRAIN_JOB.index("    # mlp"):]

CALL_LOOP = '''
    (train_images, train_labels), (test_images, test_labels) = flow.data.load_mnist(
        BATCH_SIZE
    )

    for epoch in range(3):
        for i, (images, labels) in enumerate(zip(train_images, train_labels)):
            loss = train_job(images, labels)
            if i % 20 == 0:
                print(loss.mean())
'''


def test_definition_page_callback_job(data):
    (train_images, train_labels), _ = data
    ns = page(ASYNC_TRAIN_JOB)  # 002/004's train_job is 000/003's MLP job
    flow.train.CheckPoint().init()
    got = []
    for images, labels in zip(train_images, train_labels):
        ns["train_job"](images, labels)(got.append)
    ns["train_job"].sync()
    assert [g.shape for g in got] == [(100,)] * BATCHES


def test_definition_page_config_and_call_loop(data, capsys):
    ns = page(GET_TRAIN_CONFIG, CONFIGURED_TRAIN_JOB)
    flow.train.CheckPoint().init()
    run(ns, CALL_LOOP)  # 3 epochs over the subset's 3 batches: batch 0 printed each epoch
    printed = [float(x) for x in capsys.readouterr().out.split()]
    assert len(printed) == 3
    assert printed[-1] < printed[0]
