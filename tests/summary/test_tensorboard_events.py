"""Reads Jobflow's TensorBoard event files back with TensorBoard's own reader.

    test_tensorboard_events.py engine WRITE_EVENTS OUTDIR
    test_tensorboard_events.py element JOBS_DIR OUTDIR

engine:  runs WRITE_EVENTS (tests/summary/write_events.cpp): a FileWriter's
         fixed scalars, and a train job with FunctionConfig::summary_dir
         whose returned losses it prints; the events must hold those values
         at those steps, with the job's learning rate.
element: runs jobfunction with summary-dir (GStreamer through PyGObject) on
         mlp_train.onnx and mlp_eval.onnx; the events must hold what the
         element's step-done signal and jobflow-step messages reported.

Runs with the build's virtual environment (tests/venv-python) where PyPI's
tensorboard is; exits 77 (skipped) when tensorboard cannot be imported.
"""
import os
import shutil
import subprocess
import sys

import numpy as np

try:
    from tensorboard.backend.event_processing import event_accumulator
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
except ImportError as e:
    print('SKIP: PyPI tensorboard is not importable (%s); scripts/setup installs it into BUILD/venv' % e)
    sys.exit(77)

FAILURES = []


def check(ok, what):
    print(('ok    ' if ok else 'FAIL  ') + what)
    if not ok:
        FAILURES.append(what)


def f32(x):
    return float(np.float32(x))


def scalars(folder):
    """{tag: [(step, value), ...]} as TensorBoard's EventAccumulator reads the folder."""
    acc = event_accumulator.EventAccumulator(folder, size_guidance={event_accumulator.SCALARS: 0})
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()['scalars']}


def event_file(folder):
    files = sorted(f for f in os.listdir(folder) if f.startswith('events.out.tfevents.'))
    check(len(files) == 1, '%s holds one event file (%s)' % (folder, files))
    return os.path.join(folder, files[0])


def check_file_version(path):
    events = list(EventFileLoader(path).Load())
    check(len(events) > 0 and events[0].file_version == 'brain.Event:2',
          'the first record of %s is file_version brain.Event:2' % os.path.basename(path))
    return events


def close(a, b, rel=1e-6):
    return abs(a - b) <= rel * max(abs(a), abs(b), 1e-30)


def test_engine(write_events, out):
    shutil.rmtree(out, ignore_errors=True)
    run = subprocess.run([write_events, out], capture_output=True, text=True)
    check(run.returncode == 0, 'write_events ran (%s)' % run.stderr.strip())
    if run.returncode:
        return
    returned = {}
    for line in run.stdout.splitlines():
        _, step, _, loss = line.split()
        returned[int(step)] = float(loss)
    check(sorted(returned) == [1, 2, 3, 4], 'the job ran 4 steps: %s' % sorted(returned))

    # FileWriter: values exact in float32 come back exactly.
    events = check_file_version(event_file(os.path.join(out, 'writer')))
    check(all(e.wall_time > 1.6e9 for e in events), 'wall times are seconds since the epoch')
    s = scalars(os.path.join(out, 'writer'))
    check(sorted(s) == ['a', 'b', 'exact'], 'writer tags: %s' % sorted(s))
    check(s.get('exact') == [(0, 0.5), (7, -1.25)], 'writer "exact": %s' % s.get('exact'))
    check(s.get('a') == [(5, 3.0)], 'writer "a": %s' % s.get('a'))
    check(s.get('b') == [(5, f32(1e-3))], 'writer "b" is float32(1e-3): %s' % s.get('b'))

    # summary_dir: the engine's returned loss and the schedule's rate per step.
    check_file_version(event_file(os.path.join(out, 'train')))
    s = scalars(os.path.join(out, 'train'))
    check(sorted(s) == ['learning_rate', 'loss'], 'train tags: %s' % sorted(s))
    loss = s.get('loss', [])
    check([st for st, _ in loss] == [1, 2, 3, 4], 'loss steps: %s' % [st for st, _ in loss])
    for st, v in loss:
        check(close(v, f32(returned.get(st, float('nan')))),
              'loss at step %d: event %.9g, returned %.9g' % (st, v, returned.get(st, float('nan'))))
    check(len(set(round(v, 6) for _, v in loss)) == 4, 'the loss changes from step to step (the job trains)')
    lr = s.get('learning_rate', [])
    check(lr == [(1, f32(0.1)), (2, f32(0.1)), (3, f32(0.05)), (4, f32(0.05))],
          'learning_rate follows the schedule (0.1, then 0.05 from the third step): %s' % lr)


