#!/usr/bin/python3
"""The seeds' synchronize_batch_job as a pipeline, in Python: evaluates the
LeNet checkpoint on the Fashion-MNIST test set, pulling each result from
jobsink synchronously (the "pull-result" action signal blocks until the next
one is queued) and computing the accuracy with numpy from the tensors.

A second thread watches the bus: on an error it stops the pipeline, which
makes the blocked pull return None.
"""
import sys
import threading

from jobflow_results import Accuracy, Gst, ensure_plugin, error_text, make_pipeline, parse_args


def main():
    Gst.init(None)
    args = parse_args('Evaluates a LeNet checkpoint in a GStreamer pipeline, pulling results synchronously.')
    ensure_plugin(args)
    pipeline = make_pipeline(args)
    sink = pipeline.get_by_name('out')
    bus = pipeline.get_bus()

    bus_error = []
    done = threading.Event()

    def watch():
        while not done.is_set():
            msg = bus.timed_pop_filtered(100 * Gst.MSECOND, Gst.MessageType.ERROR | Gst.MessageType.EOS)
            if msg is None:
                continue
            if msg.type == Gst.MessageType.ERROR:
                bus_error.append(error_text(msg))
                pipeline.set_state(Gst.State.READY)  # wakes the pull (None)
            return

    watcher = threading.Thread(target=watch)
    watcher.start()
    acc = Accuracy()
    failure = None
    if pipeline.set_state(Gst.State.PLAYING) != Gst.StateChangeReturn.FAILURE:
        while True:
            sample = sink.emit('pull-result')  # None at EOS, or when the pipeline stops
            if sample is None:
                break
            try:
                acc.add(sample)
            except ValueError as e:
                failure = str(e)
                break
    eos = sink.get_property('eos')
    if not eos and failure is None:
        watcher.join(2.0)  # stopped by an error: the watcher has it or gets it soon
    done.set()
    watcher.join()
    pipeline.set_state(Gst.State.NULL)

    if failure:
        sys.exit('pull_results.py: %s' % failure)
    if bus_error or not eos:
        sys.exit('pull_results.py: the pipeline failed %s' % (bus_error[0] if bus_error else ''))
    print(acc.line())


if __name__ == '__main__':
    main()
