"""Minimal safetensors reader/writer (numpy + torch, no safetensors package).

File format: 8-byte little-endian header length N, N bytes of JSON header
{name: {"dtype", "shape", "data_offsets": [begin, end]}} (offsets relative to the
end of the header), then the raw little-endian tensor bytes.
"""
import json
import struct

import numpy as np
import torch

_NUMPY_DTYPES = {
    "F32": np.float32,
    "F16": np.float16,
    "I64": np.int64,
    "I32": np.int32,
    "BOOL": np.bool_,
    "U8": np.uint8,
}


def _bf16_bytes_to_float32(raw):
    """bf16 is the upper half of a float32: widen by a 16-bit shift."""
    halves = np.frombuffer(raw, dtype=np.uint16).astype(np.uint32)
    return (halves << 16).view(np.float32)


def read_safetensors(path):
    """Returns {name: torch.Tensor}; bf16 and f16 tensors are widened to float32."""
    with open(path, "rb") as f:
        (header_len,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(header_len))
        data = f.read()
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        raw = data[begin:end]
        if info["dtype"] == "BF16":
            array = _bf16_bytes_to_float32(raw)
        else:
            array = np.frombuffer(raw, dtype=_NUMPY_DTYPES[info["dtype"]])
            if info["dtype"] == "F16":
                array = array.astype(np.float32)
        tensors[name] = torch.from_numpy(array.copy()).reshape(info["shape"])
    return tensors


def _tensor_bytes(tensor, float_dtype):
    """Returns (safetensors dtype name, raw bytes); floats are stored as float_dtype."""
    tensor = tensor.detach().cpu().contiguous()
    if tensor.dtype == torch.bool:
        return "BOOL", tensor.numpy().astype(np.bool_).tobytes()
    if tensor.dtype == torch.int64:
        return "I64", tensor.numpy().tobytes()
    if float_dtype == "bf16":
        return "BF16", tensor.to(torch.bfloat16).view(torch.int16).numpy().tobytes()
    return "F32", tensor.float().numpy().tobytes()


def write_safetensors(path, tensors, float_dtype="bf16", metadata=None):
    """Writes {name: tensor} in name order; float tensors as bf16 or f32."""
    header = {"__metadata__": dict(metadata or {"format": "pt"})}
    blobs = []
    offset = 0
    for name in sorted(tensors):
        dtype, raw = _tensor_bytes(tensors[name], float_dtype)
        header[name] = {
            "dtype": dtype,
            "shape": list(tensors[name].shape),
            "data_offsets": [offset, offset + len(raw)],
        }
        blobs.append(raw)
        offset += len(raw)
    header_bytes = json.dumps(header, separators=(",", ":")).encode("utf-8")
    header_bytes += b" " * (-len(header_bytes) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(header_bytes)))
        f.write(header_bytes)
        for raw in blobs:
            f.write(raw)
