"""Files: crash-safe writes, and the checks that a file or folder can be written before the work.

A reader, or a resumed run, finds the old file or the new one, never half.

A file is written under a temp name in its own folder, flushed to disk (fsync), renamed over its
target, and the folder is fsynced so that the rename survives a power cut too. A folder of files
(a checkpoint, a downloaded data set) is built the same way: written whole under a temp name,
every file and the folder fsynced, then renamed into place in one step.

An entry that several processes may build at once (a shared data cache's) is built under its
`entry_lock`, which also tells what killed builds left from a build still running.

Before a command's work, `output_file_problem`, `output_folder_problem` and `check_writable`
say whether its outputs can be written at all, with one probe (`_probe`).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

import filelock

from attncli.core.errors import AttncliError

# Names of temp files and folders start with this, so listings can tell them from real ones.
TEMP_PREFIX = ".tmp-"


def fsync_path(path: Path) -> None:
    """Flush a file's or a folder's contents (for a folder: its entries) to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write `data` to `path` so that an interrupt leaves either the old file or the new one."""
    with replacing_file(path) as f:
        f.write(data)


@contextmanager
def replacing_file(path: Path, mode: str = "wb") -> Iterator[IO]:
    """A file whose contents become `path` when the block ends without an error: written under
    a temp name beside it, fsynced and renamed over it, so an interrupt leaves the old file or
    the new one. A symlink is written through (its target replaced, the link kept), a FIFO or
    a device written to directly (no rename can stand in for one). The file keeps the old
    one's permissions, or gets those the umask gives a new file (not the temp file's 0600)."""
    path = _write_target(Path(path))
    text = {} if "b" in mode else {"encoding": "utf-8"}
    if _is_special(path):
        with open(path, mode, **text) as f:
            yield f
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = _temp_file(path)
    try:
        os.fchmod(fd, _new_mode(path))
        with os.fdopen(fd, mode, **text) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    fsync_path(path.parent)


def _write_target(path: Path) -> Path:
    """The file a write to `path` means: a symlink's target, else `path`."""
    return Path(os.path.realpath(path)) if path.is_symlink() else path


def _is_special(path: Path) -> bool:
    """An existing FIFO, socket or device: written in place, never replaced."""
    try:
        kind = os.stat(path).st_mode
    except OSError:
        return False
    return not (stat.S_ISREG(kind) or stat.S_ISDIR(kind))


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _new_mode(path: Path) -> int:
    """The permissions of the file replaced, or what the umask gives a new file."""
    try:
        return stat.S_IMODE(os.stat(path).st_mode)
    except OSError:
        return 0o666 & ~_umask()


def _temp_file(path: Path) -> tuple[int, str]:
    """A new temp file beside `path` (its name cut short: a legal long name stays legal)."""
    return tempfile.mkstemp(dir=path.parent, prefix=f"{TEMP_PREFIX}{path.name[:64]}.")


def output_file_problem(path: Path) -> str | None:
    """Why a file could not be written at `path` (None if it can be tried): checked before a
    command's work, so that work is not lost to a name that was never usable. Where the
    folder exists, a temp file is made there and removed, as the write will."""
    try:
        path = _write_target(Path(path))
        is_folder = path.is_dir()
    except OSError as err:  # e.g. a name longer than the file system takes
        return (err.strerror or str(err)).lower()
    if _is_special(path):
        return None if os.access(path, os.W_OK) else "cannot be written (permission denied)"
    if is_folder:
        return "is a folder; give a file name"
    if path.parent.is_dir():
        try:
            if len(os.fsencode(path.name)) > os.pathconf(path.parent, "PC_NAME_MAX"):
                return "file name too long"
        except OSError:
            pass
    return output_folder_problem(path.parent)


def output_folder_problem(folder: Path) -> str | None:
    """Why files could not be written in `folder` (made if missing), None if they can: its
    nearest existing folder must take a temp file, which is made there and removed."""
    for existing in (Path(folder), *Path(folder).parents):
        if existing.exists():
            if not existing.is_dir():
                return f"{existing} is a file, not a folder"
            try:
                _probe(existing)
            except OSError as err:
                return f"cannot write in {existing} ({err.strerror or err})"
            return None
    return None


