"""All-or-nothing publication: the moves of a run's staged files and folders into place either all happen or
none does.

`publication` yields a `Publication`. Each `Publication.put` sets aside what its destination holds (a rename
beside it, ``.<name>.old-<pid>``) and moves the staged file or folder there; each `Publication.remove` sets one
aside. When the block ends normally the set-aside copies are deleted. When it raises (any exception, Ctrl-C
included) every move is undone in reverse order: what was moved in is deleted, the set-aside copies go back and
the folders the publication created are removed, so the destination folders are as they were, byte for byte.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path
from typing import Iterator

__all__ = ["Publication", "publication", "move"]


def move(src: Path, dst: Path) -> None:
    """Move the file or folder ``src`` to the free path ``dst`` (a rename on one file system, else a copy)."""
    shutil.move(str(src), str(dst))


def _delete(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    elif os.path.lexists(path):
        with contextlib.suppress(OSError):
            path.unlink()


class Publication:
    """The moves of one publication, with what is needed to undo them (`publication`)."""

    def __init__(self) -> None:
        self._done: list[tuple[Path, Path | None, bool]] = []  # (destination, its set-aside copy, moved in)
        self._created: list[Path] = []

    def put(self, src: Path | str, dst: Path | str) -> None:
        """Move ``src`` to ``dst``, replacing what is there (set aside until the publication ends)."""
        src, dst = Path(src), Path(dst)
        self._make_folder(dst.parent)
        self._done.append((dst, self._set_aside(dst), True))
        move(src, dst)

    def remove(self, dst: Path | str) -> None:
        """Remove ``dst`` if it exists (set aside until the publication ends)."""
        aside = self._set_aside(Path(dst))
        if aside is not None:
            self._done.append((Path(dst), aside, False))

    def _set_aside(self, dst: Path) -> Path | None:
        if not os.path.lexists(dst):
            return None
        aside = dst.with_name(f".{dst.name}.old-{os.getpid()}")
        _delete(aside)
        os.replace(dst, aside)
        return aside

    def _make_folder(self, folder: Path) -> None:
        missing = []
        while not folder.exists():
            missing.append(folder)
            folder = folder.parent
        for path in reversed(missing):
            path.mkdir()
            self._created.append(path)

    def commit(self) -> None:
        """Delete the set-aside copies: the publication stands."""
        for _, aside, _ in self._done:
            if aside is not None:
                _delete(aside)
        self._done, self._created = [], []

    def rollback(self) -> None:
        """Undo every move, last first, and remove the folders created (each step as far as it can go)."""
        for dst, aside, moved_in in reversed(self._done):
            if moved_in:
                _delete(dst)
            if aside is not None:
                with contextlib.suppress(OSError):
                    os.replace(aside, dst)
        for folder in reversed(self._created):
            with contextlib.suppress(OSError):
                folder.rmdir()
        self._done, self._created = [], []


@contextlib.contextmanager
def publication() -> Iterator[Publication]:
    """A `Publication` committed when the block ends normally and rolled back when it raises (then re-raised)."""
    pub = Publication()
    try:
        yield pub
    except BaseException:
        pub.rollback()
        raise
    pub.commit()
