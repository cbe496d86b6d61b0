#!/usr/bin/python3
"""The seeds' async_batch_job as a pipeline, in Python: evaluates the LeNet
checkpoint on the Fashion-MNIST test set with asynchronous results: with
emit-signals=true jobsink emits "new-result" from the streaming thread for
every result, and the handler pulls it and adds it to the accuracy; the main
thread just waits on the bus for EOS (or an error).
"""
import sys
import threading

from jobflow_results import Accuracy, Gst, ensure_plugin, error_text, make_pipeline, parse_args


def main():
    Gst.init(None)
    args = parse_args('Evaluates a LeNet checkpoint in a GStreamer pipeline with asynchronous results '
                      '(the new-result signal).')
    ensure_plugin(args)
    pipeline = make_pipeline(args)
    sink = pipeline.get_by_name('out')

    acc = Accuracy()
    lock = threading.Lock()
    failure = []

    def on_new_result(sink):
        sample = sink.emit('try-pull-result', 0)  # a result was just queued: no wait
        if sample is None:
            return Gst.FlowReturn.OK
        with lock:
            try:
                acc.add(sample)
            except ValueError as e:
                failure.append(str(e))
                return Gst.FlowReturn.ERROR  # stops the stream; the bus gets an error
        return Gst.FlowReturn.OK

    sink.set_property('emit-signals', True)
    sink.connect('new-result', on_new_result)

    pipeline.set_state(Gst.State.PLAYING)  # a failure posts an error on the bus
    msg = pipeline.get_bus().timed_pop_filtered(Gst.CLOCK_TIME_NONE, Gst.MessageType.ERROR | Gst.MessageType.EOS)
    # EOS: every result went through on_new_result before EOS reached the sink.
    bus_error = error_text(msg) if msg.type == Gst.MessageType.ERROR else None
    pipeline.set_state(Gst.State.NULL)  # no handler runs after this

    with lock:
        if failure:
            sys.exit('new_result.py: %s' % failure[0])
        if bus_error:
            sys.exit('new_result.py: the pipeline failed %s' % bus_error)
        print(acc.line())


if __name__ == '__main__':
    main()
