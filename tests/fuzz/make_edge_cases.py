#!/usr/bin/env python3
"""Writes the hand-made edge cases of the ONNX loader's fuzz corpus.

    python3 tests/fuzz/make_edge_cases.py tests/fuzz/corpus

Plain Python (no onnx or protobuf package: the wire format is written here by
hand, which also allows models the onnx package would refuse to build). The
files are checked in; rerun this after changing it. Each model is small and
aims at one check of engine/src/onnx/import.cpp: valid tiny graphs of the op
families (so mutations start from something that loads), bad structure
(cycles, undefined names, duplicate outputs, rank > 8, overflowing or
negative dims, wrong data sizes, unsafe external data), and attributes and
constant inputs with edge values for the shape arithmetic and the constant
folding done at load time (zero strides and kernels, out-of-range axes and
indices, huge Range/ConstantOfShape/Expand/Tile sizes, INT64 extremes).
"""
import os
import struct
import sys

# ------------------------------------------------------------ wire format

def varint(v):
    v &= (1 << 64) - 1
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def key(num, wt):
    return varint((num << 3) | wt)


def f_int(num, v):
    return key(num, 0) + varint(v)


def f_bytes(num, b):
    if isinstance(b, str):
        b = b.encode()
    return key(num, 2) + varint(len(b)) + b


def f_float(num, x):
    return key(num, 5) + struct.pack("<f", x)


# ONNX message builders (field numbers of onnx.proto).
FLOAT, UINT8, INT8, INT32, INT64, STRING, BOOL, FLOAT16, DOUBLE = 1, 2, 3, 6, 7, 8, 9, 10, 11
A_FLOAT, A_INT, A_STRING, A_TENSOR, A_GRAPH, A_FLOATS, A_INTS = 1, 2, 3, 4, 5, 6, 7


def tensor(name, dims, dtype=FLOAT, raw=None, floats=None, int64s=None, int32s=None, external=None, location=None):
    b = b"".join(f_int(1, d) for d in dims) + f_int(2, dtype) + f_bytes(8, name)
    if raw is not None:
        b += f_bytes(9, raw)
    if floats is not None:
        b += f_bytes(4, b"".join(struct.pack("<f", x) for x in floats))
    if int64s is not None:
        b += f_bytes(7, b"".join(varint(x) for x in int64s))
    if int32s is not None:
        b += f_bytes(5, b"".join(varint(x) for x in int32s))
    if external is not None:
        b += b"".join(f_bytes(13, f_bytes(1, k) + f_bytes(2, v)) for k, v in external) + f_int(14, 1)
    return b


def f32(dims, vals=None):
    n = 1
    for d in dims:
        n *= d
    vals = vals if vals is not None else [((i * 7) % 11 - 5) / 10 for i in range(n)]
    return struct.pack(f"<{n}f", *vals)


def i64(vals):
    return struct.pack(f"<{len(vals)}q", *vals)


def attr_i(name, v):
    return f_bytes(1, name) + f_int(3, v) + f_int(20, A_INT)


def attr_f(name, x):
    return f_bytes(1, name) + f_float(2, x) + f_int(20, A_FLOAT)


def attr_s(name, s):
    return f_bytes(1, name) + f_bytes(4, s) + f_int(20, A_STRING)


def attr_ints(name, vs):
    return f_bytes(1, name) + b"".join(f_int(8, v) for v in vs) + f_int(20, A_INTS)


def attr_t(name, t):
    return f_bytes(1, name) + f_bytes(5, t) + f_int(20, A_TENSOR)


def attr_g(name, g):
    return f_bytes(1, name) + f_bytes(6, g) + f_int(20, A_GRAPH)


def node(op, inputs, outputs, attrs=(), name=None, domain=None):
    b = b"".join(f_bytes(1, i) for i in inputs) + b"".join(f_bytes(2, o) for o in outputs)
    b += f_bytes(3, name if name is not None else op.lower() + "_" + "_".join(outputs))
    b += f_bytes(4, op)
    b += b"".join(f_bytes(5, a) for a in attrs)
    if domain is not None:
        b += f_bytes(7, domain)
    return b


def value_info(name, dims, dtype=FLOAT):
    shape = b"".join(f_bytes(1, f_int(1, d) if isinstance(d, int) else f_bytes(2, d)) for d in dims)
    ttype = f_int(1, dtype) + f_bytes(2, shape)
    return f_bytes(1, name) + f_bytes(2, f_bytes(1, ttype))


