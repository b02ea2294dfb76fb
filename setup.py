"""The compiled parts, both optional (the package falls back to Python with the same results):

- ``features/_jpegcrop``: crop-window and whole-batch JPEG decoding on the
  system's libjpeg-turbo, and a batch's JPEG header scan; without libjpeg's headers (no ``libjpeg-dev``) the
  package decodes whole images with simplejpeg, then crops
  (``tfrecord_torch.features.images.jpeg.crop_decoding_available()`` tells).
- ``example/_fastwire``: tf.train.Example / SequenceExample decoding for the
  common case, and a whole framed record read (pread, CRCs, decode) for random
  access; without it, learned layouts and protobuf decode.
- ``records/_frames``: a run of adjacent framed records read straight into their payloads,
  lengths and CRCs checked; without it, the records are read and scanned in
  Python. Both record readers link ``records/_crc32c.c``.

Everything else about the package is in pyproject.toml.
"""

from setuptools import Extension, setup

try:  # _fastwire makes its arrays, and _frames reads the index, with numpy's C API (a build requirement, pyproject.toml)
    import numpy
    NUMPY_INCLUDE = [numpy.get_include()]
except ImportError:  # then it does not build, and the package decodes without it
    NUMPY_INCLUDE = []

setup(ext_modules=[
    Extension("tfrecord_torch.features.images._jpegcrop", ["tfrecord_torch/features/images/_jpegcrop.c"], libraries=["jpeg"],
              extra_compile_args=["-O2"], optional=True),
    Extension("tfrecord_torch.example._fastwire",
              ["tfrecord_torch/example/_fastwire.c", "tfrecord_torch/records/_crc32c.c"],
              include_dirs=NUMPY_INCLUDE, extra_compile_args=["-O2"], optional=True),
    Extension("tfrecord_torch.records._frames",
              ["tfrecord_torch/records/_frames.c", "tfrecord_torch/records/_crc32c.c"],
              include_dirs=NUMPY_INCLUDE, extra_compile_args=["-O2"], optional=True),
])
