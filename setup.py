"""The one compiled part: crop-window JPEG decoding on the system's libjpeg-turbo.

Optional: where libjpeg's headers are missing (no ``libjpeg-dev``) the build
skips it and the package decodes the whole image, then crops, with the same
pixels (``tfrecord_torch.features.jpeg.crop_decoding_available()`` tells).
Everything else about the package is in pyproject.toml.
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("tfrecord_torch.features._jpegcrop", ["tfrecord_torch/features/_jpegcrop.c"],
                             libraries=["jpeg"], extra_compile_args=["-O2"], optional=True)])