def check_writable(folder: Path, what: str = "run folders",
                   fix: str = "choose another with --runs-dir") -> None:
    """Make `folder` (if needed) and prove a file can be created there, before any work; what
    cannot is one line naming `what` the folder is for and the `fix`."""
    folder = Path(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        _probe(folder)
    except OSError as err:
        raise AttncliError(f"{folder}: cannot write {what} here ({err.strerror or err}); {fix}"
                           ) from None


def _probe(folder: Path) -> None:
    """The one write probe: a temp file made in `folder` and removed, as a write will make
    one; raises the OSError that says why it cannot."""
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=f"{TEMP_PREFIX}probe.")
    os.close(fd)
    Path(tmp).unlink(missing_ok=True)


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: Path, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=1, ensure_ascii=False) + "\n")


@contextmanager
def staged_folder(final: Path) -> Iterator[Path]:
    """Yield an empty temp folder beside `final`; on success it becomes `final` in one rename.

    Every file in it and the folder itself are fsynced before the rename, and the parent after
    it. On any error (or a kill) `final` is untouched; the temp folder is removed on errors, and
    a kill leaves a `.tmp-` folder that `remove_temp_entries` clears later. `final` must not
    exist when the block ends.
    """
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=final.parent, prefix=f"{TEMP_PREFIX}{final.name}."))
    try:
        os.chmod(staging, 0o777 & ~_umask())  # a folder as mkdir makes one, not mkdtemp's 0700
        yield staging
        for item in staging.iterdir():
            fsync_path(item)
        fsync_path(staging)
        os.rename(staging, final)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    fsync_path(final.parent)


@contextmanager
def replaced_folder(final: Path) -> Iterator[Path]:
    """`staged_folder` for a `final` that may exist: the old folder is renamed aside just before
    the new one is renamed in, and deleted after. A kill leaves the old folder or the new one
    at `final` (between the two renames, the old one under a `.tmp-` name); an error restores
    the old one."""
    final = Path(final)
    aside = final.with_name(f"{TEMP_PREFIX}{final.name}.{os.urandom(4).hex()}.old")
    moved = False
    try:
        with staged_folder(final) as staging:
            yield staging
            if final.exists():
                os.rename(final, aside)
                moved = True
    except BaseException:
        if moved and not final.exists():
            os.rename(aside, final)
        raise
    if moved:
        shutil.rmtree(aside, ignore_errors=True)


def remove_folder(folder: Path) -> None:
    """Delete a folder so that a kill midway leaves a `.tmp-` name, never a half-empty original."""
    folder = Path(folder)
    doomed = folder.with_name(f"{TEMP_PREFIX}{folder.name}.{os.urandom(4).hex()}.removing")
    os.rename(folder, doomed)
    shutil.rmtree(doomed)


def remove_temp_entries(folder: Path, name: str = "*") -> None:
    """Clear what interrupted writes of `name` (a glob) left in `folder`. Only where no live
    process can be writing them: a run's own files under its run lock, a shared entry under its
    `entry_lock`."""
    for item in Path(folder).glob(f"{TEMP_PREFIX}{name}"):
        _remove_entry(item)


def _remove_entry(item: Path) -> None:
    if item.is_dir():
        shutil.rmtree(item, ignore_errors=True)
    else:
        item.unlink(missing_ok=True)


@contextmanager
def entry_lock(final: Path, say: Callable[[str], None] | None = None) -> Iterator[None]:
    """Hold the lock of `final`, an entry several processes may build at once (a data cache
    entry, an export), and clear what killed builds of it left.

    `filelock`'s lock on `.NAME.lock` beside it: builders of one entry take turns, so while
    one holds it no other live process is writing the entry, and every staged folder of it is
    a killed build's. The operating system releases the lock when its process ends however it
    ends, on this host or another sharing the folder (where the file system has no locks,
    filelock's marker file: one whose process is gone from this host counts as released).
    Waiting is said (`say`) once: the holder may take minutes.
    """
    # Readable and writable by every user: a cache folder may be shared by several.
    lock = filelock.FileLock(final.parent / f".{final.name}.lock", mode=0o666)
    try:
        lock.acquire(timeout=0)
    except filelock.Timeout:
        if say is not None:
            say(f"waiting for another process that is building {final}")
        lock.acquire()
    try:
        _remove_killed_builds(final)
        yield
    finally:
        lock.release()


def _remove_killed_builds(final: Path) -> None:
    """Remove the temp entries of `final` alone: its staged folders (`staged_folder`'s names),
    an old folder renamed aside (`replaced_folder`) or one being removed (`remove_folder`).
    Not those of another entry whose name starts with `final`'s and a dot (an export `model`
    beside `model.int8`): that one has a lock of its own."""
    own = re.compile(rf"{re.escape(TEMP_PREFIX + final.name)}\.[a-z0-9_]+(\.(old|removing))?")
    for item in final.parent.iterdir():
        if own.fullmatch(item.name):
            _remove_entry(item)
