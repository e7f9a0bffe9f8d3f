"""Concatenate Parquet files that share a schema into one file without decoding their data.

A Parquet file is ``PAR1``, the column chunks of its row groups, a footer (the Thrift-compact-encoded
``FileMetaData``), the footer's length (4 bytes, little-endian) and ``PAR1`` again (Apache Parquet format
specification, "File Format", https://parquet.apache.org/docs/file-format/). Every position in the footer is an
absolute byte offset into the file. So files written with one schema can be joined by copying each file's data
region (between the leading ``PAR1`` and its footer) one after the other and writing one footer that lists every
row group with its offsets moved by the bytes that precede its file, its ordinal renumbered, and the total row
count summed. No page is decoded or re-encoded: joining is a copy.

The sweep engines use this to assemble one output file from parts evaluated independently (by Dask workers, each
writing its own part file, or by the local engine in memory); the same parts give the same bytes whichever engine
produced them.

Only the footer is parsed, with a small reader/writer of the Thrift compact protocol (Apache Thrift, "Thrift
Compact protocol encoding", doc/specs/thrift-compact-protocol.md) that keeps every field, in order, with its
wire type, so that an unmodified footer re-encodes to exactly its original bytes (checked for every part).
"""
from __future__ import annotations

import struct
from dataclasses import dataclass

from ..errors import InputError

MAGIC = b"PAR1"

# compact-protocol wire types
_BOOL_TRUE, _BOOL_FALSE, _BYTE, _I16, _I32, _I64, _DOUBLE, _BINARY, _LIST, _SET, _MAP, _STRUCT = range(1, 13)

# parquet.thrift field ids
_FMD_NUM_ROWS, _FMD_ROW_GROUPS = 3, 4
_RG_COLUMNS, _RG_FILE_OFFSET, _RG_ORDINAL = 1, 5, 7
_CC_FILE_OFFSET, _CC_META, _CC_OFFSET_INDEX_OFFSET, _CC_COLUMN_INDEX_OFFSET = 2, 3, 4, 6
_CMD_OFFSETS = (9, 10, 11, 14)  # data_page_offset, index_page_offset, dictionary_page_offset, bloom_filter_offset


class ParquetConcatError(InputError):
    """A part is not a Parquet file this module can join (truncated, or written with another schema)."""


# ---------------------------------------------------------------------------------------------
# Thrift compact protocol: a struct is a list of [field id, wire type, value]
# ---------------------------------------------------------------------------------------------
class _Reader:
    __slots__ = ("buf", "pos")

    def __init__(self, buf: bytes):
        self.buf = buf
        self.pos = 0

    def byte(self) -> int:
        b = self.buf[self.pos]
        self.pos += 1
        return b

    def varint(self) -> int:
        shift = out = 0
        while True:
            b = self.byte()
            out |= (b & 0x7F) << shift
            if not b & 0x80:
                return out
            shift += 7

    def zigzag(self) -> int:
        n = self.varint()
        return (n >> 1) ^ -(n & 1)

    def take(self, n: int) -> bytes:
        out = self.buf[self.pos:self.pos + n]
        if len(out) != n:
            raise IndexError("truncated")
        self.pos += n
        return out

    def value(self, t: int):
        if t in (_BOOL_TRUE, _BOOL_FALSE):  # only inside containers: one raw byte
            return self.byte()
        if t == _BYTE:
            return self.byte()
        if t in (_I16, _I32, _I64):
            return self.zigzag()
        if t == _DOUBLE:
            return self.take(8)
        if t == _BINARY:
            return self.take(self.varint())
        if t in (_LIST, _SET):
            head = self.byte()
            size, et = head >> 4, head & 0x0F
            if size == 15:
                size = self.varint()
            return [et, [self.value(et) for _ in range(size)]]
        if t == _MAP:
            size = self.varint()
            if size == 0:
                return [0, 0, []]
            kv = self.byte()
            kt, vt = kv >> 4, kv & 0x0F
            return [kt, vt, [(self.value(kt), self.value(vt)) for _ in range(size)]]
        if t == _STRUCT:
            return self.struct()
        raise ValueError(f"unknown compact type {t}")

    def struct(self) -> list:
        fields = []
        last = 0
        while True:
            head = self.byte()
            if head == 0:
                return fields
            t, delta = head & 0x0F, head >> 4
            fid = last + delta if delta else self.zigzag()
            last = fid
            if t in (_BOOL_TRUE, _BOOL_FALSE):
                fields.append([fid, t, t == _BOOL_TRUE])
            else:
                fields.append([fid, t, self.value(t)])


