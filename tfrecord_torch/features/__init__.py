"""Feature specs (what a record key becomes as a tensor), image decoding, presets and collate."""
