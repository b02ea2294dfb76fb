"""Fusing the head of a torchvision v2 transform into image decoding.

When an image transform starts with ``v2.RandomResizedCrop`` (or a fixed
``v2.Resize((h, w))``), optionally followed by ``v2.RandomHorizontalFlip``,
the batch fast path does that work itself while the image is still a NumPy
array on a decode thread: crop parameters drawn exactly as torchvision draws
them (the same calls, on a generator seeded from the dataset's seed), a JPEG
decoded only inside the crop window (:func:`.jpeg.decode_jpeg_window`), then
torch's antialiased resize -- the way ``v2.Resize`` runs it on uint8 images
on this CPU -- writing into the image's slot of the batch buffer, and the
flip.

The pixels equal torchvision's ``resized_crop`` (and ``horizontal_flip``) of
the full decode, bit for bit (tests/test_fast_images.py), on CPUs with and
without AVX2 (tests/test_crop_cpu_capability.py).
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import functools
import math
import os
import platform
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import torch

from tfrecord_torch.errors import FeatureError
from tfrecord_torch.features.images.decode import decode_hwc
from tfrecord_torch.features.images.jpeg import decode_jpeg_window, fast_jpeg, to_planes
from tfrecord_torch.features.images.limits import check_pixels, read_header
from tfrecord_torch.features.images.specs import Image
from tfrecord_torch.features.images.wrap import as_image
from tfrecord_torch.features.specs import _REQUIRED

__all__ = ["Box", "CropParams", "CropPlan", "CroppedImage", "crop_params", "crop_params_batch", "fusable_default",
           "plan_transform", "resize_into"]


@dataclass(frozen=True)
class CropPlan:
    """What the fused head of a transform does to each image.

    Attributes:
        size: the output (height, width).
        scale, ratio: RandomResizedCrop's ranges; None for a plain resize.
        flip: probability of a horizontal flip after the crop (0: none).
        resample: the interpolation, "bilinear" or "bicubic" (antialiased).
    """

    size: tuple[int, int]
    scale: tuple[float, float] | None
    ratio: tuple[float, float] | None
    flip: float
    resample: str


class Box(NamedTuple):
    """A window of an image, in pixels."""

    top: int
    left: int
    height: int
    width: int


class CropParams(NamedTuple):
    """One image's draw: the crop window, then whether it is flipped."""

    top: int
    left: int
    height: int
    width: int
    flip: bool

    @property
    def box(self) -> Box:
        return Box(self.top, self.left, self.height, self.width)


def plan_transform(transform: Any) -> tuple[CropPlan | None, list]:
    """Split a v2 transform into a fusable head and the transforms left over.

    Returns:
        (plan, rest): ``plan`` None when nothing can be fused; ``rest`` the
        transforms still to apply to each image, in order.
    """
    from torchvision.transforms import v2

    steps = list(transform.transforms) if isinstance(transform, v2.Compose) else [transform]
    if not steps:
        return None, steps
    head = steps[0]
    resample = _resample(head)
    if resample is None:
        return None, steps
    if type(head) is v2.RandomResizedCrop:
        plan = CropPlan(size=(head.size[0], head.size[1]), scale=(float(head.scale[0]), float(head.scale[1])),
                        ratio=(float(head.ratio[0]), float(head.ratio[1])), flip=0.0, resample=resample)
    elif type(head) is v2.Resize and isinstance(head.size, (list, tuple)) and len(head.size) == 2 \
            and head.max_size is None:
        plan = CropPlan(size=(head.size[0], head.size[1]), scale=None, ratio=None, flip=0.0,
                        resample=resample)
    else:
        return None, steps
    rest = steps[1:]
    if rest and type(rest[0]) is v2.RandomHorizontalFlip and rest[0].p > 0:
        plan = dataclasses.replace(plan, flip=float(rest[0].p))
        rest = rest[1:]
    return plan, rest


