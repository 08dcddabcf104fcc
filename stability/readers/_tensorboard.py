"""Scalars out of TensorBoard event files, without TensorFlow.

An event file is a sequence of TFRecords::

    uint64  length              (little-endian)
    uint32  masked CRC32C of the 8 length bytes
    bytes   data[length]        (a serialised ``tensorboard.Event`` protobuf)
    uint32  masked CRC32C of data

The framing and both checksums are handled here; the payload is parsed with the protobuf classes
the ``tensorboard`` package ships. A scalar is either the old ``simple_value`` form (what
``torch.utils.tensorboard.SummaryWriter.add_scalar`` writes) or a one-element numeric ``tensor``
(TF2 ``tf.summary.scalar``, ``add_scalar(..., new_style=True)``).
"""

from __future__ import annotations

import struct
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stability.readers._errors import LogReadError, LogReadWarning

PATTERN = "events.out.tfevents.*"
_HEADER = 12  # length (8) + its masked crc (4)
_FOOTER = 4  # masked crc of the data
_MAX_LISTED = 5  # problems spelled out in one message; the rest are counted


# ---------------------------------------------------------------------------------------------
# CRC32C (Castagnoli), table-driven; TFRecord stores it "masked".

_CRC_TABLE: list[int] = []


def _crc_table() -> list[int]:
    if not _CRC_TABLE:
        poly = 0x82F63B78  # reversed Castagnoli polynomial
        for byte in range(256):
            crc = byte
            for _ in range(8):
                crc = (crc >> 1) ^ poly if crc & 1 else crc >> 1
            _CRC_TABLE.append(crc)
    return _CRC_TABLE