def _varint(n: int, out: bytearray) -> None:
    while True:
        if n < 0x80:
            out.append(n)
            return
        out.append((n & 0x7F) | 0x80)
        n >>= 7


def _zigzag(n: int, out: bytearray) -> None:
    _varint((n << 1) ^ (n >> 63), out)


def _write_value(t: int, v, out: bytearray) -> None:
    if t in (_BOOL_TRUE, _BOOL_FALSE, _BYTE):
        out.append(v)
    elif t in (_I16, _I32, _I64):
        _zigzag(v, out)
    elif t == _DOUBLE:
        out += v
    elif t == _BINARY:
        _varint(len(v), out)
        out += v
    elif t in (_LIST, _SET):
        et, items = v
        if len(items) < 15:
            out.append((len(items) << 4) | et)
        else:
            out.append(0xF0 | et)
            _varint(len(items), out)
        for x in items:
            _write_value(et, x, out)
    elif t == _MAP:
        kt, vt, items = v
        _varint(len(items), out)
        if items:
            out.append((kt << 4) | vt)
            for k, x in items:
                _write_value(kt, k, out)
                _write_value(vt, x, out)
    elif t == _STRUCT:
        _write_struct(v, out)
    else:
        raise ValueError(f"unknown compact type {t}")


def _write_struct(fields: list, out: bytearray) -> None:
    last = 0
    for fid, t, v in fields:
        if t in (_BOOL_TRUE, _BOOL_FALSE):
            t = _BOOL_TRUE if v else _BOOL_FALSE
        delta = fid - last
        if 0 < delta <= 15:
            out.append((delta << 4) | t)
        else:
            out.append(t)
            _zigzag(fid, out)
        last = fid
        if t not in (_BOOL_TRUE, _BOOL_FALSE):
            _write_value(t, v, out)
    out.append(0)


def encode_struct(fields: list) -> bytes:
    out = bytearray()
    _write_struct(fields, out)
    return bytes(out)


def decode_struct(buf: bytes) -> list:
    r = _Reader(buf)
    fields = r.struct()
    if r.pos != len(buf):
        raise ValueError("trailing bytes after the struct")
    return fields


def _field(fields: list, fid: int):
    for f in fields:
        if f[0] == fid:
            return f
    return None


# ---------------------------------------------------------------------------------------------
# Parts
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Part:
    """One Parquet file split into its data region and its decoded footer."""

    data_start: int  # always 4 (after the leading magic)
    data_end: int  # first byte of the footer
    num_rows: int
    row_groups: list  # decoded RowGroup structs
    head: bytes  # the footer without num_rows and row_groups, encoded: must agree between parts


def split_footer(tail: bytes, size: int) -> tuple[int, bytes]:
    """(footer start, footer bytes) from the last bytes of a file of ``size`` bytes (``tail`` ends the file)."""
    if size < 12 or tail[-4:] != MAGIC:
        raise ParquetConcatError("sweep: a part file is not a Parquet file (truncated?)")
    (n,) = struct.unpack("<I", tail[-8:-4])
    if n + 12 > size or n + 8 > len(tail):
        raise ParquetConcatError("sweep: a part file's Parquet footer is truncated")
    return size - 8 - n, tail[-8 - n:-8]


