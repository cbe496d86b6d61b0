"""jobflow.typing: the annotations of job functions (OneFlow's oneflow.typing).

Parameters are placeholders, ``tp.Numpy.Placeholder(shape, dtype)``; the
return annotation says what a call gives back:

=====================  ==============================================
``tp.Numpy``           one ``numpy.ndarray``
``tp.ListNumpy``       a list with one array per device (one device: a list of one)
``tp.ListListNumpy``   per device, a list of arrays (the blob split along dim 0)
``tp.Dict[str, T]``    a dict of ``T`` (``typing.Dict`` works as well)
``Tuple[T, ...]``      a tuple (``typing.Tuple``)
``tp.Bundle[T]``       any nesting of tuples, lists and dicts of ``T``
``tp.Callback[T]``     asynchronous: the call returns at once; give it a
                       callback, which receives ``T`` later, in call order
``None``               nothing
=====================  ==============================================
"""
import typing as _typing

from ._dtypes import as_dtype as _as_dtype

Dict = _typing.Dict
Tuple = _typing.Tuple
List = _typing.List

_T = _typing.TypeVar("_T")


class PlaceholderDef:
    """Base of the placeholder types; ``leaf`` is "numpy", "list" or "listlist"."""

    leaf = "numpy"
    shape = ()
    dtype = None
    items = 1


def _placeholder(kind, leaf, shape, dtype, items=1):
    if isinstance(shape, int):
        shape = (shape,)
    shape = tuple(int(d) for d in shape)
    attrs = dict(leaf=leaf, shape=shape, dtype=None if dtype is None else _as_dtype(dtype), items=int(items))
    # A class, as OneFlow makes it, so typing.Tuple[...] accepts it.
    return type(kind + ".Placeholder", (PlaceholderDef,), attrs)


class PyStructCompatibleToBlob:
    """Base of the result annotations."""


class Numpy(PyStructCompatibleToBlob):
    """One ``numpy.ndarray`` of exactly the placeholder's shape and dtype."""

    @staticmethod
    def Placeholder(shape, dtype=None, batch_axis=0):
        """An argument of this shape; dtype None is the config's default_data_type."""
        return _placeholder("Numpy", "numpy", shape, dtype)


class ListNumpy(PyStructCompatibleToBlob):
    """A list with one array per device (Jobflow runs on one: a list of one)."""

    @staticmethod
    def Placeholder(shape, dtype=None, batch_axis=0):
        return _placeholder("ListNumpy", "list", shape, dtype)


class ListListNumpy(PyStructCompatibleToBlob):
    """Per device, a list of ``items`` arrays of ``shape``.

    OneFlow's lists may change length between calls; a compiled plan is
    static, so the length is fixed at definition (``items``, default 1). In
    the body the list is one blob of shape ``(items, *shape)``.
    """

    @staticmethod
    def Placeholder(shape, dtype=None, batch_axis=0, items=1):
        return _placeholder("ListListNumpy", "listlist", shape, dtype, items)


class Callback(_typing.Generic[_T]):
    """``-> tp.Callback[T]``: the job is asynchronous; the callback gets ``T``."""


class Bundle(_typing.Generic[_T]):
    """``-> tp.Bundle[T]``: any nesting of tuples, lists and dicts of ``T``."""


__all__ = ["Numpy", "ListNumpy", "ListListNumpy", "Callback", "Bundle", "Dict", "Tuple", "List",
           "PlaceholderDef", "PyStructCompatibleToBlob"]
