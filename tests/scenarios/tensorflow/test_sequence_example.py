"""tf.train.SequenceExample against TensorFlow: messages TensorFlow builds parse
to its values, and messages built here equal TensorFlow's bytes and parse in
tf.io.parse_single_sequence_example.

TensorFlow is imported unconditionally: the test environment always has it, and
a missing TensorFlow must fail loudly rather than skip these tests.
"""

from __future__ import annotations

import math
import os

os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
os.environ["CUDA_VISIBLE_DEVICES"] = ""

import numpy as np
import tensorflow as tf

from tfrecord_torch import make_sequence_example, parse_sequence_example

from .common import assert_features_equal, assert_values_equal, f32, i64, tf_feature, tf_values


def test_parse_tf_sequence_example():
    context = {
        "id": i64([2**63 - 1, -(2**63)]),
        "title": ["заголовок".encode(), b"\xff"],
        "weights": f32([0.25, math.nan, -math.inf]),
        "nothing": [],
    }
    steps = {
        "tokens": [i64([1, 2, 3]), i64([]), i64([-7]), i64(np.arange(100))],
        "frames": [f32([0.5, 1.5]), f32([math.inf, -0.0])],
        "words": [[b"a"], [b"", b"\x00\xff"], []],
        "mixed_kinds": [i64([1]), f32([2.0]), [b"three"], []],
        "empty_list": [],
    }
    message = tf.train.SequenceExample(
        context=tf.train.Features(feature={k: tf_feature(v) for k, v in context.items()}),
        feature_lists=tf.train.FeatureLists(feature_list={
            k: tf.train.FeatureList(feature=[tf_feature(v) for v in vs]) for k, vs in steps.items()
        }),
    )
    # "words" step 2 is an explicitly set, empty bytes_list; decodes to [] as well.
    message.feature_lists.feature_list["words"].feature[2].bytes_list.SetInParent()
    assert message.feature_lists.feature_list["words"].feature[2].WhichOneof("kind") == "bytes_list"

    got_context, got_lists = parse_sequence_example(message.SerializeToString())
    assert_features_equal(got_context, context)
    assert set(got_lists) == set(steps)
    for key, want in steps.items():
        assert len(got_lists[key]) == len(want), key
        for i, (g, w) in enumerate(zip(got_lists[key], want)):
            assert_values_equal(g, w, f"{key}[{i}]")
        tf_steps = message.feature_lists.feature_list[key].feature
        assert len(tf_steps) == len(got_lists[key])
        for g, f in zip(got_lists[key], tf_steps):
            assert_values_equal(g, tf_values(f), key)


# --------------------------------------------------------------------------- SequenceExample: we write, TF parses

SEQ_CONTEXT = {"id": 7, "title": "abc", "weights": np.array([0.5, 1.5], np.float32)}
SEQ_LISTS = {
    "frames": np.arange(12, dtype=np.float32).reshape(4, 3),  # one step per row
    "tokens": [[1, 2], [3], np.array([4, 5, 6]), [2**63 - 1]],
    "words": [b"a", [b"b", b"\x00\xff"], "d", [b""]],
    "empty": [],
}
SEQ_CONTEXT_EXPECTED = {"id": i64([7]), "title": [b"abc"], "weights": f32([0.5, 1.5])}
SEQ_LISTS_EXPECTED = {
    "frames": [f32([0, 1, 2]), f32([3, 4, 5]), f32([6, 7, 8]), f32([9, 10, 11])],
    "tokens": [i64([1, 2]), i64([3]), i64([4, 5, 6]), i64([2**63 - 1])],
    "words": [[b"a"], [b"b", b"\x00\xff"], [b"d"], [b""]],
    "empty": [],
}


def tf_sequence_example(context, lists):
    return tf.train.SequenceExample(
        context=tf.train.Features(feature={k: tf_feature(v) for k, v in context.items()}),
        feature_lists=tf.train.FeatureLists(feature_list={
            k: tf.train.FeatureList(feature=[tf_feature(v) for v in vs]) for k, vs in lists.items()}),
    )


def test_make_sequence_example_equals_tf_message():
    ours = make_sequence_example(SEQ_CONTEXT, SEQ_LISTS)
    reference = tf_sequence_example(SEQ_CONTEXT_EXPECTED, SEQ_LISTS_EXPECTED)
    assert tf.train.SequenceExample.FromString(ours) == reference
    assert ours == reference.SerializeToString(deterministic=True)
    # The empty feature list is present (with zero steps), as in TensorFlow.
    assert "empty" in tf.train.SequenceExample.FromString(ours).feature_lists.feature_list


def test_tf_parses_our_sequence_example():
    ours = make_sequence_example(SEQ_CONTEXT, SEQ_LISTS)
    context, lists = tf.io.parse_single_sequence_example(
        ours,
        context_features={
            "id": tf.io.FixedLenFeature([], tf.int64),
            "title": tf.io.FixedLenFeature([], tf.string),
            "weights": tf.io.FixedLenFeature([2], tf.float32),
        },
        sequence_features={
            "frames": tf.io.FixedLenSequenceFeature([3], tf.float32),
            "tokens": tf.io.RaggedFeature(tf.int64, row_splits_dtype=tf.int64),
            "words": tf.io.RaggedFeature(tf.string, row_splits_dtype=tf.int64),
            "empty": tf.io.FixedLenSequenceFeature([], tf.int64),
        },
    )
    assert int(context["id"]) == 7
    assert context["title"].numpy() == b"abc"
    assert_values_equal(context["weights"].numpy(), f32([0.5, 1.5]))
    np.testing.assert_array_equal(lists["frames"].numpy(), np.arange(12, dtype=np.float32).reshape(4, 3))
    assert lists["tokens"].to_list() == [[1, 2], [3], [4, 5, 6], [2**63 - 1]]
    assert lists["words"].to_list() == [[b"a"], [b"b", b"\x00\xff"], [b"d"], [b""]]
    assert lists["empty"].shape == (0,)


def test_tf_sequence_example_roundtrip_through_both():
    reference = tf_sequence_example(SEQ_CONTEXT_EXPECTED, SEQ_LISTS_EXPECTED)
    context, lists = parse_sequence_example(reference.SerializeToString())
    assert_features_equal(context, SEQ_CONTEXT_EXPECTED)
    assert set(lists) == set(SEQ_LISTS_EXPECTED)
    for key, want in SEQ_LISTS_EXPECTED.items():
        assert len(lists[key]) == len(want)
        for g, w in zip(lists[key], want):
            assert_values_equal(g, w, key)
    # Re-encoding what we decoded gives TensorFlow's bytes back.
    assert make_sequence_example(context, lists) == reference.SerializeToString(deterministic=True)
