"""FFCV and litdata beside tf.data in the image cases, each from its own venv.

A case adds both rows with one line, :func:`add_image_peers`. Each row converts the case's
TFRecord into its own format in its own process before the timed passes (not timed, as
tf.data's data preparation is not), keeping the JPEG bytes as they are, so every row of a
case decodes the same bytes. Without the venv (``benchmarks/venvs/ffcv``, ``.../litdata``;
see benchmarks/venvs/README.md) the harness skips the row and says why.
"""

from __future__ import annotations

from benchmarks.harness.registry import SPEC, target, worker

PEERS = ("FFCV", "litdata")
FFCV_NOTE = ("FFCV 1.0.2 (venv benchmarks/venvs/ffcv): a .beton written untimed in the row's process from the "
             "TFRecord's JPEG bytes, stored unchanged (RGBImageField(write_mode='jpg') would re-encode them from "
             "pixels with OpenCV; its encode is replaced on the field instance by one that stores the given bytes, "
             "what its jpg branch stores after encoding), IntField label; Loader(batch_size=64, num_workers=2 "
             "(threads), order=SEQUENTIAL, drop_last=False, os_cache=True) with [{pipeline}, ToTensor(), "
             "ToTorchImage()]: uint8 {shape} (libjpeg-turbo, TJFLAG_FASTDCT{resize}); no checksum")
LITDATA_NOTE = ("litdata 0.2.76 (venv benchmarks/venvs/litdata): optimize() (untimed, in the row's process) writes "
                "{{'image': Jpeg(bytes=the TFRecord's JPEG, max_quality=None) (kept as is), 'label': int}}; "
                "StreamingDataset(dir{transform}) through StreamingDataLoader(batch_size=64, num_workers=2): its "
                "JPEG serializer decodes with torchvision.io.decode_jpeg(mode=RGB) (accurate IDCT){crop}, "
                "uint8 [64, 3, {size}]; no checksum")


def add_image_peers(case_name: str, *, crop: int | None = None) -> None:
    """Register the FFCV and litdata rows of an image case, and the targets over them: a full
    decode to uint8 [64, 3, H, W] batches, or with ``crop`` RandomResizedCrop(crop) and a
    random horizontal flip, each in the peer's standard spelling."""
    if crop is None:
        ffcv_note = FFCV_NOTE.format(pipeline="SimpleRGBImageDecoder()", shape="[64, 3, H, W]", resize="")
        lit_note = LITDATA_NOTE.format(transform="", crop="", size="H, W")
    else:
        ffcv_note = FFCV_NOTE.format(
            pipeline=f"RandomResizedCropRGBImageDecoder(({crop}, {crop})), RandomHorizontalFlip()",
            shape=f"[64, 3, {crop}, {crop}]", resize="; full decode, then crop and cv2.resize(INTER_AREA)")
        lit_note = LITDATA_NOTE.format(
            transform=f", transform=v2.RandomResizedCrop({crop}) + v2.RandomHorizontalFlip() on the image",
            crop=", then the crop on the decoded image", size=f"{crop}, {crop}")
    worker(case_name, "FFCV", note=ffcv_note, python="ffcv")(lambda path: ffcv_batches(path, crop))
    worker(case_name, "litdata", note=lit_note, python="litdata")(lambda path: litdata_batches(path, crop))
    peer_targets(case_name)


def peer_targets(case_name: str) -> None:
    """Ours in batch mode, with and without workers (the fastest spellings), at least as fast as
    each peer."""
    for peer in PEERS:
        for ours in ("ours batch mode", "ours batch mode (workers=0)"):
            target(case_name, f"{ours} >= 1.0x {peer}", ours, peer, at_least=1.0)


def _records(path) -> tuple[list[bytes], list[int]]:
    """The 'image' bytes and the 'label' of every record of ``path``."""
    from tfrecord_torch import parse_example, read_records

    records = [parse_example(p) for p in read_records(path)]
    return [r["image"][0] for r in records], [int(r["label"][0]) for r in records]


