import json
import pickle

import pytest

from tfrecord_torch import CorruptRecordError, Int64, Payload
from tfrecord_torch.features.sequence import make_spec


def test_read_gives_the_bytes_or_the_hooks_value():
    assert Payload().read(b'{"a": 1}', "f", 0, 0) == b'{"a": 1}'
    assert Payload(decode=json.loads).read(b'{"a": 1}', "f", 0, 0) == {"a": 1}
    assert Payload(json.loads).read(b"[]", "f", 0, 0) == []


def test_a_hook_that_raises_is_a_located_corrupt_record():
    with pytest.raises(CorruptRecordError, match=r"^shard-1: record 3 at byte offset 120: the payload does not "
                                                 r"decode: Payload\(decode=json\.loads\) raised JSONDecodeError"
                       ) as raised:
        Payload(decode=json.loads).read(b"{", "shard-1", 120, 3)
    assert isinstance(raised.value.__cause__, json.JSONDecodeError)
    assert (raised.value.path, raised.value.offset, raised.value.record) == ("shard-1", 120, 3)
    again = pickle.loads(pickle.dumps(raised.value))  # as a DataLoader worker hands it over
    assert str(again) == str(raised.value)


def test_decode_must_be_callable():
    with pytest.raises(TypeError, match=r"Payload\.decode must be a callable .* got int 5"):
        Payload(decode=5)


def test_repr_and_pickle():
    assert repr(Payload()) == "Payload()"
    assert repr(Payload(decode=json.loads)) == "Payload(decode=json.loads)"
    assert pickle.loads(pickle.dumps(Payload(decode=json.loads))) == Payload(decode=json.loads)


def test_make_spec_keeps_a_payload_and_refuses_sequence_features():
    spec = Payload(decode=json.loads)
    assert make_spec(spec) is spec
    with pytest.raises(ValueError, match=r"features=Payload\(decode=json\.loads\) .* sequence_features="):
        make_spec(spec, {"tokens": Int64()})