def graph(nodes, inputs, outputs, inits=(), name="g"):
    b = b"".join(f_bytes(1, n) for n in nodes) + f_bytes(2, name)
    b += b"".join(f_bytes(5, t) for t in inits)
    b += b"".join(f_bytes(11, v) for v in inputs) + b"".join(f_bytes(12, v) for v in outputs)
    return b


def model(g, opset=13, meta=(), ir=8):
    b = f_int(1, ir) + f_bytes(2, "make_edge_cases") + f_bytes(7, g)
    b += f_bytes(8, f_bytes(1, "") + f_int(2, opset))
    b += b"".join(f_bytes(14, f_bytes(1, k) + f_bytes(2, v)) for k, v in meta)
    return b


def const(name, t):
    return node("Constant", [], [name], [attr_t("value", t)])


def unary(op, shape=(2, 3), attrs=(), opset=13, out_shape=None):
    return model(graph([node(op, ["x"], ["y"], attrs)], [value_info("x", shape)],
                       [value_info("y", out_shape or shape)]), opset)


CASES = {}


def case(name):
    def wrap(fn):
        CASES[name] = fn
        return fn
    return wrap


# --------------------------------------------------- valid tiny models

@case("ok_identity")
def _():
    return unary("Identity")


@case("ok_conv_relu_pool_gemm")
def _():
    w, b = tensor("w", [2, 1, 3, 3], raw=f32([2, 1, 3, 3])), tensor("b", [2], raw=f32([2]))
    fw, fb = tensor("fw", [3, 18], raw=f32([3, 18])), tensor("fb", [3], raw=f32([3]))
    shape = tensor("shape", [2], INT64, raw=i64([1, -1]))
    nodes = [node("Conv", ["x", "w", "b"], ["c"], [attr_ints("pads", [1, 1, 1, 1]), attr_ints("kernel_shape", [3, 3])]),
             node("Relu", ["c"], ["r"]),
             node("MaxPool", ["r"], ["p"], [attr_ints("kernel_shape", [2, 2]), attr_ints("strides", [2, 2])]),
             node("Reshape", ["p", "shape"], ["f"]),
             node("Gemm", ["f", "fw", "fb"], ["y"], [attr_i("transB", 1)])]
    return model(graph(nodes, [value_info("x", [1, 1, 6, 6])], [value_info("y", [1, 3])], [w, b, fw, fb, shape]))


@case("ok_shape_arith")
def _():
    # Shape -> Gather -> Unsqueeze -> Concat -> Reshape: torch's flatten idiom, folded at load.
    nodes = [node("Shape", ["x"], ["s"]),
             const("zero", tensor("zero", [], INT64, raw=i64([0]))),
             node("Gather", ["s", "zero"], ["n"], [attr_i("axis", 0)]),
             const("axes", tensor("axes", [1], INT64, raw=i64([0]))),
             node("Unsqueeze", ["n", "axes"], ["n1"]),
             const("m1", tensor("m1", [1], INT64, raw=i64([-1]))),
             node("Concat", ["n1", "m1"], ["shape"], [attr_i("axis", 0)]),
             node("Reshape", ["x", "shape"], ["y"])]
    return model(graph(nodes, [value_info("x", [2, 3, 4])], [value_info("y", [2, 12])]))


@case("ok_elementwise_broadcast")
def _():
    c = tensor("c", [3], raw=f32([3]))
    nodes = [node("Add", ["x", "c"], ["a"]), node("Mul", ["a", "a"], ["m"]), node("Sigmoid", ["m"], ["s"]),
             node("Softmax", ["s"], ["y"], [attr_i("axis", -1)])]
    return model(graph(nodes, [value_info("x", [2, 3])], [value_info("y", [2, 3])], [c]))


@case("ok_slice_concat_transpose")
def _():
    nodes = [const("st", tensor("st", [1], INT64, raw=i64([1]))), const("en", tensor("en", [1], INT64, raw=i64([3]))),
             const("ax", tensor("ax", [1], INT64, raw=i64([1]))),
             node("Slice", ["x", "st", "en", "ax"], ["s"]), node("Concat", ["s", "s"], ["c"], [attr_i("axis", 0)]),
             node("Transpose", ["c"], ["y"], [attr_ints("perm", [1, 0])])]
    return model(graph(nodes, [value_info("x", [2, 4])], [value_info("y", [2, 4])]))