def read_part(footer: bytes, data_end: int) -> Part:
    """Decode a part's footer; its re-encoding must give back the same bytes (nothing is lost)."""
    try:
        fmd = decode_struct(footer)
    except (IndexError, ValueError):
        raise ParquetConcatError("sweep: a part file's Parquet footer cannot be read") from None
    if encode_struct(fmd) != footer:
        raise ParquetConcatError("sweep: a part file's Parquet footer does not re-encode exactly; cannot join it")
    rows = _field(fmd, _FMD_NUM_ROWS)
    rgs = _field(fmd, _FMD_ROW_GROUPS)
    if rows is None or rgs is None:
        raise ParquetConcatError("sweep: a part file's Parquet footer has no row groups")
    head = encode_struct([f for f in fmd if f[0] not in (_FMD_NUM_ROWS, _FMD_ROW_GROUPS)])
    return Part(data_start=len(MAGIC), data_end=data_end, num_rows=int(rows[2]), row_groups=rgs[2][1], head=head)


def _shift(v: int, by: int) -> int:
    return v + by if v > 0 else v  # 0 (and -1) mean "unset" to writers; a real offset is never below 4


def shift_row_group(rg: list, by: int, ordinal: int) -> bytes:
    """One RowGroup struct with every file offset moved by ``by`` bytes and its ordinal set; encoded."""
    out = []
    for fid, t, v in rg:
        if fid == _RG_FILE_OFFSET:
            v = _shift(v, by)
        elif fid == _RG_ORDINAL:
            v = ordinal
        elif fid == _RG_COLUMNS:
            cols = []
            for cc in v[1]:
                new_cc = []
                for cfid, ct, cv in cc:
                    if cfid in (_CC_FILE_OFFSET, _CC_OFFSET_INDEX_OFFSET, _CC_COLUMN_INDEX_OFFSET):
                        cv = _shift(cv, by)
                    elif cfid == _CC_META:
                        cv = [[mfid, mt, _shift(mv, by) if mfid in _CMD_OFFSETS else mv] for mfid, mt, mv in cv]
                    new_cc.append([cfid, ct, cv])
                cols.append(new_cc)
            v = [v[0], cols]
        out.append([fid, t, v])
    return encode_struct(out)


class Concatenator:
    """Accumulates the footer of the joined file while the caller copies each part's data region.

    ``add(part)`` returns the offset shift of that part's data (its position in the joined file minus 4);
    ``footer()`` returns the joined file's footer, length and closing magic.
    """

    def __init__(self):
        self.written = 0  # data bytes copied so far (after the leading magic)
        self.rows = 0
        self.groups: list[bytes] = []
        self.head: bytes | None = None

    def add(self, part: Part) -> None:
        if self.head is None:
            self.head = part.head
        elif part.head != self.head:
            raise ParquetConcatError("sweep: part files were written with different Parquet schemas or writers "
                                     "(are the workers' pyarrow versions the same as the client's?)")
        for rg in part.row_groups:
            if len(self.groups) > 32767:
                raise ParquetConcatError("sweep: more than 32,767 row groups; use a larger --chunk")
            self.groups.append(shift_row_group(rg, self.written, len(self.groups)))
        self.rows += part.num_rows
        self.written += part.data_end - part.data_start

    def footer(self) -> bytes:
        if self.head is None:
            raise ParquetConcatError("sweep: nothing to write")
        fmd = decode_struct(self.head)
        out = bytearray()
        last = 0
        # re-emit the head's fields in id order, with num_rows (3) and row_groups (4) in their places
        fields = sorted(fmd + [[_FMD_NUM_ROWS, _I64, self.rows], [_FMD_ROW_GROUPS, _LIST, None]], key=lambda f: f[0])
        for fid, t, v in fields:
            delta = fid - last
            tt = (_BOOL_TRUE if v else _BOOL_FALSE) if t in (_BOOL_TRUE, _BOOL_FALSE) else t
            if 0 < delta <= 15:
                out.append((delta << 4) | tt)
            else:
                out.append(tt)
                _zigzag(fid, out)
            last = fid
            if fid == _FMD_ROW_GROUPS:
                n = len(self.groups)
                if n < 15:
                    out.append((n << 4) | _STRUCT)
                else:
                    out.append(0xF0 | _STRUCT)
                    _varint(n, out)
                for g in self.groups:
                    out += g
            elif tt not in (_BOOL_TRUE, _BOOL_FALSE):
                _write_value(t, v, out)
        out.append(0)
        return bytes(out) + struct.pack("<I", len(out)) + MAGIC
