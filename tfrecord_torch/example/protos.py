"""tf.train.Example and friends (and tf.TensorProto), built at import time in a private pool.

The message classes are made from descriptors we construct here, in a
descriptor pool of our own, rather than from generated ``*_pb2`` modules that
register ``tensorflow.Example`` in protobuf's default pool. That is what lets
this package and TensorFlow be imported in one process in either order (the
``tfrecord`` package's copy collides with TensorFlow's: "duplicate symbol
'tensorflow.BytesList'"). The wire format does not depend on the pool or the
package name, so the bytes are the same as TensorFlow's.
"""

from __future__ import annotations

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

_F = descriptor_pb2.FieldDescriptorProto
_PACKAGE = "tfrecord_torch.tf"


def _message(file, name, fields, nested=()):
    msg = file.message_type.add(name=name)
    for entry in nested:
        msg.nested_type.append(entry)
    _add_fields(msg, fields)
    return msg


def _add_fields(msg, fields):
    for number, (fname, ftype, label, type_name, extra) in enumerate(fields, start=1):
        field = msg.field.add(name=fname, number=number, type=ftype, label=label)
        if type_name:
            field.type_name = f".{_PACKAGE}.{type_name}"
        if extra.get("packed"):
            field.options.packed = True
        if "oneof" in extra:
            field.oneof_index = extra["oneof"]


def _map_entry(name, value_type):
    entry = descriptor_pb2.DescriptorProto(name=name)
    entry.options.map_entry = True
    entry.field.add(name="key", number=1, type=_F.TYPE_STRING, label=_F.LABEL_OPTIONAL)
    entry.field.add(name="value", number=2, type=_F.TYPE_MESSAGE, label=_F.LABEL_OPTIONAL,
                    type_name=f".{_PACKAGE}.{value_type}")
    return entry


def _build():
    file = descriptor_pb2.FileDescriptorProto(name="tfrecord_torch/example.proto",
                                              package=_PACKAGE, syntax="proto3")
    rep, opt = _F.LABEL_REPEATED, _F.LABEL_OPTIONAL
    _message(file, "BytesList", [("value", _F.TYPE_BYTES, rep, None, {})])
    _message(file, "FloatList", [("value", _F.TYPE_FLOAT, rep, None, {"packed": True})])
    _message(file, "Int64List", [("value", _F.TYPE_INT64, rep, None, {"packed": True})])
    feature = _message(file, "Feature", [
        ("bytes_list", _F.TYPE_MESSAGE, opt, "BytesList", {"oneof": 0}),
        ("float_list", _F.TYPE_MESSAGE, opt, "FloatList", {"oneof": 0}),
        ("int64_list", _F.TYPE_MESSAGE, opt, "Int64List", {"oneof": 0}),
    ])
    feature.oneof_decl.add(name="kind")
    _message(file, "Features", [("feature", _F.TYPE_MESSAGE, rep, "Features.FeatureEntry", {})],
             nested=[_map_entry("FeatureEntry", "Feature")])
    _message(file, "FeatureList", [("feature", _F.TYPE_MESSAGE, rep, "Feature", {})])
    _message(file, "FeatureLists",
             [("feature_list", _F.TYPE_MESSAGE, rep, "FeatureLists.FeatureListEntry", {})],
             nested=[_map_entry("FeatureListEntry", "FeatureList")])
    _message(file, "Example", [("features", _F.TYPE_MESSAGE, opt, "Features", {})])
    _message(file, "SequenceExample", [
        ("context", _F.TYPE_MESSAGE, opt, "Features", {}),
        ("feature_lists", _F.TYPE_MESSAGE, opt, "FeatureLists", {}),
    ])
    _tensor_messages(file)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    names = ["BytesList", "FloatList", "Int64List", "Feature", "Features", "FeatureList",
             "FeatureLists", "Example", "SequenceExample", "TensorShapeProto", "TensorProto"]
    return {n: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{_PACKAGE}.{n}"))
            for n in names}


def _tensor_messages(file):
    """TensorProto and TensorShapeProto (tensorflow/core/framework/tensor.proto,
    tensor_shape.proto) with TF's field numbers; the dtype enum as a plain
    int32 (the same varint on the wire), and the resource and variant fields
    left out (their dtypes are refused; protobuf skips the unknown fields)."""
    rep, opt = _F.LABEL_REPEATED, _F.LABEL_OPTIONAL
    dim = descriptor_pb2.DescriptorProto(name="Dim")
    dim.field.add(name="size", number=1, type=_F.TYPE_INT64, label=opt)
    dim.field.add(name="name", number=2, type=_F.TYPE_STRING, label=opt)
    shape = file.message_type.add(name="TensorShapeProto")
    shape.nested_type.append(dim)
    shape.field.add(name="dim", number=2, type=_F.TYPE_MESSAGE, label=rep,
                    type_name=f".{_PACKAGE}.TensorShapeProto.Dim")
    shape.field.add(name="unknown_rank", number=3, type=_F.TYPE_BOOL, label=opt)
    tensor = file.message_type.add(name="TensorProto")
    tensor.field.add(name="dtype", number=1, type=_F.TYPE_INT32, label=opt)
    tensor.field.add(name="tensor_shape", number=2, type=_F.TYPE_MESSAGE, label=opt,
                     type_name=f".{_PACKAGE}.TensorShapeProto")
    tensor.field.add(name="version_number", number=3, type=_F.TYPE_INT32, label=opt)
    tensor.field.add(name="tensor_content", number=4, type=_F.TYPE_BYTES, label=opt)
    for name, number, ftype in [("float_val", 5, _F.TYPE_FLOAT), ("double_val", 6, _F.TYPE_DOUBLE),
                                ("int_val", 7, _F.TYPE_INT32), ("string_val", 8, _F.TYPE_BYTES),
                                ("scomplex_val", 9, _F.TYPE_FLOAT), ("int64_val", 10, _F.TYPE_INT64),
                                ("bool_val", 11, _F.TYPE_BOOL), ("dcomplex_val", 12, _F.TYPE_DOUBLE),
                                ("half_val", 13, _F.TYPE_INT32), ("uint32_val", 16, _F.TYPE_UINT32),
                                ("uint64_val", 17, _F.TYPE_UINT64)]:
        field = tensor.field.add(name=name, number=number, type=ftype, label=rep)
        if ftype != _F.TYPE_BYTES:
            field.options.packed = True
    tensor.field.add(name="float8_val", number=18, type=_F.TYPE_BYTES, label=opt)


_CLASSES = _build()
BytesList = _CLASSES["BytesList"]
FloatList = _CLASSES["FloatList"]
Int64List = _CLASSES["Int64List"]
Feature = _CLASSES["Feature"]
Features = _CLASSES["Features"]
FeatureList = _CLASSES["FeatureList"]
FeatureLists = _CLASSES["FeatureLists"]
Example = _CLASSES["Example"]
SequenceExample = _CLASSES["SequenceExample"]
TensorShapeProto = _CLASSES["TensorShapeProto"]
TensorProto = _CLASSES["TensorProto"]