def _resample(step: Any) -> str | None:
    """The interpolation of a resizing step, or None if it cannot be fused
    (no antialiasing, or an interpolation other than bilinear or bicubic)."""
    if getattr(step, "antialias", True) is False or not hasattr(step, "interpolation"):
        return None
    mode = step.interpolation  # an InterpolationMode, its value ("bilinear") or a PIL code (2, 3)
    mode = {2: "bilinear", 3: "bicubic"}.get(mode, mode) if isinstance(mode, int) \
        else getattr(mode, "value", mode)
    return mode if mode in ("bilinear", "bicubic") else None


def crop_params(plan: CropPlan, height: int, width: int, generator: torch.Generator | None) -> CropParams:
    """The crop window and flip for one image of ``height`` x ``width``.

    The crop is drawn with the same calls, in the same order, as
    ``v2.RandomResizedCrop.make_params`` (then ``RandomHorizontalFlip``'s
    ``torch.rand(1)``), but from ``generator`` (None: torch's global RNG, as
    the transform itself): with a generator seeded like torch's global one,
    the parameters are torchvision's exactly.
    """
    return crop_params_batch(plan, [(height, width)], generator)[0]


def crop_params_batch(plan: CropPlan, sizes: Sequence[tuple[int, int]],
                      generator: torch.Generator | None) -> list[CropParams]:
    """:func:`crop_params` for images of ``sizes`` ((height, width) each),
    drawn one image after the other: the same parameters, and the same state
    of ``generator`` after them, as a call per image.

    The draws cannot be vectorised: RandomResizedCrop rejects a window that
    does not fit and draws again, so how many numbers an image takes depends
    on the numbers. What a batch shares is set up once instead: the log of
    the ratio range and two one-element tensors that each draw refills in
    place (``torch.empty(1).uniform_`` and ``torch.randint(..., size=(1,))``
    are exactly such a refill of a fresh tensor).
    """
    draws = _Draws(generator)
    scale, ratio = plan.scale, plan.ratio
    log_low, log_high, p = _draw_constants(plan, draws.real.dtype)
    out = []
    for height, width in sizes:
        if scale is None or ratio is None:
            top, left, h, w = 0, 0, height, width
        else:
            top, left, h, w = _random_resized_crop(scale, ratio, log_low, log_high, height, width, draws)
        flip = plan.flip > 0 and draws.uniform(0.0, 1.0) < p
        out.append(CropParams(top, left, h, w, flip))
    return out


@functools.lru_cache(maxsize=64)
def _draw_constants(plan: CropPlan, dtype: torch.dtype) -> tuple[float, float, float]:
    """(log of the ratio range's ends, flip probability) for draws into
    tensors of ``dtype``, the default float dtype when they are drawn: the
    same every image, so worked out once per plan and dtype."""
    log_low = log_high = 0.0
    if plan.scale is not None and plan.ratio is not None:
        log_ratio = torch.log(torch.tensor(plan.ratio, dtype=dtype))  # as the transform keeps it
        log_low, log_high = float(log_ratio[0]), float(log_ratio[1])
    # torchvision compares the tensor with p in the tensor's dtype: p rounded to it, then compared exactly
    return log_low, log_high, torch.tensor(plan.flip, dtype=dtype).item()


class _Draws:
    """torch's draws of RandomResizedCrop and RandomHorizontalFlip, from
    ``generator`` (None: torch's global RNG), into reused tensors of the
    dtypes the transforms' own fresh ones get (the default float dtype, int64)."""

    def __init__(self, generator: torch.Generator | None) -> None:
        self.generator = generator
        self.real = torch.empty(1)
        self.whole = torch.empty(1, dtype=torch.int64)

    def uniform(self, low: float, high: float) -> float:
        """``torch.empty(1).uniform_(low, high).item()`` (``torch.rand(1)`` for 0, 1)."""
        return self.real.uniform_(low, high, generator=self.generator).item()

    def exp_uniform(self, low: float, high: float) -> float:
        """``torch.exp(torch.empty(1).uniform_(low, high)).item()``."""
        return self.real.uniform_(low, high, generator=self.generator).exp_().item()

    def randint(self, high: int) -> int:
        """``torch.randint(0, high, size=(1,)).item()``."""
        return int(self.whole.random_(0, high, generator=self.generator).item())