def crc32c(data: bytes) -> int:
    table = _crc_table()
    crc = 0xFFFFFFFF
    for byte in data:
        crc = table[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def masked_crc32c(data: bytes) -> int:
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


# ---------------------------------------------------------------------------------------------
# Record framing


def _split_records(data: bytes) -> tuple[list[bytes], list[str]]:
    """The payloads of every intact record, and a description of each problem met."""
    payloads: list[bytes] = []
    problems: list[str] = []
    pos, size = 0, len(data)
    while pos < size:
        left = size - pos
        if left < _HEADER:
            problems.append(
                f"truncated record at byte {pos} (the file ends {left} bytes into a "
                f"{_HEADER}-byte record header; was the writer killed, or is it still writing?)"
            )
            break
        header = data[pos : pos + 8]
        (length,) = struct.unpack("<Q", header)
        (header_crc,) = struct.unpack_from("<I", data, pos + 8)
        if masked_crc32c(header) != header_crc:
            if pos == 0:
                problems.append(
                    "not a TensorBoard event file (its first 12 bytes are not a valid TFRecord "
                    "header: the length checksum does not match)"
                )
            else:
                problems.append(
                    f"corrupt record header at byte {pos} (length checksum mismatch); the "
                    f"remaining {left} bytes of the file were skipped"
                )
            break
        end = pos + _HEADER + length + _FOOTER
        if end > size:
            problems.append(
                f"truncated record at byte {pos} (the record claims {length} data bytes but the "
                f"file ends {left - _HEADER} bytes later; was the writer killed, or is it still "
                "writing?)"
            )
            break
        payload = data[pos + _HEADER : pos + _HEADER + length]
        (data_crc,) = struct.unpack_from("<I", data, pos + _HEADER + length)
        if masked_crc32c(payload) != data_crc:
            problems.append(f"corrupt record at byte {pos} (data checksum mismatch); skipped it")
        else:
            payloads.append(payload)
        pos = end
    return payloads, problems


# ---------------------------------------------------------------------------------------------
# Payloads

_STRUCT_FORMATS = {  # TensorProto dtype -> struct format of one element in tensor_content
    1: "<f",
    2: "<d",
    19: "<e",
    3: "<i",
    9: "<q",
    4: "<B",
    5: "<h",
    6: "<b",
    10: "<?",
    17: "<H",
    22: "<I",
    23: "<Q",
}
_BFLOAT16 = 14
_REPEATED_FIELD = {  # TensorProto dtype -> the repeated field that holds its values
    1: "float_val",
    2: "double_val",
    3: "int_val",
    4: "int_val",
    5: "int_val",
    6: "int_val",
    17: "int_val",
    9: "int64_val",
    10: "bool_val",
    22: "uint32_val",
    23: "uint64_val",
}


def _tensor_scalar(tensor: Any) -> float | None:
    """The value of a one-element numeric TensorProto, or None if it is anything else."""
    count = 1
    for dim in tensor.tensor_shape.dim:
        count *= dim.size
    if count != 1 or tensor.tensor_shape.unknown_rank:
        return None
    dtype = tensor.dtype
    if tensor.tensor_content:
        if dtype == _BFLOAT16 and len(tensor.tensor_content) == 2:
            (bits,) = struct.unpack("<H", tensor.tensor_content)
            return struct.unpack("<f", struct.pack("<I", bits << 16))[0]
        fmt = _STRUCT_FORMATS.get(dtype)
        if fmt is None or len(tensor.tensor_content) != struct.calcsize(fmt):
            return None
        return float(struct.unpack(fmt, tensor.tensor_content)[0])
    if dtype in (19, _BFLOAT16):  # half_val holds the raw 16 bits
        if not tensor.half_val:
            return None
        bits = tensor.half_val[0] & 0xFFFF
        if dtype == _BFLOAT16:
            return struct.unpack("<f", struct.pack("<I", bits << 16))[0]
        return float(struct.unpack("<e", struct.pack("<H", bits))[0])
    name = _REPEATED_FIELD.get(dtype)
    if name is None:
        return None
    values = getattr(tensor, name)
    return float(values[0]) if values else None


@dataclass
class _File:
    path: Path
    size: int = 0
    events: int = 0
    scalars: dict[str, list[tuple[int, float, float]]] = field(default_factory=dict)  # step, wall, value
    texts: dict[str, str] = field(default_factory=dict)  # tag -> the last text summary written under it
    other_tags: set[str] = field(default_factory=set)
    problems: list[str] = field(default_factory=list)


def _read_file(path: Path, event_pb2: Any, decode_error: type[Exception]) -> _File:
    result = _File(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        result.problems.append(f"could not be read ({type(exc).__name__}: {exc.strerror or exc})")
        return result
    result.size = len(data)
    if not data:
        result.problems.append("is empty (0 bytes; the writer may not have flushed yet)")
        return result
    payloads, problems = _split_records(data)
    result.problems.extend(problems)
    plugins: dict[str, str] = {}  # tag -> plugin name; writers often send metadata only once per tag
    undecodable = 0
    for payload in payloads:
        event = event_pb2.Event()
        try:
            event.ParseFromString(payload)
        except decode_error:
            undecodable += 1
            continue
        result.events += 1
        if not event.HasField("summary"):
            continue
        for value in event.summary.value:
            tag = value.tag or value.node_name
            plugin = value.metadata.plugin_data.plugin_name
            if plugin:
                plugins[tag] = plugin
            kind = value.WhichOneof("value")
            number: float | None = None
            if kind == "simple_value":
                number = float(value.simple_value)
            elif kind == "tensor" and plugins.get(tag, "scalars") == "scalars":
                number = _tensor_scalar(value.tensor)
            if number is None:
                result.other_tags.add(tag)
                if kind == "tensor" and plugins.get(tag) == "text" and value.tensor.string_val:
                    # torch's SummaryWriter.add_text files TAG under "TAG/text_summary"
                    name = tag.removesuffix("/text_summary")
                    result.texts[name] = value.tensor.string_val[0].decode("utf-8", errors="replace")
                continue
            result.scalars.setdefault(tag, []).append((int(event.step), float(event.wall_time), number))
    if undecodable:
        result.problems.append(
            f"{undecodable} record(s) with intact checksums did not decode as TensorBoard events; skipped them"
        )
    return result


def _summarise(problems: list[str]) -> str:
    shown = "; ".join(problems[:_MAX_LISTED])
    if len(problems) > _MAX_LISTED:
        shown += f"; and {len(problems) - _MAX_LISTED} more problem(s)"
    return shown


def read_tensorboard(path: str | Path, *, strict: bool = False) -> dict[str, list[tuple[int, float]]]:
    """Every scalar in the event files at ``path``: ``{tag: [(step, value), ...]}`` sorted by step.

    ``path`` is one event file, or a directory searched recursively for ``events.out.tfevents.*``
    (all files are merged; points at equal steps keep their wall-time order). Non-finite values
    are kept. Raises :class:`LogReadError` if nothing could be read, if no file holds a scalar,
    or (with ``strict=True``) on any problem at all; otherwise problems such as a truncated last
    record are reported as a :class:`LogReadWarning` and the readable part is returned.
    """
    return read_tensorboard_log(path, strict=strict)[0]


def read_tensorboard_log(
    path: str | Path, *, strict: bool = False
) -> tuple[dict[str, list[tuple[int, float]]], dict[str, str]]:
    """:func:`read_tensorboard`'s scalars, and the text summaries beside them (``{tag: text}``,
    the last one written under each tag, torch's ``/text_summary`` suffix taken off): CleanRL
    writes its arguments there as a table under ``hyperparameters``."""
    root = Path(path)
    source = str(root)
    try:
        if root.is_dir():
            files = sorted(p for p in root.rglob(PATTERN) if p.is_file())
            if not files:
                raise LogReadError(
                    f"{source}: no TensorBoard event files ({PATTERN}) anywhere under this directory; was "
                    "the run logging somewhere else, or killed before its first flush?",
                    source,
                )
        elif root.exists():
            files = [root]
        else:
            raise LogReadError(f"{source}: no such file or directory", source)
    except OSError as exc:
        raise LogReadError(f"{source}: could not be listed ({type(exc).__name__}: {exc})", source) from exc

    try:
        from google.protobuf.message import DecodeError
        from tensorboard.compat.proto import event_pb2
    except ImportError as exc:
        raise LogReadError(
            f"{source}: reading TensorBoard logs needs the 'tensorboard' package "
            f"(pip install tensorboard); importing it failed: {exc}",
            source,
        ) from exc

    results = [_read_file(f, event_pb2, DecodeError) for f in files]
    problems = [f"{r.path}: {p}" if len(files) > 1 else p for r in results for p in r.problems]
    merged: dict[str, list[tuple[int, float, float]]] = {}
    for r in results:
        for tag, points in r.scalars.items():
            merged.setdefault(tag, []).extend(points)

    where = source if len(files) == 1 else f"{source} ({len(files)} event files)"
    if not merged:
        events = sum(r.events for r in results)
        if problems and not events:
            raise LogReadError(f"{where}: nothing could be read: {_summarise(problems)}", source)
        others = sorted(set().union(*(r.other_tags for r in results)))
        found = (
            (
                f"only non-scalar summaries, with tags {', '.join(others[:10])}"
                + (f" and {len(others) - 10} more" if len(others) > 10 else "")
            )
            if others
            else "no summaries at all"
        )
        message = (
            f"{where}: {events} event(s) read but none holds a scalar summary (found {found}); "
            "was anything logged with add_scalar / tf.summary.scalar?"
        )
        if problems:
            message += f" Problems met: {_summarise(problems)}"
        raise LogReadError(message, source)
    if problems:
        message = f"{where}: read only part of the log: {_summarise(problems)}"
        if strict:
            raise LogReadError(message, source)
        warnings.warn(LogReadWarning(message), stacklevel=2)

    out: dict[str, list[tuple[int, float]]] = {}
    for tag in sorted(merged):
        points = sorted(merged[tag], key=lambda p: (p[0], p[1]))
        out[tag] = [(step, value) for step, _, value in points]
    texts = {tag: text for r in results for tag, text in r.texts.items()}
    return out, texts
