"""Datasets for the DataLoader: split and shuffle plans, shard discovery, reading, and skip counts."""