def run_pipeline(launch, element, want_messages):
    from gi.repository import Gst
    Gst.init(None)
    pipeline = Gst.parse_launch(launch)
    done = []
    pipeline.get_by_name(element).connect('step-done', lambda _e, step, loss, acc: done.append((step, loss, acc)))
    messages = []
    pipeline.set_state(Gst.State.PLAYING)
    bus = pipeline.get_bus()
    error = None
    while True:
        msg = bus.timed_pop_filtered(120 * Gst.SECOND,
                                     Gst.MessageType.EOS | Gst.MessageType.ERROR | Gst.MessageType.ELEMENT)
        if msg is None:
            error = 'no EOS within 120 s'
            break
        if msg.type == Gst.MessageType.ERROR:
            error = msg.parse_error()[0].message
            break
        if msg.type == Gst.MessageType.EOS:
            break
        st = msg.get_structure()
        if st is not None and st.get_name() == want_messages:
            messages.append({k: st.get_value(k) for k in ('step', 'images-per-second', 'loss')})
    pipeline.set_state(Gst.State.NULL)
    check(error is None, 'pipeline ran to EOS (%s)' % error)
    return done, messages


def test_element(jobs, out):
    try:
        import gi
        gi.require_version('Gst', '1.0')
        from gi.repository import Gst  # noqa: F401
    except (ImportError, ValueError) as e:
        print('SKIP: GStreamer for Python is not importable (%s; apt-get install python3-gi python3-gst-1.0)' % e)
        sys.exit(77)
    shutil.rmtree(out, ignore_errors=True)
    train_dir, eval_dir = os.path.join(out, 'train'), os.path.join(out, 'eval')
    # 6 train steps, a jobflow-step message (images/s) every 2.
    done, messages = run_pipeline(
        'jobdatasrc set=train batch-size=100 num-samples=600 ! jobfunction name=f job="%s" summary-dir="%s" '
        'message-interval=2 ! fakesink' % (os.path.join(jobs, 'mlp_train.onnx'), train_dir), 'f', 'jobflow-step')
    check([d[0] for d in done] == [1, 2, 3, 4, 5, 6], 'step-done for 6 train steps: %s' % [d[0] for d in done])
    check_file_version(event_file(train_dir))
    s = scalars(train_dir)
    check(sorted(s) == ['images_per_second', 'learning_rate', 'loss'], 'train tags: %s' % sorted(s))
    loss = s.get('loss', [])
    check([st for st, _ in loss] == [d[0] for d in done], 'loss at every train step: %s' % [st for st, _ in loss])
    for (st, v), (step, signal_loss, _) in zip(loss, done):
        check(st == step and close(v, f32(signal_loss)),
              'loss at step %d: event %.9g, step-done %.9g' % (step, v, signal_loss))
    # mlp_train.onnx: the seeds' SGD at a constant 0.1.
    check(s.get('learning_rate') == [(st, f32(0.1)) for st, _ in loss], 'learning_rate 0.1 at every step')
    ips = s.get('images_per_second', [])
    check([st for st, _ in ips] == [m['step'] for m in messages] == [2, 4, 6],
          'images_per_second at the message steps: %s' % [st for st, _ in ips])
    for (st, v), m in zip(ips, messages):
        check(close(v, f32(m['images-per-second'])) and v > 0,
              'images_per_second at step %d: event %.6g, message %.6g' % (st, v, m['images-per-second']))

    # An eval job (labels, logits): accuracy per call, nothing else.
    done, _ = run_pipeline(
        'jobdatasrc set=test batch-size=100 num-samples=300 ! jobfunction name=e job="%s" summary-dir="%s" '
        'message-interval=0 ! fakesink' % (os.path.join(jobs, 'mlp_eval.onnx'), eval_dir), 'e', 'none')
    check_file_version(event_file(eval_dir))
    s = scalars(eval_dir)
    check(sorted(s) == ['accuracy'], 'eval tags: %s' % sorted(s))
    acc = s.get('accuracy', [])
    want = [(d[0], f32(d[2])) for d in done]
    check(acc == want and len(acc) == 3, 'accuracy per call as step-done reported it: %s vs %s' % (acc, want))


def main():
    if len(sys.argv) != 4 or sys.argv[1] not in ('engine', 'element'):
        sys.exit(__doc__)
    if sys.argv[1] == 'engine':
        test_engine(sys.argv[2], sys.argv[3])
    else:
        test_element(sys.argv[2], sys.argv[3])
    if FAILURES:
        print('%d check(s) failed' % len(FAILURES))
        sys.exit(1)
    print('all checks passed')


if __name__ == '__main__':
    main()
