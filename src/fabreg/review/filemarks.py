"""What ingest has read of each input file, so the next ingest reads only what is new.

A perflog only grows while ReFrame appends to it, so per file the store keeps a
:class:`FileMark`: device and inode, the byte offset read up to (always the end of a
complete line), the number of lines before it, a digest of the first line (the header)
and of the last bytes read, and the header line in force at the offset. The next
ingest resumes at the offset when the file is still the same file:

- same path, same inode, both digests unchanged, size >= offset: new bytes only
  (none: the file is skipped without being parsed);
- another inode at the path (ReFrame started a new file, logrotate moved the old one
  away), size < offset (truncated), or a digest that changed (rewritten in place):
  read again from the start;
- a new path whose inode and digests match a known mark (ReFrame renamed ``X.log`` to
  ``X.log.h0`` when the check's header changed): resume where that mark ends.

Reading a file again from the start cannot duplicate values (the store ignores a value it
holds) and a mark is written in the same transaction as the values it covers, so a crash
loses or repeats nothing. A last line without its line end is still being written: it is
left for the next ingest. A results database is read again only when its file (or its
WAL) changed, and then only the sessions the store lacks.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

#: Bytes before the offset whose digest must match for the file to be the one read before.
TAIL_BYTES = 4096
#: A header line longer than this is digested by its first HEAD_BYTES bytes.
HEAD_BYTES = 1 << 16

PERFLOG = "perflog"
RESULTS_DB = "results-db"


@dataclass(frozen=True)
class FileMark:
    """How far one input file was read (one row of the store's ``files`` table)."""

    path: str  # absolute, resolved
    kind: str  # PERFLOG or RESULTS_DB
    device: int
    inode: int
    size: int
    mtime_ns: int
    offset: int  # bytes read: the end of the last complete line
    lines: int  # lines before offset
    head_digest: str  # sha256 of the first line (perflog) / file signature (results DB)
    tail_digest: str  # sha256 of the TAIL_BYTES before offset
    header: str = ""  # the header line in force at offset


def mark_key(path: Path) -> str:
    """The store's key of a file: its absolute path with links resolved."""
    return str(path.resolve())


class MarkIndex:
    """The marks of a store, by path and by (device, inode)."""

    def __init__(self, marks: list[FileMark]) -> None:
        self.by_path = {m.path: m for m in marks}
        self.by_inode: dict[tuple[int, int], list[FileMark]] = {}
        for m in marks:
            self.by_inode.setdefault((m.device, m.inode), []).append(m)


@dataclass
class NewBytes:
    """The part of a perflog file this ingest has to parse."""

    path: Path
    reason: str  # new, unchanged, appended, renamed, replaced, truncated, rewritten, reread
    data: bytes  # complete lines only
    first_line: int  # number of the first line of data (1-based)
    header: str  # the header line in force before data ('' at the start of the file)
    partial: bool  # bytes after the last line end were left for the next ingest
    start: int
    stat: os.stat_result
    head_digest: str
    tail_digest: str

    @property
    def unchanged(self) -> bool:
        return self.reason == "unchanged"

    @property
    def lines(self) -> int:
        return self.data.count(b"\n")

    def mark(self, header: str, upto: int, lines: int | None = None) -> FileMark:
        """The mark after parsing the first ``upto`` bytes of ``data`` (whole lines: an ingest
        that stops after them resumes there); ``header`` is the header line in force then;
        ``lines``: the lines in those bytes, when the caller counted them piece by piece."""
        if upto == len(self.data):
            tail = self.tail_digest
        elif upto >= TAIL_BYTES:
            tail = _sha(self.data[upto - TAIL_BYTES:upto])
        else:  # the tail reaches back before data: read it where it is
            with open(self.path, "rb") as stream:
                tail = _tail_digest(stream, self.start + upto)
        return FileMark(mark_key(self.path), PERFLOG, self.stat.st_dev, self.stat.st_ino,
                        self.stat.st_size, self.stat.st_mtime_ns, self.start + upto,
                        self.first_line - 1 + (self.data.count(b"\n", 0, upto)
                                               if lines is None else lines),
                        self.head_digest, tail, header)


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _head_digest(stream) -> str:
    stream.seek(0)
    return _sha(stream.readline(HEAD_BYTES))


def _tail_digest(stream, end: int) -> str:
    start = max(0, end - TAIL_BYTES)
    stream.seek(start)
    return _sha(stream.read(end - start))


def _continues(stream, mark: FileMark, size: int, head: str) -> bool:
    """Is this open file the one ``mark`` describes, possibly grown since?"""
    return (size >= mark.offset and head == mark.head_digest
            and _tail_digest(stream, mark.offset) == mark.tail_digest)


def read_new_bytes(path: Path, marks: MarkIndex, reread: bool = False) -> NewBytes:
    """Open ``path`` once, decide where to resume (see the module docstring) and read from
    there to the end of its last complete line. Raises OSError when it cannot be read."""
    with open(path, "rb") as stream:
        st = os.fstat(stream.fileno())
        head = _head_digest(stream)
        mark = marks.by_path.get(mark_key(path))
        start, lines, header = 0, 0, ""
        if reread:
            reason = "reread"
        elif mark is None:
            reason = "new"
            for known in marks.by_inode.get((st.st_dev, st.st_ino), []):
                if known.kind == PERFLOG and _continues(stream, known, st.st_size, head):
                    reason, start, lines, header = ("renamed", known.offset, known.lines,
                                                    known.header)
                    break
        elif (st.st_dev, st.st_ino) != (mark.device, mark.inode):
            reason = "replaced"
        elif st.st_size < mark.offset:
            reason = "truncated"
        elif not _continues(stream, mark, st.st_size, head):
            reason = "rewritten"
        else:
            start, lines, header = mark.offset, mark.lines, mark.header
            reason = "unchanged" if st.st_size == mark.offset else "appended"
        stream.seek(start)
        data = stream.read(max(0, st.st_size - start)) if reason != "unchanged" else b""
        cut = data.rfind(b"\n") + 1
        partial = cut < len(data)
        data = data[:cut]
        tail = _tail_digest(stream, start + cut)
    return NewBytes(path, reason, data, lines + 1, header, partial, start, st, head, tail)


def results_db_signature(path: Path) -> tuple[os.stat_result, str]:
    """(stat, signature) of a results DB: it changed when this signature did (file and WAL)."""
    st = path.stat()
    parts = [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns]
    wal = path.with_name(path.name + "-wal")
    if wal.exists():
        w = wal.stat()
        parts += [w.st_ino, w.st_size, w.st_mtime_ns]
    return st, ":".join(str(p) for p in parts)


def results_db_unchanged(path: Path, marks: MarkIndex) -> tuple[bool, FileMark]:
    """Whether the results DB is as last read, and the mark to store after reading it."""
    st, signature = results_db_signature(path)
    key = mark_key(path)
    mark = FileMark(key, RESULTS_DB, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns,
                    st.st_size, 0, signature, "")
    known = marks.by_path.get(key)
    return known is not None and known.head_digest == signature, mark