@case("ok_batchnorm_avgpool")
def _():
    inits = [tensor(n, [2], raw=f32([2], v)) for n, v in
             (("scale", [1, 2]), ("bias", [0, 1]), ("mean", [0.5, -0.5]), ("var", [1, 4]))]
    nodes = [node("BatchNormalization", ["x", "scale", "bias", "mean", "var"], ["b"]),
             node("AveragePool", ["b"], ["y"], [attr_ints("kernel_shape", [2, 2])])]
    return model(graph(nodes, [value_info("x", [1, 2, 4, 4])], [value_info("y", [1, 2, 3, 3])], inits))


@case("ok_job_file_metadata")
def _():
    meta = [("jobflow.version", "1"), ("jobflow.job_type", "predict"), ("jobflow.input_structure", "(Numpy)"),
            ("jobflow.output_structure", "Numpy"), ("jobflow.job_name", "edge"), ("jobflow.seed", "7")]
    return model(graph([node("Relu", ["x"], ["y"])], [value_info("x", [2, 2])], [value_info("y", [2, 2])]), 17, meta)


# ------------------------------------------------------- bad structure

@case("bad_empty_graph_output_is_input")
def _():
    return model(graph([], [value_info("x", [2])], [value_info("x", [2])]))


@case("bad_cycle")
def _():
    return model(graph([node("Relu", ["b"], ["a"]), node("Relu", ["a"], ["b"])], [value_info("x", [2])],
                       [value_info("b", [2])]))


@case("bad_undefined_input")
def _():
    return model(graph([node("Relu", ["nope"], ["y"])], [value_info("x", [2])], [value_info("y", [2])]))


@case("bad_duplicate_output")
def _():
    return model(graph([node("Relu", ["x"], ["y"]), node("Relu", ["x"], ["y"])], [value_info("x", [2])],
                       [value_info("y", [2])]))


@case("bad_rank9_input")
def _():
    return unary("Relu", [1] * 9)


@case("bad_dynamic_batch")
def _():
    return unary("Relu", ["N", 3])


@case("bad_zero_dim_input")
def _():
    return unary("Relu", [0, 3])


@case("bad_dims_overflow")
def _():
    t = tensor("w", [1 << 31, 1 << 31, 1 << 31, 8], raw=b"")
    return model(graph([node("Add", ["x", "w"], ["y"])], [value_info("x", [2])], [value_info("y", [2])], [t]))


@case("bad_negative_dim")
def _():
    t = tensor("w", [-1, 2], raw=f32([2]))
    return model(graph([node("Add", ["x", "w"], ["y"])], [value_info("x", [2])], [value_info("y", [2])], [t]))


@case("bad_raw_size")
def _():
    t = tensor("w", [4, 4], raw=f32([3]))
    return model(graph([node("Add", ["x", "w"], ["y"])], [value_info("x", [4, 4])], [value_info("y", [4, 4])], [t]))


@case("bad_float_data_count")
def _():
    t = tensor("w", [2, 2], floats=[1, 2, 3])
    return model(graph([node("Add", ["x", "w"], ["y"])], [value_info("x", [2, 2])], [value_info("y", [2, 2])], [t]))


@case("bad_tensor_over_limit")
def _():
    t = tensor("w", [4096, 4097], raw=b"")  # 64 MiB of float: over the fuzz limit of 16 MiB
    return model(graph([node("Add", ["x", "w"], ["y"])], [value_info("x", [2])], [value_info("y", [2])], [t]))


@case("bad_external_absolute")
def _():
    t = tensor("w", [2], external=[("location", "/etc/passwd"), ("offset", "0"), ("length", "8")])
    return model(graph([node("Add", ["x", "w"], ["y"])], [value_info("x", [2])], [value_info("y", [2])], [t]))


@case("bad_external_parent")
def _():
    t = tensor("w", [2], external=[("location", "../../etc/passwd")])
    return model(graph([node("Add", ["x", "w"], ["y"])], [value_info("x", [2])], [value_info("y", [2])], [t]))


@case("bad_external_offset_overflow")
def _():
    t = tensor("w", [2], external=[("location", "w.bin"), ("offset", "18446744073709551615"), ("length", "8")])
    return model(graph([node("Add", ["x", "w"], ["y"])], [value_info("x", [2])], [value_info("y", [2])], [t]))


