"""Record files: framing and CRCs, compression, index files, and the record writer."""
