"""tensorflow-datasets directories: names, metadata, features, and opening a split."""