@case("bad_string_and_bool_initializers")
def _():
    s = f_int(1, 1) + f_int(2, STRING) + f_bytes(8, "s") + f_bytes(6, "hello")
    b = tensor("b", [3], BOOL, raw=b"\x01\x00\x02")
    return model(graph([node("Identity", ["s"], ["y"]), node("Not", ["b"], ["z"])], [value_info("x", [2])],
                       [value_info("y", [1]), value_info("z", [3], BOOL)], [s, b]))


@case("bad_opset_future")
def _():
    return model(graph([node("Relu", ["x"], ["y"])], [value_info("x", [2])], [value_info("y", [2])]), 99)


@case("bad_opset_zero_and_custom_domain")
def _():
    return model(graph([node("Relu", ["x"], ["y"], domain="com.example")], [value_info("x", [2])],
                       [value_info("y", [2])]), 0)


@case("bad_empty_op_type")
def _():
    return model(graph([node("", ["x"], ["y"])], [value_info("x", [2])], [value_info("y", [2])]))


@case("bad_subgraph_if")
def _():
    inner = graph([node("Relu", ["x"], ["z"])], [], [value_info("z", [2])], name="then")
    c = tensor("c", [], BOOL, raw=b"\x01")
    n = node("If", ["c"], ["y"], [attr_g("then_branch", inner), attr_g("else_branch", inner)])
    return model(graph([n], [value_info("x", [2])], [value_info("y", [2])], [c]))


@case("bad_deep_nesting")
def _():
    g = graph([], [], [], name="leaf")
    for _ in range(120):  # nested graph attributes: protobuf's recursion limit
        g = graph([node("If", ["c"], ["y"], [attr_g("then_branch", g)])], [], [], name="n")
    return model(g)


@case("bad_job_metadata")
def _():
    meta = [("jobflow.version", "1"), ("jobflow.job_type", "train"), ("jobflow.loss", "nope"),
            ("jobflow.optimizer", "sgd:lr=abc"), ("jobflow.input_structure", "((Numpy,"),
            ("jobflow.output_structure", "(Numpy,Numpy,Numpy)"), ("jobflow.step", "-5"),
            ("jobflow.trainable", ",,,x,,"), ("jobflow.optimizer_state", "missing"), ("jobflow.seed", "1e99")]
    return model(graph([node("Relu", ["x"], ["y"])], [value_info("x", [2, 2])], [value_info("y", [2, 2])]), 17, meta)


@case("bad_input_structure_indices")
def _():
    meta = [("jobflow.version", "1"), ("jobflow.job_type", "predict"), ("jobflow.input_structure", "(Numpy#5)"),
            ("jobflow.output_structure", "Numpy")]
    return model(graph([node("Relu", ["x"], ["y"])], [value_info("x", [2, 2])], [value_info("y", [2, 2])]), 17, meta)


# ---------------------------------- attributes and constants at the edges

@case("edge_maxpool_zero_stride_kernel")
def _():
    return unary("MaxPool", [1, 1, 4, 4], [attr_ints("kernel_shape", [0, 2]), attr_ints("strides", [0, 0])])


@case("edge_maxpool_huge_pads")
def _():
    return unary("MaxPool", [1, 1, 4, 4], [attr_ints("kernel_shape", [2, 2]),
                                            attr_ints("pads", [1 << 40, 0, 1 << 40, 0])])


@case("edge_conv_group_zero_dilation_zero")
def _():
    w = tensor("w", [2, 1, 3, 3], raw=f32([2, 1, 3, 3]))
    n = node("Conv", ["x", "w"], ["y"], [attr_i("group", 0), attr_ints("dilations", [0, 0])])
    return model(graph([n], [value_info("x", [1, 1, 5, 5])], [value_info("y", [1, 2, 3, 3])], [w]))


@case("edge_conv_weight_rank_mismatch")
def _():
    w = tensor("w", [2, 3], raw=f32([2, 3]))
    n = node("Conv", ["x", "w"], ["y"], [attr_ints("kernel_shape", [3, 3])])
    return model(graph([n], [value_info("x", [1, 1, 5, 5])], [value_info("y", [1, 2, 3, 3])], [w]))


@case("edge_depth_to_space_zero_block")
def _():
    return unary("DepthToSpace", [1, 4, 2, 2], [attr_i("blocksize", 0)])


@case("edge_space_to_depth_negative_block")
def _():
    return unary("SpaceToDepth", [1, 1, 4, 4], [attr_i("blocksize", -2)])


