"""Writing a user's file without surprises: the path checked to be a path (not ``1``, not a
string with a NUL byte), a symlink written through to its target (the link stays, its target
gets the new text), a FIFO, device node or socket at the path refused (never replaced by a
regular file), and each write through a temporary file of its own (threads or processes
saving one path do not share a ``.tmp`` name), moved into place at once.
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

from planner._src.errors import PlanFileError

__all__ = ["as_path", "target_of", "write_text_atomically"]


def as_path(path, what: str = "the plan file", verb: str = "plan.save") -> Path:
    """``path`` as a Path, or PlanFileError teaching what a path is."""
    if isinstance(path, bytes):
        path = os.fsdecode(path)
    if not isinstance(path, str | os.PathLike):
        raise PlanFileError(
            f"{verb} takes a file path for {what}, not {type(path).__name__} {path!r:.60}.\n"
            f"Fix: pass a str or pathlib.Path, e.g. {verb}('plan.json')."
        )
    text = os.fspath(path)
    if isinstance(text, bytes):
        text = os.fsdecode(text)
    if "\x00" in text:
        raise PlanFileError(
            f"The path {text!r} for {what} holds a NUL byte ('\\x00'), which no file "
            "system allows in a name.\nFix: remove it from the path (a path built from "
            "C strings or binary data often carries one at its end)."
        )
    if not text:
        raise PlanFileError(f"The path for {what} is empty.\nFix: pass e.g. {verb}('plan.json').")
    return Path(text)


def _kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISFIFO, "a FIFO (named pipe)"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISDIR, "a directory"),
    ):
        if test(mode):
            return name
    return "not a regular file"


def target_of(path: Path, what: str = "the plan file") -> Path:
    """Where writing ``path`` lands: a symlink's target (followed to its end, so the link
    is kept and its target gets the text), refused where that is not a regular file."""
    real = Path(os.path.realpath(path))
    try:
        mode = os.stat(real).st_mode
    except FileNotFoundError:
        return real
    except OSError:
        return real  # unreadable: the write itself says why
    if not stat.S_ISREG(mode):
        link = f" (the symlink {path} points to {real})" if real != path.absolute() else ""
        raise PlanFileError(
            f"Cannot write {what} {path}: it is {_kind(mode)}{link}, not a regular file, and "
            "saving would replace it with one.\nFix: pass the path of a regular file (or a "
            "new name), e.g. plan.save('plan.json'); nothing was written."
        )
    return real


def write_text_atomically(path: Path, text: str, what: str = "the plan file") -> None:
    """Write ``text`` to ``path`` through a temporary file of its own in the same folder,
    moved into place at once (a reader never sees half a file; two writers never share a
    temporary name). A symlink's target is written; an existing file keeps its mode."""
    real = target_of(path, what)
    try:
        mode = stat.S_IMODE(os.stat(real).st_mode)
    except OSError:
        umask = os.umask(0)
        os.umask(umask)
        mode = 0o666 & ~umask
    tmp = None
    try:
        fd, name = tempfile.mkstemp(prefix=f".{real.name}.", suffix=".tmp", dir=real.parent)
        os.close(fd)
        tmp = Path(name)
        tmp.write_text(text)
        os.chmod(tmp, mode)
        os.replace(tmp, real)
    except OSError as e:
        raise PlanFileError(
            f"Cannot write {what} {path}: {e.strerror or e}.\nFix: free space on its disk or "
            "pass a path on a writable file system; nothing was written."
        ) from e
    finally:
        if tmp is not None:
            tmp.unlink(missing_ok=True)
