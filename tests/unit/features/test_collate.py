"""pad_collate: images of different sizes padded into one batch, with their sizes and masks."""

from helpers import image_shards
from torch.utils.data import DataLoader

from tfrecord_torch import TFRecordDataset, pad_collate, presets


def test_pad_collate(tmp_path):
    image_shards(tmp_path, sizes=[(4, 6), (7, 3), (5, 5)])
    loader = DataLoader(TFRecordDataset(tmp_path, features=presets.tfds()), batch_size=3,
                        collate_fn=pad_collate)
    batch = next(iter(loader))
    assert batch["image"].shape == (3, 3, 7, 6)
    assert batch["image_size"].tolist() == [[4, 6], [7, 3], [5, 5]]
    assert batch["image_mask"][1].sum() == 21 and not batch["image_mask"][1, 0, 3]
    assert batch["label"].tolist() == [0, 1, 2]
    assert (batch["image"][1, :, :, 3:] == 0).all()
