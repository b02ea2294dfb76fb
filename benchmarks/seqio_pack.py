"""seqio's packing rule written with TensorFlow ops: the oracle of
``tfrecord_torch.pack_collate`` (tests/unit/features/test_packing.py,
tests/journeys/test_journey_tokens.py) and its tf.data peer in the ``t5_pack``
benchmark case.

A transcription of ``seqio.utils.trim_and_pack_dataset`` with
``use_custom_ops=False`` (its ``_pack_with_tf_ops``), step by step:

1. keep only the keys of ``feature_lengths``, each cut to its length;
2. ``padded_batch`` groups of ``max(feature_lengths.values())`` examples (0 pads);
3. in each group, per example and in order: its tokens are the first
   ``count_nonzero`` of its padded row; if any key's tokens would overflow
   the current row, that row is written out (padded with 0) and a new one
   begun; the example's tokens are appended, with positions 0..n-1;
4. the group's last row is written out (even an empty one);
5. segment ids: the running count of positions equal to 0 along the row,
   times (token != 0); everything as int32; the rows unbatched.

seqio is not a dependency (it pulls in a TensorFlow of its own); this is the
rule as seqio's source states it, with TensorFlow ops of this venv.
TensorFlow is imported by the caller's process only.
"""

from __future__ import annotations

from collections.abc import Mapping


def trim_and_pack(dataset, feature_lengths: Mapping[str, int]):
    """``dataset`` (a tf.data.Dataset of dicts of 1-D int tensors) packed by seqio's rule."""
    import tensorflow as tf

    keys = list(feature_lengths)
    trimmed = dataset.map(lambda x: {k: x[k][:feature_lengths[k]] for k in keys},
                          num_parallel_calls=tf.data.AUTOTUNE)
    groups = trimmed.padded_batch(max(feature_lengths.values()), padded_shapes={k: [-1] for k in keys})
    return groups.map(_group_packer(feature_lengths), num_parallel_calls=tf.data.AUTOTUNE).unbatch()


def _group_packer(feature_lengths: Mapping[str, int]):
    import tensorflow as tf

    keys = list(feature_lengths)
    names = [k + suffix for k in keys for suffix in ("", "_positions")]

    def length_of(name: str) -> int:
        return feature_lengths[name.removesuffix("_positions")]

    def empty() -> dict:
        return {name: tf.zeros([0], tf.int32) for name in names}

    def flush(row: dict, written: dict) -> dict:
        return {name: written[name].write(written[name].size(),
                                          tf.pad(row[name], [[0, length_of(name) - tf.size(row[name])]]))
                for name in names}

    @tf.function
    def pack(group):
        written = {name: tf.TensorArray(tf.int32, size=0, dynamic_size=True, element_shape=[length_of(name)])
                   for name in names}
        row = empty()
        for i in tf.range(tf.shape(group[keys[0]])[0]):
            tf.autograph.experimental.set_loop_options(shape_invariants=[
                (row, {name: tf.TensorShape([None]) for name in names})])
            tokens = {}
            for k in keys:
                padded = tf.cast(group[k][i], tf.int32)
                tokens[k] = padded[:tf.reduce_sum(tf.cast(tf.not_equal(padded, 0), tf.int32))]
            fits = tf.reduce_all(tf.stack([tf.size(row[k]) + tf.size(tokens[k]) <= feature_lengths[k]
                                           for k in keys]))
            if not fits:
                written = flush(row, written)
                row = empty()
            grown = {}
            for k in keys:
                seq = tokens[k][:feature_lengths[k]]
                grown[k] = tf.concat([row[k], seq], 0)
                grown[k + "_positions"] = tf.concat([row[k + "_positions"], tf.range(tf.size(seq))], 0)
            row = grown
        written = flush(row, written)
        out = {name: written[name].stack() for name in names}
        for k in keys:
            starts = tf.cast(tf.equal(out[k + "_positions"], 0), tf.int32)
            out[k + "_segment_ids"] = tf.cumsum(starts, axis=1) * tf.cast(tf.not_equal(out[k], 0), tf.int32)
        return out

    return pack
