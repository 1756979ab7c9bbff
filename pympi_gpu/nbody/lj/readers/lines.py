"""Text files read a round of lines at a time, the lines dealt to the ranks and parsed by NumPy.

:class:`Lines` reads a file forward in blocks: a line (a header's), or the
next ``k`` lines whole (a section's rows, found by counting newlines, never
a line cut in two), counting the line numbers.  :func:`deal` cuts a run of
lines into parts at line ends, :func:`numbers` parses one part's columns
(``np.loadtxt``), and where it fails finds the line and says what is wrong.
"""

from __future__ import annotations

import io
import re

import numpy as np

__all__ = ["Lines", "deal", "numbers", "first_words", "strip_comment"]

#: bytes read from the file at once
_READ = 1 << 20
_COMMENT = re.compile(rb"#[^\n]*")
_FIRST_WORD = re.compile(rb"^[ \t]*(\S+)", re.M)
_BLANK = re.compile(rb"^[ \t\r]*$", re.M)


class Lines:
    """The lines of a binary file, read forward; ``line`` is the number (from 1) of the next line."""

    def __init__(self, fh, line: int = 1):
        self.fh, self.line = fh, line
        self._buf = b""
        self._eof = False

    def _fill(self) -> bool:
        if self._eof:
            return False
        more = self.fh.read(_READ)
        if not more:
            self._eof = True
            return False
        self._buf += more
        return True

    def offset(self) -> int:
        """The byte offset of the next line in the file."""
        return self.fh.tell() - len(self._buf)

    def readline(self) -> bytes | None:
        """The next line without its newline, or None at the end of the file."""
        while (end := self._buf.find(b"\n")) < 0:
            if not self._fill():
                if not self._buf:
                    return None
                text, self._buf = self._buf, b""
                self.line += 1
                return text
        text, self._buf = self._buf[:end], self._buf[end + 1:]
        self.line += 1
        return text

    def take(self, k: int) -> tuple[bytes, int]:
        """The next ``k`` lines as one block of bytes (each ending in a newline), and how many there were
        (fewer than ``k`` only at the end of the file)."""
        parts, found, buf = [], 0, self._buf
        while True:
            newlines = np.flatnonzero(np.frombuffer(buf, np.uint8) == 10)
            if found + newlines.size >= k:
                cut = int(newlines[k - found - 1]) + 1 if k > found else 0
                parts.append(buf[:cut])
                self._buf, found = buf[cut:], k
                break
            found += newlines.size
            parts.append(buf)  # a line cut at its end goes on in the next read
            buf = b"" if self._eof else self.fh.read(_READ)
            if not buf:
                self._eof, self._buf = True, b""
                break
        block = b"".join(parts)
        if found < k and block and not block.endswith(b"\n"):  # the file's last line has no newline
            block += b"\n"
            found += 1
        self.line += found
        return block, found

    def skip(self, k: int) -> int:
        """Skip the next ``k`` lines (a section's rows), counting newlines a read at a time (nothing kept);
        returns how many there were."""
        done, buf = 0, self._buf
        while True:
            count = buf.count(b"\n")
            if done + count >= k:
                newlines = np.flatnonzero(np.frombuffer(buf, np.uint8) == 10)
                cut = int(newlines[k - done - 1]) + 1 if k > done else 0
                self._buf, done = buf[cut:], k
                break
            done += count
            tail = buf[buf.rfind(b"\n") + 1:]  # the start of a line read on
            more = b"" if self._eof else self.fh.read(_READ)
            if not more:
                self._eof, self._buf = True, b""
                done += 1 if tail else 0  # the file's last line, without a newline
                break
            buf = tail + more
        self.line += done
        return done


def deal(block: bytes, count: int, parts: int) -> list[tuple[bytes, int]]:
    """``block``'s ``count`` whole lines cut into ``parts`` runs of lines as even as can be: ``(bytes, lines)``."""
    ends = np.flatnonzero(np.frombuffer(block, np.uint8) == 10)
    out, start = [], 0
    for p in range(parts):
        stop_line = (p + 1) * count // parts
        stop = int(ends[stop_line - 1]) + 1 if stop_line else 0
        out.append((block[start:stop], stop_line - p * count // parts))
        start = stop
    return out


def strip_comment(text: bytes) -> bytes:
    """A line without its ``# comment``."""
    return text.split(b"#", 1)[0]


def first_words(block: bytes) -> list[bytes]:
    """The first word of each line of ``block`` (the species of an extended XYZ's rows)."""
    return _FIRST_WORD.findall(block)


def numbers(block: bytes, count: int, columns: int, first_line: int, usecols=None, comments: bool = True
            ) -> tuple[np.ndarray | None, str | None]:
    """``block``'s ``count`` lines as a ``(count, k)`` float64 array: all ``columns`` of each line, or the
    ``usecols`` of lines of at least ``columns`` words.  Returns ``(array, None)``, or ``(None, why)``
    naming the first bad line (numbered from ``first_line``): a blank line, too few or too many words, a
    word that is no number."""
    text = _COMMENT.sub(b"", block) if comments and b"#" in block else block
    blank = _BLANK.search(text[:-1] if text.endswith(b"\n") else text)
    if blank is not None:
        line = first_line + text.count(b"\n", 0, blank.start())
        return None, f"line {line:,} is blank where a row of {columns} numbers belongs"
    if count == 0:
        return np.zeros((0, columns if usecols is None else len(usecols))), None
    try:
        with np.errstate(all="ignore"):
            table = np.loadtxt(io.BytesIO(text), ndmin=2, comments=None, usecols=usecols, dtype=np.float64)
        if table.shape[0] == count and (usecols is not None or table.shape[1] == columns):
            return table, None
    except ValueError:
        pass
    return None, _bad_line(text, columns, first_line, usecols)


def _bad_line(text: bytes, columns: int, first_line: int, usecols) -> str:
    """Why the first line of ``text`` that is not ``columns`` numbers (or at least ``columns`` words, those of
    ``usecols`` numbers) is not (only on the error path)."""
    for i, raw in enumerate(text.split(b"\n")):
        words = raw.split()
        line = first_line + i
        shown = raw.decode("utf-8", "replace").strip()
        if len(shown) > 80:
            shown = shown[:77] + "..."
        if len(words) < columns or (len(words) > columns and usecols is None):
            return f"line {line:,} holds {len(words)} words, not {columns}: {shown!r}"
        for w in (words[c] for c in (range(columns) if usecols is None else usecols)):
            try:
                float(w)
            except ValueError:
                return f"line {line:,}: {w.decode('utf-8', 'replace')!r} is not a number: {shown!r}"
    return f"lines {first_line:,}.. could not be read as rows of {columns} numbers"
