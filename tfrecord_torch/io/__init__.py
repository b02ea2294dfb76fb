"""Files, local and remote (fsspec): paths, retries, atomic writes, and a thread-safe reader pool."""