@case("edge_flatten_axis_out_of_range")
def _():
    return unary("Flatten", [2, 3], [attr_i("axis", 7)])


@case("edge_softmax_axis_int64_min")
def _():
    return unary("Softmax", [2, 3], [attr_i("axis", -(1 << 63))])


@case("edge_argmax_axis_large")
def _():
    return unary("ArgMax", [2, 3], [attr_i("axis", 1 << 40)])


@case("edge_transpose_bad_perm")
def _():
    return unary("Transpose", [2, 3, 4], [attr_ints("perm", [0, 0, 5])])


@case("edge_split_sizes")
def _():
    s = tensor("split", [2], INT64, raw=i64([5, -2]))
    n = node("Split", ["x", "split"], ["a", "b"], [attr_i("axis", 1)])
    return model(graph([n], [value_info("x", [2, 3])], [value_info("a", [2, 5]), value_info("b", [2, 1])], [s]))


@case("edge_squeeze_axes")
def _():
    a = tensor("axes", [2], INT64, raw=i64([0, 99]))
    return model(graph([node("Squeeze", ["x", "a"], ["y"])], [value_info("x", [1, 3])], [value_info("y", [3])],
                       [tensor("a", [2], INT64, raw=i64([0, 99]))]))


@case("edge_reshape_two_minus_one_and_zero")
def _():
    s = tensor("s", [3], INT64, raw=i64([-1, -1, 0]))
    return model(graph([node("Reshape", ["x", "s"], ["y"])], [value_info("x", [2, 3])], [value_info("y", [6])], [s]))


@case("edge_reshape_overflow_product")
def _():
    s = tensor("s", [3], INT64, raw=i64([1 << 40, 1 << 40, 1 << 40]))
    return model(graph([node("Reshape", ["x", "s"], ["y"])], [value_info("x", [2, 3])], [value_info("y", [6])], [s]))


@case("edge_slice_int64_extremes")
def _():
    inits = [tensor("st", [2], INT64, raw=i64([-(1 << 63), 1 << 62])),
             tensor("en", [2], INT64, raw=i64([(1 << 63) - 1, -(1 << 63)])),
             tensor("ax", [2], INT64, raw=i64([0, 1])), tensor("sp", [2], INT64, raw=i64([-(1 << 63), 0]))]
    return model(graph([node("Slice", ["x", "st", "en", "ax", "sp"], ["y"])], [value_info("x", [2, 3])],
                       [value_info("y", [2, 3])], inits))


@case("edge_gather_index_out_of_range_folded")
def _():
    data = tensor("d", [3], INT64, raw=i64([1, 2, 3]))
    idx = tensor("i", [2], INT64, raw=i64([1000, -1000]))
    nodes = [node("Gather", ["d", "i"], ["g"], [attr_i("axis", 0)]), node("Reshape", ["x", "g"], ["y"])]
    return model(graph(nodes, [value_info("x", [2, 3])], [value_info("y", [6])], [data, idx]))


@case("edge_gather_index_out_of_range_runtime")
def _():
    idx = tensor("i", [2], INT64, raw=i64([7, -9]))
    return model(graph([node("Gather", ["x", "i"], ["y"], [attr_i("axis", 1)])], [value_info("x", [2, 3])],
                       [value_info("y", [2, 2])], [idx]))


@case("edge_concat_axis_and_rank_mismatch")
def _():
    c = tensor("c", [2, 3, 4], raw=f32([2, 3, 4]))
    return model(graph([node("Concat", ["x", "c"], ["y"], [attr_i("axis", 3)])], [value_info("x", [2, 3])],
                       [value_info("y", [2, 3])], [c]))


@case("edge_range_huge_folded")
def _():
    inits = [tensor("s", [], INT64, raw=i64([0])), tensor("l", [], INT64, raw=i64([(1 << 63) - 1])),
             tensor("d", [], INT64, raw=i64([1]))]
    nodes = [node("Range", ["s", "l", "d"], ["r"]), node("Shape", ["r"], ["sh"]), node("Reshape", ["x", "sh"], ["y"])]
    return model(graph(nodes, [value_info("x", [2, 3])], [value_info("y", [6])], inits))


@case("edge_range_zero_delta")
def _():
    inits = [tensor("s", [], FLOAT, raw=f32([1], [0])), tensor("l", [], FLOAT, raw=f32([1], [10])),
             tensor("d", [], FLOAT, raw=f32([1], [0]))]
    return model(graph([node("Range", ["s", "l", "d"], ["y"])], [value_info("x", [2])], [value_info("y", [10])], inits))


