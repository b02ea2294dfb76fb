"""Writing shards: the sharded writer and the conversion of torchvision datasets."""
