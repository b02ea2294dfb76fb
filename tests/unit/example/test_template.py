"""One Example template serves both decoders: one payload, and a byte matrix of many."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from tfrecord_torch import make_example
from tfrecord_torch.example.codec import parse_example_protobuf
from tfrecord_torch.example.template import Template


def _same(have, want) -> bool:
    if sorted(have) != sorted(want):
        return False
    for key, w in want.items():
        h = have[key]
        if isinstance(w, np.ndarray):
            if not (isinstance(h, np.ndarray) and h.dtype == w.dtype and h.tobytes() == w.tobytes()):
                return False
        elif list(h) != list(w):
            return False
    return True


values = st.fixed_dictionaries({
    "i": st.lists(st.integers(-(2**63), 2**63 - 1), max_size=4),
    "f": st.lists(st.floats(width=32, allow_nan=False), max_size=4),
    "b": st.lists(st.binary(max_size=6), min_size=1, max_size=3),
})


@settings(max_examples=60, deadline=None)
@given(values, st.integers(2, 5))
def test_one_payload_and_a_matrix_row_decode_alike(mapping, n):
    """What the template decodes of one payload, its batch form gives as that
    payload's row of a matrix; both equal protobuf."""
    mapping = {"i": np.array(mapping["i"], np.int64), "f": np.array(mapping["f"], np.float32), "b": mapping["b"]}
    payload = make_example(mapping)
    template = Template.compile(payload)
    assert template is not None
    want = parse_example_protobuf(payload)
    assert _same(template.decode(payload), want)
    rows = np.tile(np.frombuffer(payload, np.uint8), (n, 1))
    assert template.matches(rows).all()
    columns = template.extract(rows)
    for r in range(n):
        assert _same({k: (c[r] if isinstance(c, list) else c[r].copy()) for k, c in columns.items()}, want)


def test_a_row_of_another_structure_does_not_match():
    template = Template.compile(make_example({"a": 1, "b": b"xy"}))
    same_length_other_key = make_example({"c": 1, "b": b"xy"})
    assert template.decode(same_length_other_key) is None
    assert not template.matches(np.frombuffer(same_length_other_key, np.uint8)[None]).any()


def test_unpacked_numbers_make_no_template():
    """One rule for both decoders: numeric values in one packed run each, as TensorFlow writes them."""
    def ld(number, body):
        return bytes([number << 3 | 2, len(body)]) + body

    unpacked = ld(1, ld(1, ld(1, b"i") + ld(2, ld(3, b"\x08\x05\x08\x07"))))
    assert parse_example_protobuf(unpacked)["i"].tolist() == [5, 7]
    assert Template.compile(unpacked) is None