@case("edge_constant_of_shape_huge")
def _():
    s = tensor("s", [3], INT64, raw=i64([100000, 100000, 100000]))
    return model(graph([node("ConstantOfShape", ["s"], ["c"]), node("Add", ["x", "c"], ["y"])],
                       [value_info("x", [2])], [value_info("y", [2])], [s]))


@case("edge_expand_huge")
def _():
    s = tensor("s", [3], INT64, raw=i64([1 << 20, 1 << 20, 3]))
    return model(graph([node("Expand", ["x", "s"], ["y"])], [value_info("x", [1, 3])], [value_info("y", [1, 3])], [s]))


@case("edge_tile_huge_and_negative")
def _():
    r = tensor("r", [2], INT64, raw=i64([1 << 31, -3]))
    return model(graph([node("Tile", ["x", "r"], ["y"])], [value_info("x", [2, 3])], [value_info("y", [2, 3])], [r]))


@case("edge_pad_negative_and_huge")
def _():
    p = tensor("p", [4], INT64, raw=i64([-5, 1 << 40, 0, -(1 << 40)]))
    return model(graph([node("Pad", ["x", "p"], ["y"])], [value_info("x", [2, 3])], [value_info("y", [2, 3])], [p]))


@case("edge_trilu_huge_k")
def _():
    k = tensor("k", [], INT64, raw=i64([-(1 << 63)]))
    return model(graph([node("Trilu", ["x", "k"], ["y"])], [value_info("x", [3, 3])], [value_info("y", [3, 3])], [k]))


@case("edge_cast_to_string")
def _():
    return unary("Cast", [2], [attr_i("to", STRING)])


@case("edge_clip_nan_bounds")
def _():
    lo = tensor("lo", [], raw=struct.pack("<f", float("nan")))
    hi = tensor("hi", [], raw=struct.pack("<f", float("-inf")))
    return model(graph([node("Clip", ["x", "lo", "hi"], ["y"])], [value_info("x", [2])], [value_info("y", [2])],
                       [lo, hi]))


@case("edge_leakyrelu_nan_alpha")
def _():
    return unary("LeakyRelu", [2, 2], [attr_f("alpha", float("nan"))])


@case("edge_matmul_rank_mismatch")
def _():
    w = tensor("w", [4, 5, 6], raw=f32([4, 5, 6]))
    return model(graph([node("MatMul", ["x", "w"], ["y"])], [value_info("x", [2, 3])], [value_info("y", [2, 6])], [w]))


@case("edge_gemm_wrong_bias")
def _():
    w, b = tensor("w", [3, 4], raw=f32([3, 4])), tensor("b", [7], raw=f32([7]))
    return model(graph([node("Gemm", ["x", "w", "b"], ["y"])], [value_info("x", [2, 3])], [value_info("y", [2, 4])],
                       [w, b]))


@case("edge_missing_inputs")
def _():
    return model(graph([node("Conv", ["x"], ["y"]), node("Add", ["y"], ["z"])], [value_info("x", [1, 1, 3, 3])],
                       [value_info("z", [1, 1, 3, 3])]))


@case("edge_binary_one_input")
def _():
    return model(graph([node("Add", ["x"], ["y"])], [value_info("x", [2])], [value_info("y", [2])]))


@case("edge_optional_empty_inputs")
def _():
    return model(graph([node("Clip", ["x", "", ""], ["y"]), node("Dropout", ["y", "", ""], ["z", ""])],
                       [value_info("x", [2])], [value_info("z", [2])]))


@case("edge_reduce_axes_repeated")
def _():
    return unary("ReduceSum", [2, 3], [attr_ints("axes", [1, 1, -1, 5])], opset=11, out_shape=[2, 1])


@case("edge_unsqueeze_many_axes")
def _():
    a = tensor("a", [9], INT64, raw=i64(list(range(9))))
    return model(graph([node("Unsqueeze", ["x", "a"], ["y"])], [value_info("x", [2])], [value_info("y", [2])], [a]))


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "corpus")
    os.makedirs(out, exist_ok=True)
    for name, fn in CASES.items():
        with open(os.path.join(out, name + ".onnx"), "wb") as f:
            f.write(fn())
    print(f"{len(CASES)} files written to {out}")


if __name__ == "__main__":
    main()
