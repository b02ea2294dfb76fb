import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
if "TFRECORD_TORCH_CACHE" not in os.environ:  # each test process its own index cache, never the user's
    import tempfile

    os.environ["TFRECORD_TORCH_CACHE"] = tempfile.mkdtemp(prefix="tfrecord-torch-test-cache-")
if "TFRECORD_TORCH_SHARD_CACHE" not in os.environ:  # remote shards are copied by default: never into ~/.cache
    import atexit
    import shutil
    import tempfile

    _shards, _owner = tempfile.mkdtemp(prefix="tfrecord-torch-test-shards-"), os.getpid()
    os.environ["TFRECORD_TORCH_SHARD_CACHE"] = _shards
    atexit.register(lambda: os.getpid() == _owner and shutil.rmtree(_shards, ignore_errors=True))
sys.path.insert(0, os.path.dirname(__file__))  # tests/helpers.py

# torchvision (and the triton it imports with CUDA builds of torch) must load
# before TensorFlow: loading triton after TensorFlow segfaults.
import torchvision  # noqa: E402,F401
