"""The Python tests' reader of a segtrain token store's split: the Megatron indexed
dataset (`<split>.idx` + `<split>.bin`, data/token_store.h), one list of token ids per
document, in store order. Written from the format, independently of segtrain's reader."""
import numpy as np


def read_split(prefix):
    idx = open(prefix + ".idx", "rb").read()
    code = idx[17]  # after the 9-byte magic and the 8-byte version
    n, _ = (int(x) for x in np.frombuffer(idx, np.uint64, 2, 18))
    sizes = np.frombuffer(idx, np.int32, n, 34)
    pointers = np.frombuffer(idx, np.int64, n, 34 + 4 * n)
    dtype = {8: np.uint16, 4: np.int32}[code]
    data = np.fromfile(prefix + ".bin", dtype=dtype)
    item = np.dtype(dtype).itemsize
    return [data[p // item:p // item + s].tolist() for p, s in zip(pointers, sizes)]