def _random_resized_crop(scale: tuple[float, float], ratio: tuple[float, float], log_low: float,
                         log_high: float, height: int, width: int, draws: _Draws) -> Box:
    area = height * width
    for _ in range(10):
        target_area = area * draws.uniform(scale[0], scale[1])
        aspect_ratio = draws.exp_uniform(log_low, log_high)
        w = int(round(math.sqrt(target_area * aspect_ratio)))
        h = int(round(math.sqrt(target_area / aspect_ratio)))
        if 0 < w <= width and 0 < h <= height:
            return Box(draws.randint(height - h + 1), draws.randint(width - w + 1), h, w)
    in_ratio = float(width) / float(height)  # torchvision's fallback: a central crop
    if in_ratio < min(ratio):
        w = width
        h = int(round(w / min(ratio)))
    elif in_ratio > max(ratio):
        h = height
        w = int(round(h * max(ratio)))
    else:
        w, h = width, height
    return Box((height - h) // 2, (width - w) // 2, h, w)


def resize_into(image: np.ndarray, box: Box, flip: bool, resample: str, out: np.ndarray) -> None:
    """Crop ``box`` of an RGB uint8 [H, W, 3] image, resize
    it to ``out``'s size and write it (flipped if asked) into ``out`` (a
    C-contiguous uint8 [h', w', 3] array).

    The resize is the one ``v2.functional.resize`` runs on a uint8 image on
    this CPU, so the pixels are exactly its own: where torchvision uses
    torch's antialiased uint8 kernel (bicubic; bilinear on AVX2, AVX-512 and
    ARM), that kernel runs on the NHWC memory as a channels_last tensor with
    ``out`` as its output (no copy, the GIL released); elsewhere the window
    goes through float32 and is rounded back, as torchvision does it.
    """
    top, left, h, w = box
    window = image[top:top + h, left:left + w]
    if (h, w) == out.shape[:2]:
        resized = window  # nothing to resize: the flip or the copy reads the window itself
    else:
        # flipped: resized aside, then copied over reversed (a copy in place would go through a buffer)
        resized = np.empty_like(out) if flip else out
        _resize(window, resample, resized)
    if flip:
        _flip_into(resized, out)
    elif resized is not out:
        out[...] = resized


def _resize(window: np.ndarray, resample: str, out: np.ndarray) -> None:
    """Resize an RGB uint8 [h, w, 3] ``window`` into ``out`` as ``v2.Resize`` does."""
    source = torch.from_numpy(window).permute(2, 0, 1).unsqueeze(0)
    target = torch.from_numpy(out).permute(2, 0, 1).unsqueeze(0)
    kernel = _KERNELS[resample]
    size = [out.shape[0], out.shape[1]]
    with _on_this_thread():
        if _native_uint8_resize(resample):
            kernel(source, size, False, None, None, out=target)
        else:
            resized = torch.empty(target.shape, dtype=torch.float32, memory_format=torch.channels_last)
            kernel(source.to(torch.float32), size, False, None, None, out=resized)
            if resample != "bilinear":  # bicubic overshoots; torchvision clamps all but bilinear
                resized.clamp_(0, 255)
            target.copy_(resized.round_())


@contextlib.contextmanager
def _on_this_thread() -> Iterator[None]:
    """torch's operators inside run on the calling thread alone.

    Where torch's resize kernels are not the serial AVX2 ones (a CPU without
    AVX2, or bicubic on some), they split each image over torch's OpenMP
    team: several forks and joins per image, and on a decode thread a team
    of its own. The OpenMP thread count is a setting of each thread, so it
    is set to one for this thread only, and set back after: the user's
    threads, and this one afterwards, keep torch's threads.
    """
    threads = torch.get_num_threads()  # first sets this thread up for torch, which would undo the one
    omp = _openmp() if threads > 1 else None
    if omp is None:
        yield
        return
    omp.omp_set_num_threads(1)
    try:
        yield
    finally:
        omp.omp_set_num_threads(threads)


@functools.lru_cache(maxsize=None)
def _openmp() -> Any:
    """The OpenMP runtime loaded in this process (GNU's or LLVM's, the one
    torch runs its threads on), or None where none is found."""
    try:
        with open("/proc/self/maps") as maps:
            paths = sorted({line.split()[-1] for line in maps if line.rstrip().endswith((".so", ".so.1", ".so.5"))})
    except OSError:  # not Linux
        return None
    for path in paths:
        if os.path.basename(path).startswith(("libgomp", "libomp", "libiomp5")):
            try:
                runtime = ctypes.CDLL(path)
                if runtime.omp_get_max_threads() == torch.get_num_threads():  # torch's, as far as one can tell
                    return runtime
            except (OSError, AttributeError):
                continue
    return None


def _flip_into(image: np.ndarray, out: np.ndarray) -> None:
    """Write [H, W, C] ``image`` into ``out`` (another array) mirrored left to right.

    torch's flip, a few rows at a time: over twice as fast as NumPy's
    reversed copy of 3-byte pixels, and each call too small for torch to
    split across its threads (which spin where decode threads or other
    processes hold the cores)."""
    source, target = torch.from_numpy(image), torch.from_numpy(out)
    rows = max(1, _SERIAL // max(1, image.shape[1] * image.shape[2]))
    for top in range(0, image.shape[0], rows):
        target[top:top + rows] = source[top:top + rows].flip(1)


_SERIAL = 32768  # elements: torch runs an elementwise op this small on the calling thread (at::internal::GRAIN_SIZE)


@functools.lru_cache(maxsize=None)
def _native_uint8_resize(resample: str) -> bool:
    """Whether ``v2.functional.resize`` resizes a uint8 CPU image with
    ``resample`` ("bilinear" or "bicubic") by torch's uint8 kernel, not
    through float32 and back (the two differ by a level here and there).

    torchvision decides by the CPU torch runs on (``ATEN_CPU_CAPABILITY``
    included), and the rule changed between releases, so its own helper
    answers where the installed torchvision has it.
    """
    try:
        from torchvision.transforms import InterpolationMode
        from torchvision.transforms.v2.functional._geometry import _do_native_uint8_resize_on_cpu
    except ImportError:  # a torchvision without the helper: its rule as of 0.29
        if resample != "bilinear":
            return True
        return torch.backends.cpu.get_cpu_capability() in ("AVX2", "AVX512") \
            or platform.machine() in ("aarch64", "arm64")
    return bool(_do_native_uint8_resize_on_cpu(InterpolationMode(resample)))


def _kernel(mode: str) -> Any:
    """torch's antialiased resize op for ``mode`` with an ``out=`` argument;
    where a torch release lacks it, F.interpolate (the same kernel) and a copy."""
    op = getattr(torch._C._nn, f"_upsample_{mode}2d_aa", None)
    if op is not None:
        return op

    def interpolate(source: torch.Tensor, size: list[int], align_corners: bool, scale_h: None,
                    scale_w: None, *, out: torch.Tensor) -> None:
        out.copy_(torch.nn.functional.interpolate(source, size=size, mode=mode, antialias=True,
                                                  align_corners=align_corners))
    return interpolate


_KERNELS = {mode: _kernel(mode) for mode in ("bilinear", "bicubic")}


def fusable_default(default: Any) -> bool:
    """Whether an image feature's ``default`` can go through a fused head as
    the unfused transform takes it: none (the feature is required), or an RGB
    uint8 tensor [3, H, W] on the CPU (others go to the transform unfused)."""
    return default is _REQUIRED or (isinstance(default, torch.Tensor) and default.dtype == torch.uint8
                                    and default.dim() == 3 and default.shape[0] == 3
                                    and default.device.type == "cpu" and min(default.shape) > 0)


class CroppedImage(Image):
    """An RGB :class:`Image` whose decoding does a transform's fused head, for
    the per-sample path (``DataLoader(batch_size=64)``): the crop and flip are
    drawn from torch's global RNG with the calls the transform makes, the JPEG
    is decoded only inside the window with the image's IDCT (``decoder``:
    "accurate" unless "fast" was asked for), resized by ``v2.Resize``'s kernel
    and flipped. The result (a contiguous uint8 [3, H, W]), and the RNG's
    state after it, equal the unfused ``Image()`` + transform's, bit for bit.
    A JPEG whose window cannot be decoded alone (corrupt data libjpeg papers
    over with a warning, which the window decoder refuses) is decoded whole
    as ``Image`` decodes it, then cropped: the same pixels.
    """

    draws = True  # the crop and flip, from torch's global generator

    def __init__(self, image: Image, plan: CropPlan) -> None:
        super().__init__(image.key, mode="RGB", frames="first", decoder=image.decoder, default=image.default)
        self.plan = plan

    def decode(self, record: dict) -> Any:
        """The record's image through the fused head; a record that lacks it
        takes the default through the head too (cropped, flipped, the draws
        made), as the unfused transform takes it. Only a default
        :func:`fusable_default` is fused (:func:`~tfrecord_torch.data.imagebatch.fuse_per_sample`)."""
        value = self.raw(record)
        if value is not None:
            return self.convert(value)
        default = self.default
        crop = crop_params(self.plan, int(default.shape[1]), int(default.shape[2]), None)
        planes = torch.from_numpy(self._head(np.ascontiguousarray(default.permute(1, 2, 0).numpy()), crop.box,
                                             crop.flip))
        return planes if type(default) is torch.Tensor else as_image(planes)  # the default's type, as unfused

    def convert(self, value: Any) -> torch.Tensor:
        if len(value) != 1:
            raise FeatureError(self.key, f"holds {len(value)} images, expected 1")
        data = value[0]
        try:
            header = read_header(data)
            check_pixels(header)
            crop = crop_params(self.plan, header.height, header.width, None)
            window, box = self._window(data, fast_jpeg(header), crop.box)
            planes = self._head(window, box, crop.flip)
        except Exception as e:  # decoders raise many types
            raise FeatureError(self.key, f"cannot decode image ({len(data)} bytes): "
                                         f"{type(e).__name__}: {e}") from e
        return as_image(torch.from_numpy(planes))

    def _head(self, pixels: np.ndarray, box: Box, flip: bool) -> np.ndarray:
        """``box`` of ``pixels`` [H, W, 3] resized to the plan's size and flipped if
        ``flip``: contiguous planes, as the unfused transform gives them (DataLoader's
        collate then stacks them with plain copies, and the flip comes free in the same pass)."""
        out = np.empty((*self.plan.size, 3), np.uint8)
        resize_into(pixels, box, False, self.plan.resample, out)
        return to_planes(out, flip=flip)

    def _window(self, data: bytes, alone: bool, box: Box) -> tuple[np.ndarray, Box]:
        """The pixels holding ``box`` and where it lies in them: the window
        alone where it can be decoded so (``alone``), else the whole image."""
        if alone:
            try:
                window = decode_jpeg_window(data, box, decoder=self.jpeg_decoder)
                return window, Box(0, 0, box.height, box.width)
            except ValueError:  # a warning libjpeg papers over: the whole decode says what it gives
                pass
        return decode_hwc(data, "RGB", decoder=self.jpeg_decoder), box
