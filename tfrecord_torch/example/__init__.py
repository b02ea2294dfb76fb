"""tf.train.Example and SequenceExample: protos, the codec, and the batch parser."""
