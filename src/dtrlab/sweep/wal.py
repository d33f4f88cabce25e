"""Where the entries of a DuckDB write-ahead log end: enough to tell a whole log from a cut one.

DuckDB replays a log up to the first entry that does not fit in the file and drops the rest
without a word; it checks each entry's checksum itself, but not that the entries fill the file.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

# The log's first entry (unframed, in DuckDB's binary serialization) says which framing follows:
# version 2 frames every later entry as [u64 size][u64 checksum][size bytes].
_FRAMED_VERSION = 2
_WAL_VERSION_ENTRY = 98  # WALType::WAL_VERSION
_FIELD_END = 0xFFFF
_FRAME_HEADER_BYTES = 16


@dataclass(frozen=True)
class WalLayout:
    """The entries of one log: the byte offset where each ends (the first ends the version entry),
    and the file's size. `whole` when the last entry ends exactly at the end of the file."""

    ends: tuple[int, ...]
    size_bytes: int

    @property
    def whole(self) -> bool:
        return self.ends[-1] == self.size_bytes

    @property
    def cut_at(self) -> int:
        """Where the readable entries stop: everything from here on would be dropped."""
        return self.ends[-1]


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(data) or shift > 63:
            raise ValueError("a number runs past the end")
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return value, pos


def _version_entry(data: bytes) -> tuple[int, int]:
    """(the log's version, where its first entry ends); ValueError for anything else."""
    pos, version, kind = 0, None, None
    while True:
        if pos + 2 > len(data):
            raise ValueError("the version entry runs past the end")
        (field,) = struct.unpack_from("<H", data, pos)
        pos += 2
        if field == _FIELD_END:
            break
        if field in (100, 101, 103):  # wal_type, version, checkpoint_iteration
            value, pos = _varint(data, pos)
            if field == 100:
                kind = value
            elif field == 101:
                version = value
        elif field == 102:  # db_identifier: a count, then that many bytes as numbers
            count, pos = _varint(data, pos)
            for _ in range(count):
                _, pos = _varint(data, pos)
        else:
            raise ValueError(f"an unknown field {field} in the version entry")
    if kind != _WAL_VERSION_ENTRY or version is None:
        raise ValueError("the log does not start with a version entry")
    return version, pos


def wal_layout(data: bytes) -> WalLayout | None:
    """The entries of the log `data`, or None when it is not a framed log this module reads
    (another DuckDB log version, or a first entry it cannot parse): DuckDB alone judges those."""
    try:
        version, pos = _version_entry(data)
    except ValueError:
        return None
    if version != _FRAMED_VERSION:
        return None
    ends = [pos]
    while pos + _FRAME_HEADER_BYTES <= len(data):
        (size,) = struct.unpack_from("<Q", data, pos)
        end = pos + _FRAME_HEADER_BYTES + size
        if end > len(data):
            break
        ends.append(end)
        pos = end
    return WalLayout(tuple(ends), len(data))
