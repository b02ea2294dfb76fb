"""Benchmarks of tfrecord_torch against tf.data and the ``tfrecord`` package (see run.py)."""