def _scratch(prefix: str) -> str:
    """A new folder for a peer's copy of the data, removed when the worker process exits."""
    import atexit
    import shutil
    import tempfile

    folder = tempfile.mkdtemp(prefix=prefix, dir=SPEC.get("scratch"))
    atexit.register(shutil.rmtree, folder, True)
    return folder


class _Pairs:
    """(jpeg bytes, label) by index, as FFCV's DatasetWriter.from_indexed_dataset reads them."""

    def __init__(self, images: list[bytes], labels: list[int]):
        self.images, self.labels = images, labels

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, i: int) -> tuple[bytes, int]:
        return self.images[i], self.labels[i]


def _store_jpeg(destination, jpeg: bytes, malloc) -> None:
    """RGBImageField.encode's 'jpg' branch, with the given JPEG bytes in place of a re-encode."""
    import numpy as np
    from ffcv.fields.rgb_image import IMAGE_MODES

    from tfrecord_torch.features.images.limits import read_header

    header = read_header(jpeg)
    data = np.frombuffer(jpeg, np.uint8)
    destination["mode"] = IMAGE_MODES["jpg"]
    destination["height"], destination["width"] = header.height, header.width
    destination["data_ptr"], storage = malloc(data.nbytes)
    storage[:] = data


def ffcv_batches(path, crop: int | None):
    """FFCV's Loader over a .beton holding ``path``'s JPEG bytes: uint8 [64, 3, H, W] batches."""
    import os

    from ffcv.fields import IntField, RGBImageField
    from ffcv.fields.decoders import IntDecoder, RandomResizedCropRGBImageDecoder, SimpleRGBImageDecoder
    from ffcv.loader import Loader, OrderOption
    from ffcv.transforms import RandomHorizontalFlip, ToTensor, ToTorchImage
    from ffcv.writer import DatasetWriter

    from benchmarks.cases.images import IMAGE_BATCH, _image_tally

    images, labels = _records(path)
    beton = os.path.join(_scratch("ffcv-"), "data.beton")
    field = RGBImageField(write_mode="jpg")
    field.encode = _store_jpeg  # the writer looks the field's type up by type(field): keep the class
    DatasetWriter(beton, {"image": field, "label": IntField()}, num_workers=2).from_indexed_dataset(
        _Pairs(images, labels))
    if crop is None:
        image = [SimpleRGBImageDecoder()]
    else:
        image = [RandomResizedCropRGBImageDecoder((crop, crop)), RandomHorizontalFlip()]
    loader = Loader(beton, batch_size=IMAGE_BATCH, num_workers=2, order=OrderOption.SEQUENTIAL, drop_last=False,
                    os_cache=True, pipelines={"image": [*image, ToTensor(), ToTorchImage()], "label": [IntDecoder(), ToTensor()]})
    return lambda: _image_tally({"image": im, "label": lab} for im, lab in loader)


def _litdata_sample(pair):
    from litdata import Jpeg

    jpeg, label = pair
    return {"image": Jpeg(bytes=jpeg, max_quality=None), "label": label}  # no cap: never re-encoded


class _CropImage:
    """v2.RandomResizedCrop(crop) + v2.RandomHorizontalFlip() on a sample's 'image'."""

    def __init__(self, crop: int):
        from torchvision.transforms import v2

        self.transform = v2.Compose([v2.RandomResizedCrop(crop), v2.RandomHorizontalFlip()])

    def __call__(self, sample: dict) -> dict:
        return {**sample, "image": self.transform(sample["image"])}


def litdata_batches(path, crop: int | None):
    """litdata's StreamingDataLoader over an optimize()d copy of ``path``'s JPEG bytes."""
    import os

    from litdata import StreamingDataLoader, StreamingDataset, optimize

    from benchmarks.cases.images import IMAGE_BATCH, _image_tally

    images, labels = _records(path)
    out = os.path.join(_scratch("litdata-"), "optimized")
    optimize(fn=_litdata_sample, inputs=list(zip(images, labels, strict=True)), output_dir=out, chunk_bytes="64MB",
             num_workers=2, start_method="fork")
    ds = StreamingDataset(out, transform=None if crop is None else _CropImage(crop))
    loader = StreamingDataLoader(ds, batch_size=IMAGE_BATCH, num_workers=2)
    return lambda: _image_tally(loader)
